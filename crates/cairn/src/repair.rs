//! `repair`: rebuild what is derivable and store damaged content again from where it can be
//! read, then say what is lost. It never deletes user data: engine files it cannot use are moved
//! under `kv/lost/`, content nothing refers to is reported and kept, and what cannot be
//! recovered is listed with what it affects.
//!
//! In order: the engine's state (its MANIFEST rebuilt from the tables and logs when it is
//! missing or damaged, damaged tables salvaged); damaged chunks stored again from sources (the
//! directories and files given, every snapshot's source directory, every file document's own
//! file when its content still hashes the same); reference counts; the path, tag and metadata
//! rows of the documents; the full-text index; every table's indexes; changed shared checkout
//! copies. Then a verify says what remains.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::verify::{Problem, VerifyRequest};
use crate::{Cairn, Call, Error, ErrorKind, Result};

/// What to repair from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepairRequest {
    /// Directories or files to read damaged content from again (besides every snapshot's
    /// source and every file document's file, which are always tried).
    pub sources: Vec<PathBuf>,
}

/// What a repair did, and what is still wrong.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RepairReport {
    /// Whether nothing is wrong after the repair.
    pub ok: bool,
    /// What was done, one sentence each.
    pub actions: Vec<String>,
    /// Chunks stored again from sources.
    pub chunks_restored: u64,
    /// Files read as sources.
    pub sources_read: u64,
    /// What the repair could not recover, with what it affects (engine rows in damaged blocks
    /// or unreadable files; a verify no longer sees them, as they are gone).
    pub lost: Vec<Problem>,
    /// What is still wrong (a verify after the repair), with what it affects.
    pub remaining: Vec<Problem>,
}

impl RepairReport {
    fn did(&mut self, what: String) {
        self.actions.push(what);
    }
}

impl Cairn {
    /// Repairs the data directory; see the module documentation.
    pub fn repair(&self, req: RepairRequest, call: &Call<'_>) -> Result<RepairReport> {
        call.access.check_write("repair")?;
        let mut r = RepairReport::default();
        let mut sources = Vec::new();
        for s in &req.sources {
            let p = crate::docs::resolve_path(call, s, "repair")?;
            call.access.check_path(&p, "repair")?;
            sources.push(p);
        }
        self.repair_engine(&mut r)?;
        let store = self.store(false)?;
        let memory = self.memory(false)?;
        let trees = self.trees(false)?;
        let tables = self.tables(false)?;

        // Damaged chunks: recorded by a verify now, then stored again from every source.
        let v = store.verify()?;
        let damaged = store.record_damage(&v)?;
        if damaged > 0 || !store.missing_packs().is_empty() {
            r.did(format!("{damaged} chunks are damaged or missing; reading sources to store them again"));
            let mut files: Vec<PathBuf> = Vec::new();
            for d in memory.list(&Default::default())? {
                if d.path.starts_with('/') {
                    files.push(PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&d.key())));
                }
            }
            let mut dirs = sources;
            dirs.extend(trees.sources()?);
            for d in dirs {
                walk(&d, &mut files);
            }
            for f in files {
                let Ok(mut file) = std::fs::File::open(&f) else { continue };
                let mut data = Vec::new();
                if file.read_to_end(&mut data).is_err() {
                    continue;
                }
                r.sources_read += 1;
                r.chunks_restored += store.restore_from(&data)?;
                if store.suspect_chunks() == 0 && store.missing_packs().is_empty() {
                    break;
                }
            }
            r.did(format!("stored {} chunks again from {} source files", r.chunks_restored, r.sources_read));
        }
        for p in store.forget_emptied_missing_packs()? {
            r.did(format!("{}: every chunk it held is stored again; its index row is removed", p.display()));
        }

        // Reference counts: what the layers hold.
        let held = crate::verify::held_references(&memory.blob_users()?, &trees)?;
        let fix = store.fix_refcounts(&held)?;
        if fix.blobs_fixed + fix.chunks_fixed > 0 {
            r.did(format!(
                "set the reference counts of {} blobs and {} chunks to what refers to them",
                fix.blobs_fixed, fix.chunks_fixed
            ));
        }
        if !fix.unreferenced.is_empty() {
            r.did(format!(
                "{} blobs nothing refers to still count references; they are kept (their space is not reclaimed)",
                fix.unreferenced.len()
            ));
        }

        // The documents' derived rows and the full-text index.
        let dv = memory.verify()?;
        if dv.problems.iter().any(|p| !p.index) {
            let n = memory.rebuild_rows()?;
            r.did(format!("rewrote the path, tag and metadata rows of {n} documents from their records"));
        }
        let dv = memory.verify()?;
        if dv.problems.iter().any(|p| p.index) {
            let (n, left_out) = memory.rebuild_index_report()?;
            r.did(format!("rebuilt the full-text index ({n} documents, {} left out: unreadable)", left_out.len()));
        }

        // Table indexes.
        for def in tables.list()? {
            if tables.verify(&def.name).is_err() {
                let names = tables.rebuild_indexes(&def.name)?;
                r.did(format!("rebuilt the indexes of table {} ({})", def.name, names.join(", ")));
            }
        }

        // Shared checkout copies changed through hard links.
        let changed: Vec<String> = trees.verify_shared_files()?.into_iter().map(|(p, _)| p).collect();
        if !changed.is_empty() {
            let n = trees.remove_changed_shared_files(&changed)?;
            r.did(format!("unlinked {n} changed shared checkout copies (the next checkout makes them anew)"));
        }

        // What opening found is dealt with now: losses are listed as such, the rest was done.
        for f in self.take_findings() {
            if f.starts_with("engine:") {
                r.lost.push(Problem {
                    layer: "engine".into(),
                    problem: f,
                    affects: vec!["the writes it held (the last before the damage)".into()],
                    repair: None,
                });
            } else {
                r.did(format!("at open: {f}"));
            }
        }

        let after = self.verify(VerifyRequest::default())?;
        r.ok = after.ok;
        r.remaining = after.problems;
        Ok(r)
    }

    /// The engine: when it does not open (missing or damaged state) or verify finds damaged
    /// tables, rebuilds its state from the files there.
    fn repair_engine(&self, r: &mut RepairReport) -> Result<()> {
        let damaged = match self.db(false) {
            Ok(db) => match db.verify_detailed() {
                Ok(v) => !v.is_clean(),
                Err(_) => true,
            },
            Err(e) if e.kind() == ErrorKind::Corrupt => true,
            Err(e) => return Err(e),
        };
        if !damaged {
            return Ok(());
        }
        self.close_layers()?;
        let kv = self.layout().kv();
        let rep = cairn_kv::Db::repair(&kv, cairn_kv::Options::default())
            .map_err(|e| Error::from(e).context(format!("repairing {}", kv.display())))?;
        r.did(format!(
            "rebuilt the engine's state in {}: {} tables kept, {} salvaged, {} set aside under lost/, {} log records recovered, {} bytes discarded",
            kv.display(),
            rep.tables_kept.len(),
            rep.tables_salvaged.len(),
            rep.tables_set_aside.len(),
            rep.records_recovered,
            rep.bytes_discarded
        ));
        for n in &rep.notes {
            r.did(format!("engine: {n}"));
        }
        for t in &rep.tables_salvaged {
            for b in &t.damaged {
                let first = b.first_key.as_deref().unwrap_or(&[]);
                let last = b.last_key.as_deref().unwrap_or(&[0xff; 8]);
                r.lost.push(Problem {
                    layer: "engine".into(),
                    problem: format!(
                        "{} lost a damaged block (offset {}, {} bytes): {}; the table as it was is kept at {}",
                        t.original.display(),
                        b.offset,
                        b.len,
                        b.reason,
                        t.copied_to.display()
                    ),
                    affects: crate::verify::affected_rows(first, last),
                    repair: None,
                });
            }
        }
        for s in rep.tables_set_aside.iter().filter(|s| s.unreadable) {
            r.lost.push(Problem {
                layer: "engine".into(),
                problem: format!("{} does not open ({}); it is kept at {}", s.from.display(), s.reason, s.to.display()),
                affects: vec!["the rows it held (not known)".into()],
                repair: None,
            });
        }
        for t in &rep.tables_missing {
            r.lost.push(Problem {
                layer: "engine".into(),
                problem: format!("{} is named by the engine's state but is not in the directory", t.display()),
                affects: vec!["the rows it held (not known)".into()],
                repair: None,
            });
        }
        for l in rep.logs_replayed.iter().filter(|l| l.records_discarded > 0) {
            r.lost.push(Problem {
                layer: "engine".into(),
                problem: format!(
                    "{} records of {} were discarded: {}",
                    l.records_discarded,
                    l.path.display(),
                    l.reason.as_deref().unwrap_or("damaged")
                ),
                affects: vec!["the writes they held (the last before the damage)".into()],
                repair: None,
            });
        }
        Ok(())
    }
}

/// Every regular file under `p` (or `p` itself), symbolic links not followed.
fn walk(p: &Path, out: &mut Vec<PathBuf>) {
    let Ok(meta) = std::fs::symlink_metadata(p) else { return };
    if meta.is_file() {
        out.push(p.to_path_buf());
    } else if meta.is_dir()
        && let Ok(rd) = std::fs::read_dir(p)
    {
        for e in rd.flatten() {
            walk(&e.path(), out);
        }
    }
}
