//! Embedding models of a data directory. `model_install` checks a model by loading it, copies its
//! files into `models/<name>/` and records its name, dimension and weights' sha256 in
//! `models/installed.json` (see [`crate::layout`]); from then on the document memory is opened
//! with it attached, so documents are embedded in the background and searches default to hybrid
//! ranking. `model_status` says what is installed and how far embedding is.
//!
//! A model is given as a directory (the last line of `scripts/install-model.sh`, or a Hugging
//! Face style directory with `tokenizer.json`) or as an id, looked up in the shared caches:
//! `$CAIRN_MODEL_CACHE` (default `~/.cache/cairn/models`) by name, then the Hugging Face hub cache
//! (`$HF_HOME/hub`, default `~/.cache/huggingface/hub`) by `org/name`. Nothing is downloaded.

use std::path::{Path, PathBuf};

use cairn_docs::{Memory, ModelSpec};
use cairn_embed::{Embedder, MANIFEST_FILE, ModelManifest};
use serde::{Deserialize, Serialize};

use crate::docs::resolve_path;
use crate::{Cairn, Call, Error, Result};

/// Install an embedding model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelInstallRequest {
    /// A model directory, or an id found in the shared caches (see the module documentation).
    pub source: String,
}

/// What is recorded in `models/installed.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstalledModel {
    /// The model's name.
    pub name: String,
    /// The length of its vectors.
    pub dimension: usize,
    /// The sha256 of its weights file, lowercase hex.
    pub sha256: String,
    /// Its directory, relative to `models/`.
    pub dir: String,
}

impl InstalledModel {
    fn spec(&self) -> ModelSpec {
        ModelSpec { name: self.name.clone(), dimension: self.dimension, sha256: self.sha256.clone() }
    }
}

/// The installed model's state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ModelStatusRequest {
    /// Wait until every queued document is embedded first.
    pub wait: bool,
}

/// What `model_install` did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInstallResult {
    /// The model now installed (its files in `models/<dir>` of the data directory).
    pub model: InstalledModel,
    /// Files copied (0 when the same model was installed already).
    pub files: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Whether this process searches with it now; false when another model was attached
    /// before (the next open uses the new one).
    pub active: bool,
}

/// What `model_status` reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelStatusResult {
    /// The installed model, if any (its files in `models/<dir>` of the data directory).
    pub model: Option<InstalledModel>,
    /// Whether the model is loaded in this process.
    pub loaded: bool,
    /// Documents with vectors.
    pub documents: u64,
    /// Passage vectors.
    pub passages: u64,
    /// Document changes waiting to be embedded.
    pub queued: u64,
    /// Why embedding stopped, if it did.
    pub error: Option<String>,
    /// The default search mode.
    pub search_mode: String,
}

fn home_cache(env: &str, tail: &[&str]) -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(env).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(v));
    }
    let mut p = PathBuf::from(std::env::var_os("HOME")?);
    for t in tail {
        p.push(t);
    }
    Some(p)
}

/// The directory a model id names in the shared caches.
fn find_cached(id: &str) -> Option<PathBuf> {
    if id.is_empty() || id.contains("..") || id.starts_with('/') {
        return None;
    }
    if let Some(cache) = home_cache("CAIRN_MODEL_CACHE", &[".cache", "cairn", "models"]) {
        let p = cache.join(id);
        if p.is_dir() {
            return Some(p);
        }
    }
    let hub = match std::env::var_os("HF_HOME").filter(|v| !v.is_empty()) {
        Some(h) => PathBuf::from(h).join("hub"),
        None => home_cache("HF_HUB_CACHE", &[".cache", "huggingface", "hub"])?,
    };
    let snapshots = hub.join(format!("models--{}", id.replace('/', "--"))).join("snapshots");
    let mut found: Vec<PathBuf> = std::fs::read_dir(snapshots).ok()?.filter_map(|e| Some(e.ok()?.path())).collect();
    found.sort();
    found.into_iter().rev().find(|p| p.join("tokenizer.json").is_file())
}

/// Copies `from` to `to`, returning the bytes copied.
fn copy_file(from: &Path, to: &Path) -> Result<u64> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    std::fs::copy(from, to).map_err(|e| Error::io(from, e))
}

fn safe_name(name: &str) -> String {
    let n: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' }).collect();
    if n.is_empty() || n.starts_with('.') { format!("model-{n}") } else { n }
}

impl Cairn {
    /// The installed model's record, if any.
    pub fn installed_model(&self) -> Result<Option<InstalledModel>> {
        let path = self.layout().installed_model();
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::new(crate::ErrorKind::Corrupt, format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Attaches the installed model (if any) to a memory being opened; it loads in the
    /// background.
    pub(crate) fn attach_installed(&self, m: &Memory) -> Result<()> {
        let Some(model) = self.installed_model()? else { return Ok(()) };
        let dir = self.layout().models().join(&model.dir);
        m.attach_model(model.spec(), move || Embedder::load(&dir))
            .map_err(|e| Error::from(e).context("attaching the embedding model"))
    }

    /// Installs an embedding model (see the module documentation).
    pub fn model_install(&self, req: ModelInstallRequest, call: &mut Call<'_>) -> Result<ModelInstallResult> {
        call.access.check_write("model install")?;
        let given = Path::new(&req.source);
        let local = if given.is_absolute() || call.cwd.is_some() {
            Some(resolve_path(call, given, "model install")?)
        } else {
            None
        };
        let src = match local.filter(|p| p.is_dir()) {
            Some(p) => {
                call.access.check_path(&p, "model install")?;
                p
            }
            None => find_cached(&req.source).ok_or_else(|| {
                Error::not_found(format!(
                    "no model directory or cached model {:?} (scripts/install-model.sh installs one and prints its \
                     directory)",
                    req.source
                ))
            })?,
        };
        let embedder = Embedder::load(&src).map_err(|e| Error::bad_request(format!("{}: {e}", src.display())))?;
        let spec = ModelSpec::of(&embedder);
        let manifest = embedder.manifest().clone();
        drop(embedder);
        let name = safe_name(&spec.name);
        let models = self.layout().models();
        let dest = models.join(&name);
        let record = InstalledModel {
            name: spec.name.clone(),
            dimension: spec.dimension,
            sha256: spec.sha256.clone(),
            dir: name.clone(),
        };
        let (mut files, mut bytes) = (0, 0);
        if self.installed_model()?.as_ref() != Some(&record) || !dest.join(MANIFEST_FILE).is_file() {
            let tmp = models.join(format!(".{name}.installing"));
            let _ = std::fs::remove_dir_all(&tmp);
            let mut copy = |file: &str| -> Result<()> {
                let from = ModelManifest::resolve(&src, file);
                if Path::new(file).is_absolute() {
                    return Ok(());
                }
                bytes += copy_file(&from, &tmp.join(file))?;
                files += 1;
                Ok(())
            };
            copy(&manifest.weights)?;
            copy(&manifest.tokenizer)?;
            if let Some(c) = &manifest.config {
                copy(c)?;
            }
            if let Some(r) = &manifest.runtime {
                copy(r)?;
            }
            let json = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::internal(e.to_string()))?;
            std::fs::write(tmp.join(MANIFEST_FILE), json).map_err(|e| Error::io(&tmp, e))?;
            // The copy must load as the original did.
            let check = Embedder::load(&tmp).map_err(|e| Error::internal(format!("the copied model: {e}")))?;
            if ModelSpec::of(&check) != spec {
                return Err(Error::internal("the copied model differs from the original"));
            }
            drop(check);
            if dest.exists() {
                std::fs::remove_dir_all(&dest).map_err(|e| Error::io(&dest, e))?;
            }
            std::fs::rename(&tmp, &dest).map_err(|e| Error::io(&dest, e))?;
            let path = self.layout().installed_model();
            let tmp_record = path.with_extension("json.tmp");
            let json = serde_json::to_vec_pretty(&record).map_err(|e| Error::internal(e.to_string()))?;
            std::fs::write(&tmp_record, json).map_err(|e| Error::io(&tmp_record, e))?;
            std::fs::rename(&tmp_record, &path).map_err(|e| Error::io(&path, e))?;
        }
        // Attach now if the memory is open without a model; opening it attaches it otherwise.
        let m = self.memory(true)?;
        let active = match m.semantic_status()? {
            Some(s) => s.model == spec,
            None => {
                let dir = dest.clone();
                m.attach_model(spec, move || Embedder::load(&dir))?;
                true
            }
        };
        Ok(ModelInstallResult { model: record, files, bytes, active })
    }

    /// The installed model and how far embedding is (with `wait`, once the queue is empty).
    pub fn model_status(&self, req: ModelStatusRequest) -> Result<ModelStatusResult> {
        let model = self.installed_model()?;
        let mut r = ModelStatusResult {
            search_mode: if model.is_some() { "hybrid" } else { "keyword" }.into(),
            model,
            loaded: false,
            documents: 0,
            passages: 0,
            queued: 0,
            error: None,
        };
        if r.model.is_some() && self.layout().exists() {
            let m = self.memory(false)?;
            if req.wait {
                m.wait_for_embeddings(None)?;
            }
            let Some(s) = m.semantic_status()? else { return Ok(r) };
            r.loaded = s.loaded;
            r.documents = s.documents;
            r.passages = s.passages;
            r.queued = s.queued;
            r.error = s.error;
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;
    use crate::docs::{AddRequest, NamedContent, SearchMode, SearchRequest};

    fn add(c: &Cairn, name: &str, content: &str) {
        let doc = NamedContent { name: name.into(), content: Some(content.into()), content_base64: None };
        c.execute(Request::Add(AddRequest { docs: vec![doc], ..Default::default() }), &mut Call::local()).unwrap();
    }

    fn search(c: &Cairn, q: &str, mode: Option<SearchMode>) -> crate::docs::SearchResult {
        let req = SearchRequest { mode, ..SearchRequest::new(q) };
        match c.execute(Request::Search(req), &mut Call::local()).unwrap() {
            crate::Response::Search(r) => r,
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn install_from_a_local_path_makes_hybrid_the_default() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("tiny");
        std::fs::create_dir_all(&src).unwrap();
        cairn_embed::test_model::write(&src, "mean");
        // No query instruction: a query equal to a document's text gets its vector.
        let manifest = src.join(MANIFEST_FILE);
        let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
        m.as_object_mut().unwrap().remove("query_instruction");
        std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
        let c = Cairn::open(t.path().join("data")).unwrap();
        add(&c, "a.md", "the cat sat on the mat");
        add(&c, "b.md", "bees make honey in the park");
        // Without a model: keyword search, and semantic search is refused.
        assert_eq!(search(&c, "honey", None).mode, SearchMode::Keyword);
        let e = c
            .execute(
                Request::Search(SearchRequest { mode: Some(SearchMode::Semantic), ..SearchRequest::new("x") }),
                &mut Call::local(),
            )
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadRequest);
        assert!(c.model_status(ModelStatusRequest::default()).unwrap().model.is_none());

        let r = c.model_install(ModelInstallRequest { source: src.display().to_string() }, &mut Call::local()).unwrap();
        assert_eq!((r.model.name.as_str(), r.model.dimension), ("tiny", cairn_embed::test_model::HIDDEN));
        assert_eq!(r.files, 3);
        assert!(r.active);
        // Copied into the data directory, recorded with its hash.
        let installed = c.installed_model().unwrap().unwrap();
        assert_eq!(installed, r.model);
        assert!(c.layout().models().join(&installed.dir).join("model.safetensors").is_file());
        // The same model again copies nothing.
        let again =
            c.model_install(ModelInstallRequest { source: src.display().to_string() }, &mut Call::local()).unwrap();
        assert_eq!(again.files, 0);

        let s = c.model_status(ModelStatusRequest { wait: true }).unwrap();
        assert!(s.loaded);
        assert_eq!((s.documents, s.queued, s.search_mode.as_str()), (2, 0, "hybrid"));
        let r = search(&c, "bees make honey in the park", None);
        assert_eq!(r.mode, SearchMode::Hybrid);
        assert_eq!(r.hits[0].path, "b.md");
        assert!(r.hits[0].bm25.is_some() && r.hits[0].vector.is_some());
        let json = crate::Response::Search(r).to_json();
        assert!(json["hits"][0]["bm25"].is_number() && json["hits"][0]["vector"].is_number(), "{json}");
        assert!(search(&c, "honey", Some(SearchMode::Keyword)).hits[0].vector.is_none());
        c.close().unwrap();

        // Reopened: the installed model is attached again; the source may be gone.
        std::fs::remove_dir_all(&src).unwrap();
        let c = Cairn::open(t.path().join("data")).unwrap();
        let r = search(&c, "the cat sat on the mat", Some(SearchMode::Semantic));
        assert_eq!(r.hits[0].path, "a.md");
        c.close().unwrap();
    }

    #[test]
    fn install_refuses_what_is_not_a_model() {
        let t = tempfile::tempdir().unwrap();
        let c = Cairn::open(t.path().join("data")).unwrap();
        let empty = t.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let e = c
            .model_install(ModelInstallRequest { source: empty.display().to_string() }, &mut Call::local())
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::BadRequest);
        let e = c
            .model_install(ModelInstallRequest { source: "no-such-model-anywhere".into() }, &mut Call::local())
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::NotFound);
        let read_only = &mut Call { access: crate::Access::remote(None, true), ..Call::local() };
        assert!(c.model_install(ModelInstallRequest { source: empty.display().to_string() }, read_only).is_err());
        assert!(c.installed_model().unwrap().is_none());
    }

    #[test]
    #[ignore = "needs the installed model: CAIRN_EMBED_MODEL (scripts/install-model.sh prints it)"]
    fn real_model_finds_by_meaning_what_shares_no_word() {
        let src = std::env::var("CAIRN_EMBED_MODEL").expect("CAIRN_EMBED_MODEL");
        let t = tempfile::tempdir().unwrap();
        let c = Cairn::open(t.path().join("data")).unwrap();
        add(&c, "wal.md", "The engine appends every write to a log and calls fsync before it acknowledges it.");
        add(&c, "bees.md", "Bees make honey from the nectar of flowers.");
        add(&c, "trains.md", "The night train leaves the station at eleven.");
        c.model_install(ModelInstallRequest { source: src }, &mut Call::local()).unwrap();
        c.model_status(ModelStatusRequest { wait: true }).unwrap();
        let q = "how are updates kept safe across power failures";
        assert!(search(&c, q, Some(SearchMode::Keyword)).hits.is_empty());
        assert_eq!(search(&c, q, Some(SearchMode::Semantic)).hits[0].path, "wal.md");
        assert_eq!(search(&c, q, None).hits[0].path, "wal.md");
        assert_eq!(search(&c, "insects producing something sweet", None).hits[0].path, "bees.md");
        c.close().unwrap();
    }
}
