//! Integration tests of the document memory.

mod crash;
mod grep;
mod layers;
mod memory;
mod search;
mod semantic;

use std::path::Path;

use cairn_docs::{AddOptions, Memory, NewDoc};
use cairn_kv::keyspace::{CAS, DOCS};

/// Opens a memory in directory `dir` (engine in `kv/`, packs in `packs/`, index in `docs-index/`).
pub fn open(dir: &Path) -> Memory {
    let db = cairn_kv::Db::open(dir.join("kv"), cairn_kv::Options::default()).unwrap();
    let fs: std::sync::Arc<dyn cairn_kv::Storage> = std::sync::Arc::new(cairn_kv::FsStorage::new());
    let store = cairn_cas::Store::open(db.keyspace(CAS), fs, dir.join("packs"), Default::default()).unwrap();
    Memory::with_parts(db.keyspace(DOCS), store, dir.join("docs-index")).unwrap()
}

/// A document with text content.
pub fn doc(path: &str, content: &str) -> NewDoc {
    NewDoc::new(path.to_string(), content.as_bytes().to_vec())
}

/// Adds one document with default options.
pub fn add(m: &Memory, path: &str, content: &str) -> cairn_docs::Added {
    m.add(vec![doc(path, content)], &AddOptions::default()).unwrap().pop().unwrap()
}

/// Add options with these tags.
pub fn tagged(tags: &[&str]) -> AddOptions {
    AddOptions { tags: tags.iter().map(|t| t.to_string()).collect(), meta: Vec::new() }
}
