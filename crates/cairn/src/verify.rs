//! `verify` across every layer. Each problem is reported with what it affects: the documents
//! and versions, the snapshots and paths, the tables whose data it damages. Verify only reads.

use std::collections::{BTreeMap, HashSet};

use cairn_cas::Id;
use serde::{Deserialize, Serialize};

use crate::{Cairn, Result};

/// What to check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyRequest {
    /// Reread and rehash every stored chunk (default true; false checks rows and indexes only).
    pub chunks: bool,
}

impl Default for VerifyRequest {
    fn default() -> Self {
        VerifyRequest { chunks: true }
    }
}

/// One problem and what it affects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The layer it was found in: `engine`, `blobs`, `docs`, `index`, `trees`, `files`,
    /// `tables`, `keys`.
    pub layer: String,
    /// What is wrong.
    pub problem: String,
    /// What it damages (`document /a/b.md v2`, `snapshot app: lib/x.js`, `table people`).
    pub affects: Vec<String>,
    /// How to repair it, when something can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<String>,
}

/// What verify checked and found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// Whether nothing is wrong.
    pub ok: bool,
    /// Engine table entries reread (every block checksum checked).
    pub engine_entries: u64,
    /// Chunks reread and rehashed.
    pub chunks: u64,
    /// Their raw bytes.
    pub bytes: u64,
    /// Blobs whose chunk lists were checked.
    pub blobs: u64,
    /// Documents checked.
    pub documents: u64,
    /// Document versions checked.
    pub versions: u64,
    /// Snapshots checked.
    pub snapshots: u64,
    /// Tree objects checked.
    pub trees: u64,
    /// Tables checked.
    pub tables: u64,
    /// Records checked against their indexes.
    pub records: u64,
    /// Everything wrong.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    fn problem(&mut self, layer: &str, problem: String, affects: Vec<String>, repair: Option<&str>) {
        self.problems.push(Problem { layer: layer.into(), problem, affects, repair: repair.map(String::from) });
    }
}

impl Cairn {
    /// Checks every layer; see the module documentation.
    pub fn verify(&self, req: VerifyRequest) -> Result<VerifyReport> {
        let mut r = VerifyReport::default();
        for w in self.take_warnings() {
            r.problem("engine", w, Vec::new(), None);
        }
        let db = self.db(false)?;
        match db.verify() {
            Ok(n) => r.engine_entries = n,
            Err(e) => r.problem("engine", crate::chain(&e), vec!["every layer".into()], Some("cairn repair")),
        }
        // Rows outside every keyspace: written raw (an earlier release's `cairn kv put`).
        let mut unowned = 0u64;
        let mut sample = Vec::new();
        for kv in db.iter() {
            let (k, _) = kv?;
            if cairn_kv::keyspace::owner(&k).is_none() {
                unowned += 1;
                if sample.len() < 5 {
                    sample.push(crate::text::escape(&k));
                }
            }
        }
        if unowned > 0 {
            r.problem(
                "keys",
                format!(
                    "{unowned} rows outside every keyspace (written raw, e.g. by an earlier `cairn kv put`; \
                     `cairn kv scan --raw` shows them): {}",
                    sample.join(", ")
                ),
                Vec::new(),
                None,
            );
        }
        let memory = self.memory(false)?;
        let trees = self.trees(false)?;
        let store = trees.store().clone();
        // Blobs: every chunk reread and rehashed, chunk lists and reference counts.
        let mut bad_blobs: BTreeMap<Id, String> = BTreeMap::new();
        if req.chunks {
            let s = store.verify()?;
            (r.chunks, r.bytes, r.blobs) = (s.chunks, s.bytes, s.blobs);
            for d in &s.damaged {
                for b in &d.blobs {
                    bad_blobs
                        .entry(*b)
                        .or_insert_with(|| format!("chunk {} in pack {}: {}", d.chunk.short(), d.pack, d.problem));
                }
            }
            for (b, c) in &s.dangling {
                bad_blobs.entry(*b).or_insert_with(|| format!("missing chunk {}", c.short()));
            }
            for (b, why) in &s.broken_blobs {
                bad_blobs.entry(*b).or_insert_with(|| why.clone());
            }
            for (c, idx, counted) in &s.refcount_errors {
                r.problem(
                    "blobs",
                    format!("chunk {}: the index counts {idx} references, blobs hold {counted}", c.short()),
                    Vec::new(),
                    Some("cairn repair"),
                );
            }
        }
        // Documents: rows, versions naming stored blobs, the full-text index against the rows.
        let d = memory.verify()?;
        (r.documents, r.versions) = (d.documents, d.versions);
        for p in d.problems {
            let layer = if p.index { "index" } else { "docs" };
            let repair = if p.index { Some("cairn reindex") } else { None };
            r.problem(layer, p.problem, p.affects, repair);
        }
        // Snapshots: trees decode, blobs exist and are owned.
        let t = trees.verify_trees()?;
        (r.snapshots, r.trees) = (t.snapshots, t.trees);
        for (snap, problem) in t.problems {
            r.problem("trees", problem, vec![format!("snapshot {snap}")], None);
        }
        for (path, problem) in trees.verify_shared_files()? {
            r.problem("files", problem, vec![path], Some("cairn repair"));
        }
        // What damaged blobs affect.
        if !bad_blobs.is_empty() {
            let ids: HashSet<Id> = bad_blobs.keys().copied().collect();
            let mut affects: BTreeMap<Id, Vec<String>> = BTreeMap::new();
            for (id, path, version) in memory.blob_users()? {
                if ids.contains(&id) {
                    affects.entry(id).or_default().push(format!("document {path} v{version}"));
                }
            }
            for (id, snap, path) in trees.blob_users(&ids)? {
                affects.entry(id).or_default().push(format!("snapshot {snap}: {path}"));
            }
            for (id, why) in bad_blobs {
                let a = affects.remove(&id).unwrap_or_default();
                r.problem(
                    "blobs",
                    format!("blob {} is unreadable: {why}", id.short()),
                    a,
                    Some("cairn repair --source DIR"),
                );
            }
        }
        // Tables: every ready index against the records.
        let tables = self.tables(false)?;
        for def in tables.list()? {
            r.tables += 1;
            match tables.verify(&def.name) {
                Ok(n) => r.records += n,
                Err(e) => {
                    r.problem("tables", crate::chain(&e), vec![format!("table {}", def.name)], Some("cairn repair"))
                }
            }
        }
        r.ok = r.problems.is_empty();
        Ok(r)
    }
}
