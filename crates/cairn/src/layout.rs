//! The layout of a data directory: the one place in the code that names its parts.
//!
//! | path | what |
//! |---|---|
//! | `kv/` | the engine (cairn-kv): every layer's rows, each in its keyspace |
//! | `packs/` | blob packs (and, with a backend, the cache of uploaded packs) |
//! | `docs-index/` | the full-text index of the document memory (derived, rebuildable) |
//! | `files/` | shared read-only copies that hard-link checkouts link to |
//! | `models/` | embedding models, when installed; `models/installed.json` names the one in use |
//! | `cairn.toml` | configuration (see [`crate::config`]) |
//! | `cairn.sock` | the daemon's Unix socket, while one serves the directory |
//! | `serve.lock` | held by the daemon serving the directory |

use std::path::{Path, PathBuf};

/// The parts of one data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout of data directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The data directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The engine's directory.
    pub fn kv(&self) -> PathBuf {
        self.root.join("kv")
    }

    /// The blob packs.
    pub fn packs(&self) -> PathBuf {
        self.root.join("packs")
    }

    /// The full-text index.
    pub fn docs_index(&self) -> PathBuf {
        self.root.join("docs-index")
    }

    /// Shared copies for hard-link checkouts.
    pub fn files(&self) -> PathBuf {
        self.root.join("files")
    }

    /// Installed embedding models.
    pub fn models(&self) -> PathBuf {
        self.root.join("models")
    }

    /// The record of the installed embedding model.
    pub fn installed_model(&self) -> PathBuf {
        self.models().join("installed.json")
    }

    /// The configuration file.
    pub fn config(&self) -> PathBuf {
        self.root.join(Self::CONFIG_FILE)
    }

    /// The daemon's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.root.join("cairn.sock")
    }

    /// The lock the daemon holds.
    pub fn serve_lock(&self) -> PathBuf {
        self.root.join("serve.lock")
    }

    /// The configuration file's name.
    pub const CONFIG_FILE: &'static str = "cairn.toml";

    /// Whether a data directory exists here (its engine directory does).
    pub fn exists(&self) -> bool {
        self.kv().is_dir()
    }
}
