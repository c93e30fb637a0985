//! A tiny BERT with random weights and a small WordPiece tokenizer, written to a temporary model
//! directory, so the embedder's tests (and, with the feature `testing`, the tests of the crates
//! above) run without the real model.

use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::bert::{BertModel, Config};

/// The tiny model's vector length.
pub const HIDDEN: usize = 32;

const WORDS: &[&str] = &[
    "the", "cat", "sat", "on", "mat", "dog", "ran", "in", "park", "bees", "make", "honey", "stock", "market", "fell",
    "today", "query", ":", ".", ",",
];

/// A tokenizer.json whose own padding and truncation are fixed at 16 tokens, as
/// all-MiniLM-L6-v2's are at 128: the embedder must override both.
pub fn tokenizer_json() -> String {
    let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"].iter().map(|s| s.to_string()).collect();
    vocab.extend(WORDS.iter().map(|s| s.to_string()));
    for c in 'a'..='z' {
        vocab.push(c.to_string());
        vocab.push(format!("##{c}"));
    }
    let vocab_json: Vec<String> = vocab.iter().enumerate().map(|(i, t)| format!("{t:?}: {i}")).collect();
    let added: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                r#"{{"id": {i}, "content": "{t}", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}}"#
            )
        })
        .collect();
    format!(
        r###"{{
  "version": "1.0",
  "truncation": {{"direction": "Right", "max_length": 16, "strategy": "LongestFirst", "stride": 0}},
  "padding": {{"strategy": {{"Fixed": 16}}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}},
  "added_tokens": [{added}],
  "normalizer": {{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}},
  "pre_tokenizer": {{"type": "BertPreTokenizer"}},
  "post_processor": {{
    "type": "TemplateProcessing",
    "single": [{{"SpecialToken": {{"id": "[CLS]", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}, {{"SpecialToken": {{"id": "[SEP]", "type_id": 0}}}}],
    "pair": [{{"SpecialToken": {{"id": "[CLS]", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}, {{"SpecialToken": {{"id": "[SEP]", "type_id": 0}}}}, {{"Sequence": {{"id": "B", "type_id": 1}}}}, {{"SpecialToken": {{"id": "[SEP]", "type_id": 1}}}}],
    "special_tokens": {{"[CLS]": {{"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}}, "[SEP]": {{"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}}}
  }},
  "decoder": {{"type": "WordPiece", "prefix": "##", "cleanup": true}},
  "model": {{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {{{vocab}}}}}
}}"###,
        added = added.join(", "),
        vocab = vocab_json.join(", "),
    )
}

fn vocab_size() -> usize {
    4 + WORDS.len() + 2 * 26
}

fn config() -> Config {
    serde_json::from_value(serde_json::json!({
        "vocab_size": vocab_size(),
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "max_position_embeddings": 128,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "classifier_dropout": null,
        "model_type": "bert"
    }))
    .expect("the tiny config is valid")
}

/// Writes the tiny model into `dir`: random weights, config, tokenizer and manifest
/// (`pooling` is "mean" or "cls"; queries get the instruction "query: ").
pub fn write(dir: &Path, pooling: &str) {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    BertModel::load(vb, &config()).expect("random tiny BERT");
    varmap.save(dir.join("model.safetensors")).expect("save weights");
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec(&serde_json::json!({
            "vocab_size": vocab_size(), "hidden_size": HIDDEN, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0, "max_position_embeddings": 128, "type_vocab_size": 2,
            "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
            "model_type": "bert"
        }))
        .expect("json"),
    )
    .expect("write config");
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json()).expect("write tokenizer");
    std::fs::write(
        dir.join(crate::MANIFEST_FILE),
        format!(
            r#"{{"name": "tiny", "format": "bert-safetensors", "weights": "model.safetensors",
"tokenizer": "tokenizer.json", "config": "config.json", "pooling": "{pooling}",
"max_tokens": 64, "query_instruction": "query: "}}"#
        ),
    )
    .expect("write manifest");
}
