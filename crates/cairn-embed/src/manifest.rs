//! The description of a model directory: `cairn-model.json`, written by
//! `scripts/install-model.sh`, or inferred from a Hugging Face style directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The manifest's file name inside a model directory.
pub const MANIFEST_FILE: &str = "cairn-model.json";

/// How the weights are stored, and so which runtime runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelFormat {
    /// An ONNX graph with inputs `input_ids`, `attention_mask` (and optionally
    /// `token_type_ids`) and a `[batch, tokens, dim]` output, run by onnxruntime.
    Onnx,
    /// A BERT encoder in safetensors with a Hugging Face `config.json`, run by candle.
    BertSafetensors,
}

/// How token vectors become one text vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pooling {
    /// The first token's vector (`[CLS]`), as bge models are trained.
    Cls,
    /// The mean of the vectors of the tokens that are not padding, as sentence-transformers' MiniLM.
    Mean,
}

/// The contents of `cairn-model.json`: what a model directory holds and how to run it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelManifest {
    /// The model's name (for example `bge-small-en-v1.5-int8`).
    pub name: String,
    /// How the weights are stored.
    pub format: ModelFormat,
    /// The weights file, relative to the directory.
    pub weights: String,
    /// The Hugging Face `tokenizer.json`, relative to the directory.
    pub tokenizer: String,
    /// The Hugging Face `config.json` (needed by [`ModelFormat::BertSafetensors`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The onnxruntime shared library, relative to the directory or absolute (ONNX models only;
    /// when absent, `ORT_DYLIB_PATH` or the system's `libonnxruntime.so` is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// How token vectors are pooled.
    pub pooling: Pooling,
    /// The most tokens (special tokens included) the model takes in one text.
    pub max_tokens: usize,
    /// Text put before a query (bge: "Represent this sentence for searching relevant passages: ").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_instruction: Option<String>,
    /// Text put before a passage (none for the models installed by the script).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passage_instruction: Option<String>,
    /// Where the files came from, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl ModelManifest {
    /// Reads `dir/cairn-model.json`, or, when the directory has none, infers the manifest from a
    /// Hugging Face style layout (`model.safetensors` + `config.json`, or `model.onnx` /
    /// `onnx/model.onnx`, with `tokenizer.json` and optionally `1_Pooling/config.json`).
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let manifest: ModelManifest =
                    serde_json::from_slice(&bytes).map_err(|e| Error::manifest(&path, e.to_string()))?;
                manifest.validate(&path)?;
                Ok(manifest)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::infer(dir),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    fn validate(&self, path: &Path) -> Result<()> {
        if self.max_tokens < 8 {
            return Err(Error::manifest(path, "max_tokens must be at least 8"));
        }
        if self.format == ModelFormat::BertSafetensors && self.config.is_none() {
            return Err(Error::manifest(path, "a bert-safetensors model needs `config`"));
        }
        Ok(())
    }

    fn infer(dir: &Path) -> Result<Self> {
        if !dir.join("tokenizer.json").is_file() {
            return Err(Error::manifest(dir, format!("neither {MANIFEST_FILE} nor tokenizer.json in the directory")));
        }
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".to_owned());
        let pooling_cfg = read_json(&dir.join("1_Pooling").join("config.json"))?;
        let pooling_from_cfg = pooling_cfg.as_ref().and_then(|v| {
            if v.get("pooling_mode_cls_token")?.as_bool()? {
                Some(Pooling::Cls)
            } else if v.get("pooling_mode_mean_tokens")?.as_bool()? {
                Some(Pooling::Mean)
            } else {
                None
            }
        });
        let st_cfg = read_json(&dir.join("config_sentence_transformers.json"))?;
        let query_instruction = st_cfg
            .as_ref()
            .and_then(|v| v.get("prompts")?.get("query")?.as_str().map(str::to_owned))
            .filter(|s| !s.is_empty());
        let max_tokens = read_json(&dir.join("sentence_bert_config.json"))?
            .and_then(|v| v.get("max_seq_length")?.as_u64())
            .map_or(512, |n| n as usize);
        let (format, weights, config, pooling) =
            if dir.join("model.safetensors").is_file() && dir.join("config.json").is_file() {
                (
                    ModelFormat::BertSafetensors,
                    "model.safetensors".to_owned(),
                    Some("config.json".to_owned()),
                    pooling_from_cfg.unwrap_or(Pooling::Mean),
                )
            } else if dir.join("model.onnx").is_file() {
                (ModelFormat::Onnx, "model.onnx".to_owned(), None, pooling_from_cfg.unwrap_or(Pooling::Cls))
            } else if dir.join("onnx").join("model.onnx").is_file() {
                (ModelFormat::Onnx, "onnx/model.onnx".to_owned(), None, pooling_from_cfg.unwrap_or(Pooling::Cls))
            } else {
                return Err(Error::manifest(dir, "no model.safetensors + config.json and no model.onnx"));
            };
        let manifest = ModelManifest {
            name,
            format,
            weights,
            tokenizer: "tokenizer.json".to_owned(),
            config,
            runtime: None,
            pooling,
            max_tokens,
            query_instruction,
            passage_instruction: None,
            source: None,
        };
        manifest.validate(dir)?;
        Ok(manifest)
    }

    /// Resolves a file named by the manifest against the model directory.
    pub fn resolve(dir: &Path, file: &str) -> PathBuf {
        let p = Path::new(file);
        if p.is_absolute() { p.to_path_buf() } else { dir.join(p) }
    }
}

fn read_json(path: &Path) -> Result<Option<serde_json::Value>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| Error::manifest(path, e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_rejects_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let m = ModelManifest {
            name: "x".into(),
            format: ModelFormat::Onnx,
            weights: "model.onnx".into(),
            tokenizer: "tokenizer.json".into(),
            config: None,
            runtime: Some("libonnxruntime.so".into()),
            pooling: Pooling::Cls,
            max_tokens: 512,
            query_instruction: Some("q: ".into()),
            passage_instruction: None,
            source: None,
        };
        std::fs::write(dir.path().join(MANIFEST_FILE), serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(ModelManifest::load(dir.path()).unwrap(), m);

        std::fs::write(dir.path().join(MANIFEST_FILE), b"{\"name\": 3}").unwrap();
        assert!(matches!(ModelManifest::load(dir.path()), Err(Error::Manifest { .. })));
        std::fs::remove_file(dir.path().join(MANIFEST_FILE)).unwrap();
        assert!(matches!(ModelManifest::load(dir.path()), Err(Error::Manifest { .. })));
    }

    #[test]
    fn infers_a_sentence_transformers_layout() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["tokenizer.json", "model.safetensors", "config.json"] {
            std::fs::write(dir.path().join(f), b"{}").unwrap();
        }
        std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
        std::fs::write(
            dir.path().join("1_Pooling/config.json"),
            br#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("config_sentence_transformers.json"),
            br#"{"prompts": {"query": "query: ", "document": ""}}"#,
        )
        .unwrap();
        let m = ModelManifest::load(dir.path()).unwrap();
        assert_eq!(m.format, ModelFormat::BertSafetensors);
        assert_eq!(m.pooling, Pooling::Cls);
        assert_eq!(m.query_instruction.as_deref(), Some("query: "));
        assert_eq!(m.max_tokens, 512);
    }
}
