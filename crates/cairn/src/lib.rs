//! `cairn`: the application layer. [`Cairn`] opens one data directory (its parts named in
//! [`layout`], its configuration read whole by [`config`]), opens each layer the first time an
//! operation needs it, and offers every operation of every layer as a typed request
//! ([`Request`]) answered by a typed, serializable result ([`Response`]) or an [`Error`] with a
//! [`kind`](Error::kind). The command-line tool, the daemon's IPC and HTTP, and the MCP server
//! only translate their input into requests and render the results, so every front-end runs the
//! same code and prints the same JSON.
//!
//! ```no_run
//! use cairn::{Cairn, Call, Request};
//! use cairn::docs::SearchRequest;
//!
//! let c = Cairn::open(".cairn")?;
//! let r = c.execute(Request::Search(SearchRequest::new("group commit")), &mut Call::local())?;
//! println!("{}", r.to_json());
//! c.close()?;
//! # Ok::<(), cairn::Error>(())
//! ```

mod access;
pub mod config;
pub mod docs;
mod error;
pub mod kv;
pub mod layout;
pub mod model;
pub mod repair;
mod request;
pub mod tables;
pub mod text;
pub mod trees;
pub mod verify;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_cas::Store;
use cairn_docs::Memory;
use cairn_kv::{Db, Options, keyspace};
use cairn_tables::Tables;
use cairn_tree::Trees;
use parking_lot_free::Mutex;

pub use access::Access;
pub use config::Config;
pub use error::{Error, ErrorBody, ErrorInfo, ErrorKind, Result, chain};
pub use layout::Layout;
pub use request::{Request, Response};

/// Plain `std` mutex helpers (a poisoned lock is taken over: the layers are consistent on
/// their own, the lock only guards their lazy opening).
mod parking_lot_free {
    /// A mutex whose `lock` ignores poisoning.
    #[derive(Default)]
    pub struct Mutex<T>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub fn lock(&self) -> std::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|p| p.into_inner())
        }
    }
}

/// The layers, each opened on first use.
#[derive(Default)]
struct Layers {
    db: Option<Db>,
    store: Option<Store>,
    memory: Option<Memory>,
    trees: Option<Trees>,
    tables: Option<Tables>,
}

struct Inner {
    layout: Layout,
    config: Config,
    layers: Mutex<Layers>,
    /// Things opening found and repaired or could not (a discarded log tail, a rebuilt index):
    /// shown by the front-ends once.
    warnings: Mutex<Vec<String>>,
    /// The same, kept for `verify` to report for as long as the directory is open.
    findings: Mutex<Vec<String>>,
}

/// An open data directory. Cheap to clone: clones share the layers (the daemon hands one to
/// every request).
#[derive(Clone)]
pub struct Cairn {
    inner: Arc<Inner>,
}

/// The context of one operation: who asks (what it may do), its standard input, and where
/// progress goes.
pub struct Call<'a> {
    /// What the caller may do.
    pub access: Access,
    /// The caller's working directory: relative paths and document references are resolved
    /// against it (none: relative paths are refused, bare references are names).
    pub cwd: Option<PathBuf>,
    /// Content for requests that read standard input (`add -`, `kv put KEY -`, `table put`).
    pub input: Option<&'a mut (dyn Read + Send)>,
    /// Called as long operations (add, snapshot) progress.
    pub progress: Option<&'a (dyn Fn(Progress) + Sync)>,
}

impl Call<'_> {
    /// A local caller with full access in this process's working directory, no input and no
    /// progress.
    pub fn local() -> Call<'static> {
        Call { access: Access::full(), cwd: std::env::current_dir().ok(), input: None, progress: None }
    }
}

/// How far a long operation is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Items (files) known so far.
    pub total: u64,
    /// Items done.
    pub done: u64,
    /// Bytes done.
    pub bytes: u64,
}

impl Cairn {
    /// The data directory at `dir`, with its configuration. Nothing is opened or created until
    /// an operation needs it; operations that only read fail with [`ErrorKind::NotFound`] when
    /// there is no data directory, and do not create one.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Cairn> {
        let layout = Layout::new(dir);
        let config = Config::load(&layout.config(), layout.root())?;
        Ok(Cairn {
            inner: Arc::new(Inner {
                layout,
                config,
                layers: Mutex::default(),
                warnings: Mutex::default(),
                findings: Mutex::default(),
            }),
        })
    }

    /// The data directory's layout.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Takes the warnings opening the layers left (each once).
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.inner.warnings.lock())
    }

    /// Says what opening found: shown once, kept for `verify`.
    fn found(&self, what: impl IntoIterator<Item = String>) {
        for w in what {
            self.inner.warnings.lock().push(w.clone());
            self.inner.findings.lock().push(w);
        }
    }

    /// Says something once, not kept for `verify` (which sees it in the layer's state).
    fn warn(&self, what: impl IntoIterator<Item = String>) {
        self.inner.warnings.lock().extend(what);
    }

    /// Takes what opening found (repair has dealt with it).
    pub(crate) fn take_findings(&self) -> Vec<String> {
        std::mem::take(&mut *self.inner.findings.lock())
    }

    /// Everything opening found so far (for `verify`).
    pub(crate) fn findings(&self) -> Vec<String> {
        self.inner.findings.lock().clone()
    }

    /// Fails when there is no data directory and `create` is false.
    fn need(&self, create: bool) -> Result<()> {
        if !create && !self.inner.layout.exists() {
            return Err(Error::not_found(format!(
                "no cairn data directory at {} (give --dir, set CAIRN_DIR, or `cairn add` something to create one)",
                self.inner.layout.root().display()
            )));
        }
        Ok(())
    }

    fn db_locked(&self, l: &mut Layers, create: bool) -> Result<Db> {
        if let Some(db) = &l.db {
            return Ok(db.clone());
        }
        self.need(create)?;
        let path = self.inner.layout.kv();
        let db = Db::open(&path, Options::default())
            .map_err(|e| Error::from(e).context(format!("opening {}", self.inner.layout.root().display())))?;
        // A discarded log tail (a torn write, or a log damaged after the fact) is said, not
        // hidden.
        self.found(db.recovery_report().warnings().into_iter().map(|w| format!("engine: {w}")));
        l.db = Some(db.clone());
        Ok(db)
    }

    fn store_locked(&self, l: &mut Layers, create: bool) -> Result<Store> {
        if let Some(s) = &l.store {
            return Ok(s.clone());
        }
        let db = self.db_locked(l, create)?;
        let c = &self.inner.config;
        let resolved = cairn_cas::config::resolve_tables(
            c.s3.as_ref(),
            c.packs.as_ref(),
            &c.origin,
            self.inner.layout.root(),
            |k| std::env::var(k).ok(),
        )
        .map_err(|e| Error::io(&self.inner.layout.config(), e))?;
        let (store_config, remote) =
            cairn_cas::config::connect(resolved).map_err(|e| Error::io(&self.inner.layout.config(), e))?;
        let fs: Arc<dyn cairn_kv::Storage> = Arc::new(cairn_kv::FsStorage::new());
        let store =
            Store::open_with_remote(db.keyspace(keyspace::CAS), fs, self.inner.layout.packs(), store_config, remote)
                .map_err(|e| Error::from(e).context("opening the blob store"))?;
        // Said once; verify reports them from the store's state for as long as they last.
        self.warn(
            store.unaccounted_packs().iter().map(|p| {
                format!("{}: a pack the index never named; left alone (not reused, not deleted)", p.display())
            }),
        );
        self.warn(store.missing_packs().iter().map(|p| {
            format!(
                "{}: missing; what it held is read from nowhere (`cairn verify` names what it affects)",
                p.display()
            )
        }));
        l.store = Some(store.clone());
        Ok(store)
    }

    /// The engine (opened on first use; `create`: make the data directory if there is none).
    pub fn db(&self, create: bool) -> Result<Db> {
        let mut l = self.inner.layers.lock();
        self.db_locked(&mut l, create)
    }

    /// The blob store.
    pub fn store(&self, create: bool) -> Result<Store> {
        let mut l = self.inner.layers.lock();
        self.store_locked(&mut l, create)
    }

    /// The document memory.
    pub fn memory(&self, create: bool) -> Result<Memory> {
        let mut l = self.inner.layers.lock();
        if let Some(m) = &l.memory {
            return Ok(m.clone());
        }
        let store = self.store_locked(&mut l, create)?;
        let db = self.db_locked(&mut l, create)?;
        let m = Memory::with_parts(db.keyspace(keyspace::DOCS), store, self.inner.layout.docs_index())
            .map_err(|e| Error::from(e).context("opening the document memory"))?;
        self.found(m.take_warnings());
        if db.recovery_report().records_discarded() > 0 {
            // The engine lost a tail of its log: the index may remember what the rows forgot.
            let (removed, added) = m.resync_index()?;
            if removed + added > 0 {
                self.found([format!(
                    "the full-text index was brought back in line with the documents after the engine \
                     discarded a log tail ({removed} entries removed, {added} documents indexed again)"
                )]);
            }
        }
        self.attach_installed(&m)?;
        l.memory = Some(m.clone());
        Ok(m)
    }

    /// The tree layer.
    pub fn trees(&self, create: bool) -> Result<Trees> {
        let mut l = self.inner.layers.lock();
        if let Some(t) = &l.trees {
            return Ok(t.clone());
        }
        let store = self.store_locked(&mut l, create)?;
        let db = self.db_locked(&mut l, create)?;
        let t = Trees::new(db.keyspace(keyspace::TREE), store, self.inner.layout.files());
        l.trees = Some(t.clone());
        Ok(t)
    }

    /// The record tables.
    pub fn tables(&self, create: bool) -> Result<Tables> {
        let mut l = self.inner.layers.lock();
        if let Some(t) = &l.tables {
            return Ok(t.clone());
        }
        let db = self.db_locked(&mut l, create)?;
        let t = Tables::open(db.keyspace(keyspace::TABLES))
            .map_err(|e| Error::from(e).context("opening the record tables"))?;
        l.tables = Some(t.clone());
        Ok(t)
    }

    /// Opens every layer now (the daemon does, so its first requests do not pay for it).
    pub fn open_all(&self) -> Result<()> {
        self.memory(true)?;
        self.trees(true)?;
        self.tables(true)?;
        Ok(())
    }

    /// Makes what earlier operations wrote searchable (commits the full-text index).
    pub fn commit(&self) -> Result<()> {
        let memory = self.inner.layers.lock().memory.clone();
        if let Some(m) = memory {
            m.commit()?;
        }
        Ok(())
    }

    /// Closes every open layer but keeps the directory usable (the next operation opens them
    /// again): for operations that work on the files themselves (engine repair).
    pub(crate) fn close_layers(&self) -> Result<()> {
        let layers = std::mem::take(&mut *self.inner.layers.lock());
        close_layers(layers)
    }

    /// Closes what was opened: commits the index, stops index builders, uploads the pack being
    /// written when packs live in a backend (a failed upload is reported; the data is committed
    /// locally and the next open retries), and closes the engine. Other clones must be dropped
    /// first or they see a closed engine.
    pub fn close(self) -> Result<()> {
        let layers = std::mem::take(&mut *self.inner.layers.lock());
        close_layers(layers)
    }

    /// Runs one request.
    pub fn execute(&self, req: Request, call: &mut Call<'_>) -> Result<Response> {
        request::execute(self, req, call)
    }
}

fn close_layers(layers: Layers) -> Result<()> {
    let Layers { db, store, memory, trees, tables } = layers;
    let committed = match memory {
        Some(m) => m.close().map_err(Error::from),
        None => Ok(()),
    };
    if let Some(t) = tables {
        t.close();
    }
    let uploaded = match store.as_ref().and_then(|s| Some((s, s.remote_location()?))) {
        Some((s, at)) => s.seal().map_err(|e| {
            Error::from(e).context(format!(
                "uploading to {at} (the data is committed locally; the next command retries the upload)"
            ))
        }),
        None => Ok(()),
    };
    drop((trees, store));
    if let Some(db) = db {
        db.close()?;
    }
    committed?;
    uploaded
}

/// The absolute, lexically normalized form of `p` relative to `cwd` (`.` and `..` resolved
/// without following symbolic links).
pub fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in cwd.join(p).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}
