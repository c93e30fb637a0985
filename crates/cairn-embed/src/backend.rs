//! The interface between the embedder and a model runtime: a padded batch of token ids in, token
//! vectors out. Pooling and normalization stay in [`crate::embedder`], shared by every runtime.

use crate::error::Result;

/// A padded batch: `rows` texts of `cols` tokens each, row-major.
pub(crate) struct TokenBatch {
    pub rows: usize,
    pub cols: usize,
    pub ids: Vec<i64>,
    pub mask: Vec<i64>,
    pub type_ids: Vec<i64>,
}

/// Token vectors of a batch: `[rows, cols, dim]`, row-major.
pub(crate) struct TokenVectors {
    pub dim: usize,
    pub data: Vec<f32>,
}

/// A model runtime holding one loaded model.
pub(crate) trait Backend: Send + Sync {
    /// Runs the encoder over a batch.
    fn forward(&self, batch: &TokenBatch) -> Result<TokenVectors>;
}
