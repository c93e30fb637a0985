//! ONNX models through onnxruntime (the `ort` crate), with the runtime library loaded at run time
//! from a path (`load-dynamic`), so no build step downloads or compiles it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;

use crate::backend::{Backend, TokenBatch, TokenVectors};
use crate::error::{Error, Result};

/// The runtime library loaded into this process: onnxruntime can be loaded once, so the first
/// path wins and later models reuse it.
static RUNTIME: OnceLock<std::result::Result<Option<PathBuf>, String>> = OnceLock::new();

fn init_runtime(library: Option<&Path>) -> Result<()> {
    let loaded = RUNTIME.get_or_init(|| match library {
        Some(path) => match ort::init_from(path) {
            Ok(builder) => {
                builder.commit();
                Ok(Some(path.to_path_buf()))
            }
            Err(e) => Err(format!("loading {}: {e}", path.display())),
        },
        // ort loads ORT_DYLIB_PATH, or libonnxruntime.so from the library path, on first use.
        None => Ok(None),
    });
    loaded.as_ref().map(|_| ()).map_err(|e| Error::Runtime(e.clone()))
}

fn rt(e: impl std::fmt::Display) -> Error {
    Error::Runtime(e.to_string())
}

/// A loaded ONNX session. `Session::run` takes `&mut self`, so concurrent calls queue on the mutex;
/// parallelism comes from onnxruntime's intra-op threads.
pub(crate) struct OnnxBackend {
    session: Mutex<Session>,
    has_type_ids: bool,
    output: String,
}

impl OnnxBackend {
    pub(crate) fn load(weights: &Path, runtime: Option<&Path>, threads: usize) -> Result<Self> {
        init_runtime(runtime)?;
        let session = Session::builder()
            .map_err(rt)?
            .with_optimization_level(GraphOptimizationLevel::Level3)
            .map_err(rt)?
            .with_intra_threads(threads)
            .map_err(rt)?
            .with_inter_threads(1)
            .map_err(rt)?
            .commit_from_file(weights)
            .map_err(|e| Error::Runtime(format!("{}: {e}", weights.display())))?;
        let inputs: Vec<String> = session.inputs().iter().map(|i| i.name().to_owned()).collect();
        for needed in ["input_ids", "attention_mask"] {
            if !inputs.iter().any(|n| n == needed) {
                return Err(Error::Unsupported(format!(
                    "{}: the ONNX graph has no input `{needed}` (inputs: {inputs:?})",
                    weights.display()
                )));
            }
        }
        if let Some(other) =
            inputs.iter().find(|n| !matches!(n.as_str(), "input_ids" | "attention_mask" | "token_type_ids"))
        {
            return Err(Error::Unsupported(format!(
                "{}: the ONNX graph takes an unknown input `{other}`",
                weights.display()
            )));
        }
        let outputs: Vec<String> = session.outputs().iter().map(|o| o.name().to_owned()).collect();
        let output = if outputs.iter().any(|n| n == "last_hidden_state") {
            "last_hidden_state".to_owned()
        } else {
            outputs
                .first()
                .cloned()
                .ok_or_else(|| Error::Unsupported(format!("{}: the ONNX graph has no output", weights.display())))?
        };
        Ok(OnnxBackend {
            has_type_ids: inputs.iter().any(|n| n == "token_type_ids"),
            session: Mutex::new(session),
            output,
        })
    }
}

impl Backend for OnnxBackend {
    fn forward(&self, batch: &TokenBatch) -> Result<TokenVectors> {
        let shape = [batch.rows as i64, batch.cols as i64];
        let mut inputs = ort::inputs![
            "input_ids" => Tensor::from_array((shape, batch.ids.clone())).map_err(rt)?,
            "attention_mask" => Tensor::from_array((shape, batch.mask.clone())).map_err(rt)?,
        ];
        if self.has_type_ids {
            inputs.push((
                "token_type_ids".into(),
                Tensor::from_array((shape, batch.type_ids.clone())).map_err(rt)?.into(),
            ));
        }
        let mut session = self.session.lock().map_err(|_| Error::Runtime("a previous inference panicked".into()))?;
        let outputs = session.run(inputs).map_err(rt)?;
        let value =
            outputs.get(&self.output).ok_or_else(|| Error::ModelOutput(format!("no output `{}`", self.output)))?;
        let (out_shape, data) = value.try_extract_tensor::<f32>().map_err(rt)?;
        let dims: &[i64] = out_shape;
        match dims {
            [r, c, d] if *r as usize == batch.rows && *c as usize == batch.cols && *d > 0 => {
                Ok(TokenVectors { dim: *d as usize, data: data.to_vec() })
            }
            _ => Err(Error::ModelOutput(format!(
                "output `{}` has shape {dims:?}, expected [{}, {}, dim]",
                self.output, batch.rows, batch.cols
            ))),
        }
    }
}
