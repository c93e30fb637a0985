//! What a command runs against: the data directory's layers (opened on first use when
//! embedded, or the daemon's shared ones) and the caller's working directory and streams.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use cairn_cas::Store;
use cairn_docs::Memory;
use cairn_kv::{Db, Options};
use cairn_server::Services;
use cairn_tables::Tables;
use cairn_tree::Trees;

enum Layers {
    /// Embedded: opened on first use, closed by [`Ctx::finish`].
    Lazy { db: Option<Db>, store: Option<Store>, memory: Option<Memory>, trees: Option<Trees>, tables: Option<Tables> },
    /// Inside the daemon.
    Shared(Arc<Services>),
}

/// A command's environment.
pub struct Ctx {
    /// The data directory.
    pub data: PathBuf,
    /// Relative paths in arguments are relative to this.
    pub cwd: PathBuf,
    /// Standard input.
    pub input: Box<dyn Read + Send>,
    /// Standard error (messages, warnings).
    pub err: Box<dyn Write + Send>,
    /// Standard output is a terminal (colors).
    pub tty: bool,
    /// Draw progress bars on the terminal.
    pub progress: bool,
    layers: Layers,
}

impl Ctx {
    /// An embedded command in this process.
    pub fn embedded(data: PathBuf) -> Ctx {
        use std::io::IsTerminal;
        Ctx {
            data,
            cwd: std::env::current_dir().unwrap_or_default(),
            input: Box::new(std::io::stdin()),
            err: Box::new(std::io::stderr()),
            tty: std::io::stdout().is_terminal(),
            progress: true,
            layers: Layers::Lazy { db: None, store: None, memory: None, trees: None, tables: None },
        }
    }

    /// A command run by the daemon for a client.
    pub fn shared(data: PathBuf, services: Arc<Services>, io: cairn_server::CliIo) -> (Ctx, Box<dyn Write + Send>) {
        let ctx = Ctx {
            data,
            cwd: io.cwd,
            input: io.input,
            err: io.err,
            tty: io.tty,
            progress: false,
            layers: Layers::Shared(services),
        };
        (ctx, io.out)
    }

    /// The engine.
    pub fn db(&mut self) -> Result<Db> {
        match &mut self.layers {
            Layers::Shared(s) => Ok(s.db.clone()),
            Layers::Lazy { db, .. } => {
                if db.is_none() {
                    let path = self.data.join("kv");
                    *db = Some(
                        Db::open(&path, Options::default())
                            .with_context(|| format!("opening {}", self.data.display()))?,
                    );
                }
                Ok(db.clone().expect("just opened"))
            }
        }
    }

    fn store(&mut self) -> Result<Store> {
        let db = self.db()?;
        match &mut self.layers {
            Layers::Shared(s) => Ok(s.memory.store().clone()),
            Layers::Lazy { store, .. } => {
                if store.is_none() {
                    *store = Some(open_store(&self.data, db)?);
                }
                Ok(store.clone().expect("just opened"))
            }
        }
    }

    /// The document memory.
    pub fn memory(&mut self) -> Result<Memory> {
        if let Layers::Shared(s) = &self.layers {
            return Ok(s.memory.clone());
        }
        let store = self.store()?;
        let db = self.db()?;
        let Layers::Lazy { memory, .. } = &mut self.layers else { unreachable!() };
        if memory.is_none() {
            *memory = Some(
                Memory::with_parts(db, store, self.data.join("docs-index"))
                    .with_context(|| format!("opening {}", self.data.display()))?,
            );
        }
        Ok(memory.clone().expect("just opened"))
    }

    /// The tree layer.
    pub fn trees(&mut self) -> Result<Trees> {
        if let Layers::Shared(s) = &self.layers {
            return Ok(s.trees.clone());
        }
        let store = self.store()?;
        let db = self.db()?;
        let Layers::Lazy { trees, .. } = &mut self.layers else { unreachable!() };
        if trees.is_none() {
            *trees = Some(Trees::new(db, store, self.data.join("files")));
        }
        Ok(trees.clone().expect("just opened"))
    }

    /// The record tables.
    pub fn tables(&mut self) -> Result<Tables> {
        if let Layers::Shared(s) = &self.layers {
            return Ok(s.tables.clone());
        }
        let db = self.db()?;
        let Layers::Lazy { tables, .. } = &mut self.layers else { unreachable!() };
        if tables.is_none() {
            *tables = Some(Tables::open(db).with_context(|| format!("opening {}", self.data.display()))?);
        }
        Ok(tables.clone().expect("just opened"))
    }

    /// The absolute form of `p` (relative to the caller's directory), without `.` and `..`
    /// (lexically; symlinks are not resolved).
    pub fn abs(&self, p: &Path) -> PathBuf {
        let mut out = PathBuf::new();
        for c in self.cwd.join(p).components() {
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

    /// Ends an embedded command: commits the index if the memory was opened, uploads the pack
    /// being written when packs live in a backend, closes the engine.
    pub fn finish(self) -> Result<()> {
        if let Layers::Lazy { db, store, memory, trees, tables } = self.layers {
            if let Some(m) = memory {
                m.close()?;
            }
            // Index builds still running resume on the next open.
            if let Some(t) = tables {
                t.close();
            }
            // What the command committed is durable locally; a failed upload is reported (the
            // pack stays in the local directory and the next command that opens the store
            // uploads it).
            let uploaded = match store.as_ref().and_then(|s| Some((s, s.remote_location()?))) {
                Some((s, at)) => s.seal().with_context(|| {
                    format!("uploading to {at} (the data is committed locally; the next command retries the upload)")
                }),
                None => Ok(()),
            };
            drop((trees, store));
            if let Some(db) = db {
                db.close()?;
            }
            uploaded?;
        }
        Ok(())
    }
}

/// Opens the blob store of a data directory, with the pack backend its `cairn.toml` or the
/// environment configures (`[s3]`, `CAIRN_S3_BUCKET`, ...; see `cairn_cas::config`), if any.
pub fn open_store(data: &Path, db: Db) -> Result<Store> {
    cairn_cas::config::open_store(db, data).with_context(|| format!("opening the blob store of {}", data.display()))
}

/// Opens every layer of a data directory, for the daemon.
pub fn open_services(data: &Path) -> Result<Services> {
    let db = Db::open(data.join("kv"), Options::default()).with_context(|| format!("opening {}", data.display()))?;
    let store = open_store(data, db.clone())?;
    let memory = Memory::with_parts(db.clone(), store.clone(), data.join("docs-index"))?;
    let trees = Trees::new(db.clone(), store, data.join("files"));
    let tables = Tables::open(db.clone())?;
    Ok(Services { db, memory, trees, tables })
}
