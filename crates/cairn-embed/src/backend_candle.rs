//! BERT encoders stored as safetensors, run by candle (pure Rust, no runtime library).

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};

use crate::backend::{Backend, TokenBatch, TokenVectors};
use crate::error::{Error, Result};

fn rt(e: impl std::fmt::Display) -> Error {
    Error::Runtime(e.to_string())
}

/// A loaded BERT model and the thread pool its matrix products run in (candle parallelises
/// through rayon, so the pool's size is the model's thread count).
pub(crate) struct CandleBackend {
    model: BertModel,
    pool: rayon::ThreadPool,
}

impl CandleBackend {
    pub(crate) fn load(weights: &Path, config: &Path, threads: usize) -> Result<Self> {
        let config_bytes = std::fs::read(config).map_err(|e| Error::io(config, e))?;
        let config: Config =
            serde_json::from_slice(&config_bytes).map_err(|e| Error::manifest(config, e.to_string()))?;
        let data = std::fs::read(weights).map_err(|e| Error::io(weights, e))?;
        let vb = VarBuilder::from_buffered_safetensors(data, DType::F32, &Device::Cpu)
            .map_err(|e| Error::Runtime(format!("{}: {e}", weights.display())))?;
        Self::from_var_builder(vb, &config, threads)
    }

    /// Builds the backend from any weights source (tests build random weights in memory).
    pub(crate) fn from_var_builder(vb: VarBuilder<'_>, config: &Config, threads: usize) -> Result<Self> {
        let model = BertModel::load(vb, config).map_err(rt)?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("cairn-embed-{i}"))
            .build()
            .map_err(rt)?;
        Ok(CandleBackend { model, pool })
    }
}

impl Backend for CandleBackend {
    fn forward(&self, batch: &TokenBatch) -> Result<TokenVectors> {
        let shape = (batch.rows, batch.cols);
        let to_u32 = |v: &[i64]| v.iter().map(|&x| x as u32).collect::<Vec<u32>>();
        let ids = Tensor::from_vec(to_u32(&batch.ids), shape, &Device::Cpu).map_err(rt)?;
        let mask = Tensor::from_vec(to_u32(&batch.mask), shape, &Device::Cpu).map_err(rt)?;
        let types = Tensor::from_vec(to_u32(&batch.type_ids), shape, &Device::Cpu).map_err(rt)?;
        let out = self.pool.install(|| self.model.forward(&ids, &types, Some(&mask))).map_err(rt)?;
        let dims = out.dims().to_vec();
        match dims.as_slice() {
            [r, c, d] if *r == batch.rows && *c == batch.cols && *d > 0 => {
                Ok(TokenVectors { dim: *d, data: out.flatten_all().and_then(|t| t.to_vec1::<f32>()).map_err(rt)? })
            }
            _ => Err(Error::ModelOutput(format!(
                "BERT output has shape {dims:?}, expected [{}, {}, dim]",
                batch.rows, batch.cols
            ))),
        }
    }
}
