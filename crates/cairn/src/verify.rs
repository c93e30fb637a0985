//! `verify` across every layer. Each problem is reported with what it affects: the documents
//! and versions, the snapshots and paths, the tables whose data it damages. Verify only reads.

use std::collections::{BTreeMap, HashMap, HashSet};

use cairn_cas::Id;
use serde::{Deserialize, Serialize};

use crate::{Cairn, Error, ErrorKind, Result};

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
    /// The engine: every block of every table reread.
    fn verify_engine(&self, db: &cairn_kv::Db, r: &mut VerifyReport) {
        match db.verify_detailed() {
            Ok(v) => {
                r.engine_entries = v.entries;
                for d in &v.damaged {
                    let what = if d.whole_table { "is unreadable" } else { "has a damaged block" };
                    r.problem(
                        "engine",
                        format!("{} {what} (offset {}): {}", d.table.display(), d.offset, crate::chain(&d.error)),
                        affected_rows(&d.first_key, &d.last_key),
                        Some("cairn repair"),
                    );
                }
            }
            Err(e) => r.problem("engine", crate::chain(&e), vec!["every layer".into()], Some("cairn repair")),
        }
    }

    /// Checks every layer; see the module documentation.
    pub fn verify(&self, req: VerifyRequest) -> Result<VerifyReport> {
        let mut r = VerifyReport::default();
        let db = self.db(false)?;
        // A layer that cannot open over damaged engine rows: the engine's own check names the
        // damage and what it affects; the layers above cannot be checked until it is repaired.
        let layers = (|| Ok::<_, Error>((self.memory(false)?, self.trees(false)?, self.tables(false)?)))();
        let (memory, trees, tables) = match layers {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::Corrupt => {
                r.problem("open", crate::chain(&e), vec!["every layer above the engine".into()], Some("cairn repair"));
                self.verify_engine(&db, &mut r);
                r.ok = false;
                return Ok(r);
            }
            Err(e) => return Err(e),
        };
        // What opening found: a discarded log tail, a rebuilt index.
        self.take_warnings();
        for w in self.findings() {
            r.problem("open", w, Vec::new(), None);
        }
        self.verify_engine(&db, &mut r);
        // Rows outside every keyspace: written raw (an earlier release's `cairn kv put`).
        let mut unowned = 0u64;
        let mut sample = Vec::new();
        for kv in db.iter() {
            // A damaged block ends the scan; the engine's check above named it.
            let Ok((k, _)) = kv else { break };
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
        let store = trees.store().clone();
        // Pack files: missing ones the index names, and ones it never named.
        for p in store.missing_packs() {
            r.problem(
                "blobs",
                format!("{}: missing; every chunk it held is lost here", p.display()),
                Vec::new(),
                Some("cairn repair (stores its chunks again from a source)"),
            );
        }
        for p in store.unaccounted_packs() {
            r.problem(
                "blobs",
                format!("{}: a pack the index never named; left alone (not reused, not deleted)", p.display()),
                Vec::new(),
                None,
            );
        }
        // Blobs: every chunk reread and rehashed, chunk lists and reference counts.
        let mut bad_blobs: BTreeMap<Id, String> = BTreeMap::new();
        if req.chunks {
            let s = store.verify()?;
            // Recorded, so later writes store damaged chunks again instead of sharing them.
            store.record_damage(&s)?;
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
        // Every blob counts exactly the references the layers hold: one per document version,
        // one per blob the tree layer owns.
        let users = memory.blob_users()?;
        for (id, n) in &held_references(&users, &trees)? {
            match store.blob_info(id)? {
                Some(b) if b.refs != *n => r.problem(
                    "blobs",
                    format!("blob {} counts {} references, the layers hold {n}", id.short(), b.refs),
                    Vec::new(),
                    Some("cairn repair"),
                ),
                _ => {}
            }
        }
        // What damaged blobs affect.
        if !bad_blobs.is_empty() {
            let ids: HashSet<Id> = bad_blobs.keys().copied().collect();
            let mut affects: BTreeMap<Id, Vec<String>> = BTreeMap::new();
            for (id, path, version) in users {
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

/// The references the layers hold on each blob: one per document version (`users`, from
/// [`cairn_docs::Memory::blob_users`]), one per blob the tree layer owns.
pub(crate) fn held_references(users: &[(Id, String, u32)], trees: &cairn_tree::Trees) -> Result<HashMap<Id, u64>> {
    let mut held: HashMap<Id, u64> = HashMap::new();
    for (id, _, _) in users {
        *held.entry(*id).or_default() += 1;
    }
    for id in trees.owned_blobs()? {
        *held.entry(id).or_default() += 1;
    }
    Ok(held)
}

/// What a damaged range of engine rows holds, by keyspace (`first` to `last`, inclusive).
pub(crate) fn affected_rows(first: &[u8], last: &[u8]) -> Vec<String> {
    use cairn_kv::keyspace::{REGISTRY, owner};
    let mut out = Vec::new();
    let lo = owner(first).map(|k| k.name());
    let hi = owner(last).map(|k| k.name());
    for ks in REGISTRY {
        let p = ks.prefix();
        // The range [first, last] meets the keyspace [p, p + 0xff..].
        let meets = last >= p && (first < p || first.starts_with(p));
        if !meets {
            continue;
        }
        let what = match ks.name() {
            "cas" => "the blob store's index (blobs and the documents and snapshots made of them)".to_string(),
            "docs" => "document rows".to_string(),
            "tree" => "snapshot rows".to_string(),
            "tables" => {
                let name = |k: &[u8]| -> Option<String> {
                    let rest = k.strip_prefix(p)?;
                    let rest = rest.get(2..)?;
                    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
                    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
                };
                match (name(first), name(last)) {
                    (Some(a), Some(b)) if a == b => format!("table {a}"),
                    (a, b) => format!("tables {} to {}", a.unwrap_or_default(), b.unwrap_or_default()),
                }
            }
            "user" => "user keys".to_string(),
            other => other.to_string(),
        };
        out.push(format!("{what} ({} to {})", crate::text::escape(first), crate::text::escape(last)));
    }
    if out.is_empty() || lo.is_none() || hi.is_none() {
        out.push(format!(
            "rows outside every keyspace ({} to {})",
            crate::text::escape(first),
            crate::text::escape(last)
        ));
    }
    out
}
