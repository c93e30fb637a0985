//! cairn-embed: the parts of semantic search that do not depend on storage.
//!
//! - [`Embedder`]: a sentence-embedding model loaded from a local directory
//!   (`scripts/install-model.sh` installs one), turning passages and queries into unit vectors.
//!   ONNX models run through onnxruntime (feature `onnx`), BERT safetensors through candle
//!   (feature `candle`). Choice of model and figures: `docs/design/2026-12-07-embedding-model.md`.
//! - [`Splitter`]: long texts cut into overlapping token windows, as byte ranges.
//! - [`QuantizedVector`]: int8 vectors with a per-vector scale, and their byte encoding.
//! - [`VectorIndex`]: an in-memory int8 matrix with exact top-k search and, above a size
//!   threshold, a 1-bit prefilter with int8 rescoring.
//! - [`fusion`]: reciprocal rank fusion, min-max convex combination, per-document aggregation.

mod backend;
#[cfg(feature = "candle")]
mod backend_candle;
#[cfg(feature = "onnx")]
mod backend_onnx;
mod embedder;
mod error;
pub mod fusion;
mod index;
mod kernels;
mod manifest;
mod quant;
mod splitter;
#[cfg(any(all(test, feature = "candle"), feature = "testing"))]
pub mod test_model;
mod tokenizer;

pub use embedder::{EmbedOptions, Embedder, ModelInfo};
pub use error::{Error, Result};
pub use index::{Hit, IndexOptions, VectorIndex};
pub use manifest::{MANIFEST_FILE, ModelFormat, ModelManifest, Pooling};
pub use quant::{MAX_DIMENSION, QuantizedVector, VECTOR_MAGIC, VECTOR_OVERHEAD, VECTOR_VERSION};
pub use splitter::Splitter;
pub use tokenizer::TextTokenizer;
