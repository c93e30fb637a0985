//! Checks against the installed model (`CAIRN_EMBED_MODEL`, a directory that
//! `scripts/install-model.sh` printed): a few sentences, so they take seconds.

use std::path::PathBuf;

use cairn_embed::{EmbedOptions, Embedder, QuantizedVector, Splitter, VectorIndex};

fn model_dir() -> PathBuf {
    let dir = std::env::var_os("CAIRN_EMBED_MODEL")
        .expect("set CAIRN_EMBED_MODEL to the directory scripts/install-model.sh printed");
    PathBuf::from(dir)
}

fn load() -> Embedder {
    Embedder::load_with(&model_dir(), EmbedOptions { threads: 2, ..EmbedOptions::default() })
        .expect("load the installed model")
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
#[ignore = "needs the installed model: CAIRN_EMBED_MODEL"]
fn real_model_loads_with_its_dimension_and_hash() {
    let e = load();
    assert_eq!(e.dimension(), 384);
    assert!(!e.info().name.is_empty());
    assert_eq!(e.info().weights_sha256_hex().len(), 64);
    let v = e.embed_passages(&["a short sentence"]).unwrap();
    assert_eq!(v[0].len(), 384);
    let norm: f32 = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4);
}

#[test]
#[ignore = "needs the installed model: CAIRN_EMBED_MODEL"]
fn real_model_puts_paraphrases_closer_than_unrelated_sentences() {
    let e = load();
    let v = e
        .embed_passages(&[
            "The cat sat on the mat.",
            "A cat was sitting on the rug.",
            "Quarterly revenue rose by eight percent.",
            "The company's earnings grew this quarter.",
        ])
        .unwrap();
    assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]) + 0.1);
    assert!(cosine(&v[2], &v[3]) > cosine(&v[2], &v[1]) + 0.1);
}

#[test]
#[ignore = "needs the installed model: CAIRN_EMBED_MODEL"]
fn real_model_finds_the_passage_that_answers_a_query() {
    let e = load();
    let passages = [
        "Honey is made by bees from the nectar of flowers.",
        "The stock market fell sharply on Monday.",
        "Rust is a systems programming language focused on safety.",
        "The Eiffel Tower is in Paris.",
    ];
    let vectors = e.embed_passages(&passages).unwrap();
    let mut index = VectorIndex::new(e.dimension());
    for (i, v) in vectors.iter().enumerate() {
        index.insert(i as u64, &QuantizedVector::quantize(v).unwrap()).unwrap();
    }
    for (query, want) in [
        ("where does honey come from", 0),
        ("which language prevents memory bugs", 2),
        ("famous landmark in France", 3),
    ] {
        let q = e.embed_query(query).unwrap();
        let hits = index.search(&q, 2, None).unwrap();
        assert_eq!(hits[0].id, want, "{query}");
    }
}

#[test]
#[ignore = "needs the installed model: CAIRN_EMBED_MODEL"]
fn real_model_is_deterministic_and_batch_independent() {
    let e = load();
    let texts = ["short", "a somewhat longer sentence about databases and storage engines", "medium length text here"];
    let a = e.embed_passages(&texts).unwrap();
    let b = e.embed_passages(&texts).unwrap();
    assert_eq!(a, b);
    for (t, v) in texts.iter().zip(&a) {
        let alone = e.embed_passages(&[t]).unwrap();
        assert!(alone[0].iter().zip(v).all(|(x, y)| (x - y).abs() < 1e-4));
    }
}

#[test]
#[ignore = "needs the installed model: CAIRN_EMBED_MODEL"]
fn real_tokenizer_splits_a_long_text_into_overlapping_passages() {
    let e = load();
    let text = "Storage engines keep data safe across crashes. ".repeat(120);
    let splitter = Splitter::new(256, 32).unwrap();
    let ranges = splitter.split(e.tokenizer(), &text).unwrap();
    assert!(ranges.len() >= 4, "{} passages", ranges.len());
    for pair in ranges.windows(2) {
        assert!(pair[1].start < pair[0].end, "consecutive passages overlap");
    }
    assert_eq!(ranges.last().map(|r| r.end), Some(text.trim_end().len()));
    for r in &ranges {
        let n = e.tokenizer().count_tokens(&text[r.clone()]).unwrap();
        assert!(n <= 256, "{n} tokens");
    }
}
