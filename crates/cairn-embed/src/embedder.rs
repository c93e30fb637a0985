//! [`Embedder`]: a sentence-embedding model loaded from a local directory, turning passages and
//! queries into unit-length vectors.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::backend::{Backend, TokenBatch, TokenVectors};
use crate::error::{Error, Result};
use crate::manifest::{ModelFormat, ModelManifest, Pooling};
use crate::tokenizer::{TextTokenizer, Tokens};

/// How a model is run.
#[derive(Clone, Debug)]
pub struct EmbedOptions {
    /// Threads used to embed; 0 means every core. ONNX models run one single-threaded
    /// session per thread, each taking whole batches; candle models run each batch on this
    /// many threads.
    pub threads: usize,
    /// The most texts in one batch; 0 picks the runtime's best: 1 for ONNX (padding costs
    /// more than batching saves there), 16 for candle.
    pub batch_size: usize,
    /// The most token positions (texts × padded length) in one batch, which bounds memory.
    pub max_batch_tokens: usize,
    /// Cuts texts shorter than the model's own limit, if set (never raises it).
    pub max_tokens: Option<usize>,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions { threads: 0, batch_size: 0, max_batch_tokens: 8192, max_tokens: None }
    }
}

/// What a loaded model is: the facts an index records beside its vectors, so vectors of another
/// model are never mixed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// The model's name from its manifest.
    pub name: String,
    /// The length of its vectors.
    pub dimension: usize,
    /// The sha256 of the weights file.
    pub weights_sha256: [u8; 32],
    /// The most tokens of one text the model is given.
    pub max_tokens: usize,
    /// The text put before queries, if any.
    pub query_instruction: Option<String>,
    /// The directory it was loaded from.
    pub dir: PathBuf,
}

impl ModelInfo {
    /// The weights' sha256 in lowercase hex.
    pub fn weights_sha256_hex(&self) -> String {
        hex::encode(self.weights_sha256)
    }
}

/// A sentence-embedding model. Shareable between threads (`Send + Sync`): each replica of the
/// model runs one batch at a time, and a call spreads its batches over the replicas.
pub struct Embedder {
    info: ModelInfo,
    manifest: ModelManifest,
    tokenizer: TextTokenizer,
    replicas: Vec<Box<dyn Backend>>,
    options: EmbedOptions,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder").field("info", &self.info).field("options", &self.options).finish_non_exhaustive()
    }
}

fn available_threads(requested: usize) -> usize {
    if requested > 0 { requested } else { std::thread::available_parallelism().map_or(1, |n| n.get()) }
}

fn sha256_file(path: &Path) -> Result<[u8; 32]> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

impl Embedder {
    /// Loads the model in `dir` (see [`ModelManifest::load`]) with default options.
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_with(dir, EmbedOptions::default())
    }

    /// Loads the model in `dir` with `options`.
    pub fn load_with(dir: &Path, options: EmbedOptions) -> Result<Self> {
        let manifest = ModelManifest::load(dir)?;
        let weights = ModelManifest::resolve(dir, &manifest.weights);
        let threads = available_threads(options.threads);
        let (replicas, batch_size) = match manifest.format {
            ModelFormat::Onnx => load_onnx(dir, &manifest, &weights, threads)?,
            ModelFormat::BertSafetensors => load_candle(dir, &manifest, &weights, threads)?,
        };
        let options = EmbedOptions {
            batch_size: if options.batch_size == 0 { batch_size } else { options.batch_size },
            ..options
        };
        let weights_sha256 = sha256_file(&weights)?;
        let tokenizer = TextTokenizer::from_file(
            &ModelManifest::resolve(dir, &manifest.tokenizer),
            effective_max_tokens(&manifest, &options),
        )?;
        Self::assemble(dir, manifest, tokenizer, replicas, weights_sha256, options)
    }

    /// Puts the parts together and learns the dimension from one probe text.
    pub(crate) fn assemble(
        dir: &Path,
        manifest: ModelManifest,
        tokenizer: TextTokenizer,
        replicas: Vec<Box<dyn Backend>>,
        weights_sha256: [u8; 32],
        options: EmbedOptions,
    ) -> Result<Self> {
        if options.batch_size == 0 || options.max_batch_tokens == 0 || replicas.is_empty() {
            return Err(Error::InvalidArgument(
                "batch_size, max_batch_tokens and the replica count must be positive".into(),
            ));
        }
        let mut embedder = Embedder {
            info: ModelInfo {
                name: manifest.name.clone(),
                dimension: 0,
                weights_sha256,
                max_tokens: tokenizer.max_tokens(),
                query_instruction: manifest.query_instruction.clone(),
                dir: dir.to_path_buf(),
            },
            manifest,
            tokenizer,
            replicas,
            options,
        };
        let probe = embedder.embed_raw(&["dimension probe"])?;
        embedder.info.dimension = probe.first().map_or(0, Vec::len);
        if embedder.info.dimension == 0 {
            return Err(Error::ModelOutput("the model returned an empty vector".into()));
        }
        Ok(embedder)
    }

    /// What the model is.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The length of the model's vectors.
    pub fn dimension(&self) -> usize {
        self.info.dimension
    }

    /// The model's manifest.
    pub fn manifest(&self) -> &ModelManifest {
        &self.manifest
    }

    /// The model's tokenizer (for [`crate::Splitter`]).
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// Embeds passages (documents or parts of them): one unit-length vector per text, in order.
    /// Texts longer than the model's limit are cut; split them first with [`crate::Splitter`].
    pub fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        match self.manifest.passage_instruction.as_deref() {
            Some(prefix) if !prefix.is_empty() => {
                let owned: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}")).collect();
                let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
                self.embed_raw(&refs)
            }
            _ => self.embed_raw(texts),
        }
    }

    /// Embeds a search query, with the model's query instruction put before it if it has one.
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        let text = match self.manifest.query_instruction.as_deref() {
            Some(prefix) => format!("{prefix}{query}"),
            None => query.to_owned(),
        };
        let mut v = self.embed_raw(&[text.as_str()])?;
        v.pop().ok_or_else(|| Error::ModelOutput("no vector for the query".into()))
    }

    /// Embeds texts as given: tokenize, sort by length so batches carry little padding, run,
    /// pool, normalize, and put the vectors back in the callers' order.
    fn embed_raw(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let tokens: Vec<Tokens> = texts.iter().map(|t| self.tokenizer.encode(t)).collect::<Result<_>>()?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(tokens[i].ids.len()));
        let mut batches: Vec<&[usize]> = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let longest = tokens[order[start]].ids.len().max(1);
            let fit = (self.options.max_batch_tokens / longest).max(1);
            let end = (start + self.options.batch_size.min(fit)).min(order.len());
            batches.push(&order[start..end]);
            start = end;
        }
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let workers = self.replicas.len().min(batches.len());
        if workers <= 1 {
            for members in &batches {
                self.run_batch(&*self.replicas[0], &tokens, members, &mut out)?;
            }
            return Ok(out);
        }
        // Several replicas: each thread takes the next batch until none is left.
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<Result<Vec<Pooled>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self.replicas[..workers]
                .iter()
                .map(|replica| {
                    let (next, batches, tokens) = (&next, &batches, &tokens);
                    scope.spawn(move || {
                        let mut done = Vec::new();
                        loop {
                            let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(members) = batches.get(b) else {
                                return Ok(done);
                            };
                            let vectors = self.forward_pooled(&**replica, tokens, members)?;
                            done.extend(members.iter().copied().zip(vectors));
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::Runtime("an embedding thread panicked".into()))))
                .collect()
        });
        for r in results {
            for (i, v) in r? {
                out[i] = v;
            }
        }
        Ok(out)
    }

    fn run_batch(
        &self,
        replica: &dyn Backend,
        tokens: &[Tokens],
        members: &[usize],
        out: &mut [Vec<f32>],
    ) -> Result<()> {
        let vectors = self.forward_pooled(replica, tokens, members)?;
        for (&i, v) in members.iter().zip(vectors) {
            out[i] = v;
        }
        Ok(())
    }

    /// Runs one batch and pools each row, in `members`' order.
    fn forward_pooled(&self, replica: &dyn Backend, tokens: &[Tokens], members: &[usize]) -> Result<Vec<Vec<f32>>> {
        let longest = members.iter().map(|&i| tokens[i].ids.len()).max().unwrap_or(0).max(1);
        let batch = self.pad(tokens, members, longest);
        let vectors = replica.forward(&batch)?;
        (0..members.len()).map(|row| pool(&vectors, &batch, row, self.manifest.pooling, self.info.dimension)).collect()
    }

    fn pad(&self, tokens: &[Tokens], members: &[usize], cols: usize) -> TokenBatch {
        let rows = members.len();
        let pad = i64::from(self.tokenizer.pad_id());
        let mut batch = TokenBatch {
            rows,
            cols,
            ids: vec![pad; rows * cols],
            mask: vec![0; rows * cols],
            type_ids: vec![0; rows * cols],
        };
        for (row, &i) in members.iter().enumerate() {
            let t = &tokens[i];
            for (col, (&id, &ty)) in t.ids.iter().zip(&t.type_ids).enumerate() {
                batch.ids[row * cols + col] = i64::from(id);
                batch.mask[row * cols + col] = 1;
                batch.type_ids[row * cols + col] = i64::from(ty);
            }
        }
        batch
    }
}

/// Replicas of a model and the batch size that suits their runtime.
type Replicas = (Vec<Box<dyn Backend>>, usize);

/// One single-threaded onnxruntime session per thread; batches of one text (padding costs more
/// than batching saves, and int8 activations are quantized per batch, so a text's vector would
/// depend on its batch neighbours).
#[cfg(feature = "onnx")]
fn load_onnx(dir: &Path, manifest: &ModelManifest, weights: &Path, threads: usize) -> Result<Replicas> {
    let runtime = manifest.runtime.as_deref().map(|r| ModelManifest::resolve(dir, r));
    let sessions = (0..threads)
        .map(|_| {
            crate::backend_onnx::OnnxBackend::load(weights, runtime.as_deref(), 1)
                .map(|b| Box::new(b) as Box<dyn Backend>)
        })
        .collect::<Result<_>>()?;
    Ok((sessions, 1))
}

#[cfg(not(feature = "onnx"))]
fn load_onnx(_: &Path, _: &ModelManifest, _: &Path, _: usize) -> Result<Replicas> {
    Err(Error::Unsupported("ONNX models need cairn-embed's `onnx` feature".into()))
}

/// One candle model whose matrix products use every thread; batches of 16 texts.
#[cfg(feature = "candle")]
fn load_candle(dir: &Path, manifest: &ModelManifest, weights: &Path, threads: usize) -> Result<Replicas> {
    let config = manifest
        .config
        .as_deref()
        .map(|c| ModelManifest::resolve(dir, c))
        .ok_or_else(|| Error::manifest(dir, "a bert-safetensors model needs `config`"))?;
    let model = crate::backend_candle::CandleBackend::load(weights, &config, threads)?;
    Ok((vec![Box::new(model) as Box<dyn Backend>], 16))
}

#[cfg(not(feature = "candle"))]
fn load_candle(_: &Path, _: &ModelManifest, _: &Path, _: usize) -> Result<Replicas> {
    Err(Error::Unsupported("bert-safetensors models need cairn-embed's `candle` feature".into()))
}

fn effective_max_tokens(manifest: &ModelManifest, options: &EmbedOptions) -> usize {
    options.max_tokens.map_or(manifest.max_tokens, |m| m.min(manifest.max_tokens))
}

/// A text's position in the caller's slice and its vector.
type Pooled = (usize, Vec<f32>);

/// Pools one row of token vectors into a unit-length vector. `expected_dim` is 0 while the
/// dimension is still unknown (the probe at load).
fn pool(
    vectors: &TokenVectors,
    batch: &TokenBatch,
    row: usize,
    pooling: Pooling,
    expected_dim: usize,
) -> Result<Vec<f32>> {
    let dim = vectors.dim;
    if expected_dim != 0 && dim != expected_dim {
        return Err(Error::Dimension { expected: expected_dim, got: dim });
    }
    if vectors.data.len() != batch.rows * batch.cols * dim {
        return Err(Error::ModelOutput(format!(
            "{} values for a [{}, {}, {dim}] output",
            vectors.data.len(),
            batch.rows,
            batch.cols
        )));
    }
    let token = |col: usize| {
        let at = (row * batch.cols + col) * dim;
        &vectors.data[at..at + dim]
    };
    let mut v = match pooling {
        Pooling::Cls => token(0).to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f32; dim];
            let mut n = 0usize;
            for col in 0..batch.cols {
                if batch.mask[row * batch.cols + col] != 0 {
                    for (s, x) in sum.iter_mut().zip(token(col)) {
                        *s += x;
                    }
                    n += 1;
                }
            }
            let n = n.max(1) as f32;
            sum.iter_mut().for_each(|s| *s /= n);
            sum
        }
    };
    normalize(&mut v)?;
    Ok(v)
}

/// Scales `v` to unit length; a zero or non-finite vector is a model error.
pub(crate) fn normalize(v: &mut [f32]) -> Result<()> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return Err(Error::ModelOutput(format!("vector norm is {norm}, cannot normalize")));
    }
    v.iter_mut().for_each(|x| *x /= norm);
    Ok(())
}

#[cfg(all(test, feature = "candle"))]
mod tests {
    use super::*;
    use crate::test_model;

    fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    fn tiny(pooling: &str, options: EmbedOptions) -> (tempfile::TempDir, Embedder) {
        let dir = tempfile::tempdir().unwrap();
        test_model::write(dir.path(), pooling);
        let e = Embedder::load_with(dir.path(), options).unwrap();
        (dir, e)
    }

    #[test]
    fn embedder_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Embedder>();
        let (_dir, e) = tiny("mean", EmbedOptions::default());
        let e = std::sync::Arc::new(e);
        let handles: Vec<_> = (0..2)
            .map(|i| {
                let e = std::sync::Arc::clone(&e);
                std::thread::spawn(move || e.embed_query(if i == 0 { "cat" } else { "dog" }).unwrap())
            })
            .collect();
        let got: Vec<Vec<f32>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(close(&got[0], &e.embed_query("cat").unwrap(), 1e-6));
        assert!(close(&got[1], &e.embed_query("dog").unwrap(), 1e-6));
    }

    #[test]
    fn loads_a_tiny_model_and_records_what_it_is() {
        let (dir, e) = tiny("mean", EmbedOptions::default());
        assert_eq!(e.dimension(), test_model::HIDDEN);
        assert_eq!(e.info().name, "tiny");
        assert_eq!(e.info().max_tokens, 64);
        let sha = sha256_file(&dir.path().join("model.safetensors")).unwrap();
        assert_eq!(e.info().weights_sha256, sha);
        assert_eq!(e.info().weights_sha256_hex().len(), 64);
    }

    #[test]
    fn vectors_are_unit_length_deterministic_and_in_order() {
        for pooling in ["mean", "cls"] {
            let (_dir, e) = tiny(pooling, EmbedOptions::default());
            let texts = ["the cat sat on the mat.", "bees make honey", "stock market fell today"];
            let a = e.embed_passages(&texts).unwrap();
            let b = e.embed_passages(&texts).unwrap();
            assert_eq!(a, b);
            assert_eq!(a.len(), 3);
            for v in &a {
                let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
            }
            // Different texts, different vectors; order follows the input.
            assert!(cosine(&a[0], &a[1]) < 0.9999);
            let reversed = e.embed_passages(&[texts[2], texts[1], texts[0]]).unwrap();
            assert!(close(&reversed[0], &a[2], 1e-5));
            assert!(close(&reversed[2], &a[0], 1e-5));
        }
    }

    #[test]
    fn padding_in_a_batch_does_not_change_a_vector() {
        // Texts of very different lengths share batches: padded positions must be masked out.
        for pooling in ["mean", "cls"] {
            let (_dir, e) = tiny(pooling, EmbedOptions::default());
            let texts = [
                "cat",
                "the dog ran in the park and the cat sat on the mat.",
                "bees make honey, bees make honey, bees make honey in the park",
                "fell",
            ];
            let batched = e.embed_passages(&texts).unwrap();
            for (t, v) in texts.iter().zip(&batched) {
                let alone = e.embed_passages(&[t]).unwrap();
                assert!(close(v, &alone[0], 1e-4), "{pooling}: {t}");
            }
        }
    }

    #[test]
    fn the_tokenizer_files_fixed_padding_and_truncation_are_overridden() {
        let (_dir, e) = tiny("mean", EmbedOptions::default());
        // 45 tokens ("and" is three): past the file's 16, within the manifest's 64. Cut at the
        // file's 16 tokens the text would be its first 12 words ([CLS], 14 tokens, [SEP]).
        let long = "the cat sat on the mat and the dog ran in the park ".repeat(3);
        let words: Vec<&str> = long.split_whitespace().collect();
        let prefix = words[..12].join(" ");
        let v_long = e.embed_passages(&[&long]).unwrap();
        let v_prefix = e.embed_passages(&[&prefix]).unwrap();
        assert!(!close(&v_long[0], &v_prefix[0], 1e-4));
        assert_eq!(e.tokenizer().count_tokens(&long).unwrap(), 45);
        assert_eq!(e.tokenizer().count_tokens(&prefix).unwrap(), 14);
    }

    #[test]
    fn texts_past_the_limit_are_cut_at_max_tokens() {
        let (_dir, e) = tiny("mean", EmbedOptions { max_tokens: Some(10), ..EmbedOptions::default() });
        assert_eq!(e.info().max_tokens, 10);
        // 10 tokens with [CLS] and [SEP]: the first 8 words count.
        let words = "the cat sat on the mat the dog ran in the park";
        let first8 = "the cat sat on the mat the dog";
        let a = e.embed_passages(&[words]).unwrap();
        let b = e.embed_passages(&[first8]).unwrap();
        assert!(close(&a[0], &b[0], 1e-5));
    }

    #[test]
    fn queries_get_the_instruction() {
        let (_dir, e) = tiny("cls", EmbedOptions::default());
        let q = e.embed_query("bees make honey").unwrap();
        let p = e.embed_passages(&["query: bees make honey"]).unwrap();
        let plain = e.embed_passages(&["bees make honey"]).unwrap();
        assert!(close(&q, &p[0], 1e-6));
        assert!(!close(&q, &plain[0], 1e-4));
    }

    #[test]
    fn several_replicas_give_the_same_vectors_as_one() {
        let dir = tempfile::tempdir().unwrap();
        test_model::write(dir.path(), "mean");
        let one =
            Embedder::load_with(dir.path(), EmbedOptions { threads: 1, batch_size: 2, ..EmbedOptions::default() })
                .unwrap();
        let manifest = ModelManifest::load(dir.path()).unwrap();
        let replicas: Vec<Box<dyn Backend>> = (0..3)
            .map(|_| {
                let b = crate::backend_candle::CandleBackend::load(
                    &dir.path().join("model.safetensors"),
                    &dir.path().join("config.json"),
                    1,
                )
                .unwrap();
                Box::new(b) as Box<dyn Backend>
            })
            .collect();
        let tokenizer = TextTokenizer::from_file(&dir.path().join("tokenizer.json"), manifest.max_tokens).unwrap();
        let three = Embedder::assemble(
            dir.path(),
            manifest,
            tokenizer,
            replicas,
            [0; 32],
            EmbedOptions { batch_size: 2, ..EmbedOptions::default() },
        )
        .unwrap();
        let texts: Vec<String> =
            (0..23).map(|i| "the cat sat on the mat ".repeat(1 + i % 5) + &"bees ".repeat(i % 3)).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let a = one.embed_passages(&refs).unwrap();
        let b = three.embed_passages(&refs).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert!(close(x, y, 1e-4));
        }
    }

    #[test]
    fn load_errors_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(Embedder::load(dir.path()), Err(Error::Manifest { .. })));
        test_model::write(dir.path(), "mean");
        std::fs::write(dir.path().join("model.safetensors"), b"not safetensors").unwrap();
        assert!(matches!(Embedder::load(dir.path()), Err(Error::Runtime(_))));
        test_model::write(dir.path(), "mean");
        std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
        assert!(matches!(Embedder::load(dir.path()), Err(Error::Io { .. })));
    }
}
