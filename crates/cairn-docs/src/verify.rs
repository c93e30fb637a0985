//! Checking the memory against itself: every document row decodes and its path row points back
//! at it, every version names a blob the store holds, tag and metadata rows agree with their
//! documents, the full-text index holds exactly the indexed documents (besides changes
//! still queued for it), and every text document it does not cover has its scan row (grep reads
//! it); the passage vectors are checked in [`crate::semantic`].

use std::collections::{BTreeMap, HashMap, HashSet};

use cairn_cas::Id;

use crate::rows::{self, DocRecord, VersionRecord, decode};
use crate::{Memory, Result};

/// One problem and what it affects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What is wrong.
    pub problem: String,
    /// The documents (and versions) it affects.
    pub affects: Vec<String>,
    /// A problem of the full-text index (derived: `reindex` repairs it).
    pub index: bool,
}

/// What [`Memory::verify`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Documents checked.
    pub documents: u64,
    /// Versions checked.
    pub versions: u64,
    /// Everything wrong.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    fn push(&mut self, problem: String, affects: Vec<String>, index: bool) {
        self.problems.push(Problem { problem, affects, index });
    }
}

fn key_text(k: &[u8]) -> String {
    String::from_utf8_lossy(k).escape_debug().to_string()
}

impl Memory {
    /// Checks the memory; see the module documentation. Reads only.
    pub fn verify(&self) -> Result<VerifyReport> {
        let rows_ks = &self.inner.rows;
        let store = &self.inner.store;
        let mut r = VerifyReport::default();
        let mut docs: HashMap<u64, DocRecord> = HashMap::new();
        for kv in rows_ks.prefix(rows::DOC) {
            let (k, v) = kv?;
            r.documents += 1;
            match decode::<DocRecord>(&k, &v) {
                Ok(d) => {
                    docs.insert(d.id, d);
                }
                Err(e) => r.push(format!("document row {} does not decode: {e}", key_text(&k)), Vec::new(), false),
            }
        }
        for d in docs.values() {
            let doc = format!("document {}", d.path);
            match rows_ks.get(rows::path_key(&d.key()))? {
                Some(v) if rows::id_value(b"p", &v).ok() == Some(d.id) => {}
                Some(_) => {
                    r.push(format!("the path row of {} names another document", d.path), vec![doc.clone()], false)
                }
                None => {
                    r.push(format!("{} has no path row (it cannot be found by path)", d.path), vec![doc.clone()], false)
                }
            }
            let mut last: Option<VersionRecord> = None;
            for kv in rows_ks.prefix(rows::versions_prefix(d.id)) {
                let (k, v) = kv?;
                r.versions += 1;
                let ver: VersionRecord = match decode(&k, &v) {
                    Ok(v) => v,
                    Err(e) => {
                        r.push(format!("a version row of {} does not decode: {e}", d.path), vec![doc.clone()], false);
                        continue;
                    }
                };
                let affects = vec![format!("document {} v{}", d.path, ver.version)];
                match rows::parse_hash(&d.path, &ver.hash) {
                    Ok(id) if store.contains(&id)? => {}
                    Ok(id) => r.push(
                        format!("version {} names blob {} the store does not hold", ver.version, id.short()),
                        affects,
                        false,
                    ),
                    Err(e) => r.push(format!("version {}: {e}", ver.version), affects, false),
                }
                last = Some(ver);
            }
            match last {
                Some(v) if v.version == d.version && v.hash == d.hash => {}
                Some(v) => r.push(
                    format!("{} is at v{} but its newest version row is v{}", d.path, d.version, v.version),
                    vec![doc.clone()],
                    false,
                ),
                None => r.push(format!("{} has no version rows", d.path), vec![doc.clone()], false),
            }
        }
        for kv in rows_ks.prefix(rows::PATH) {
            let (k, v) = kv?;
            let id = rows::id_value(&k, &v)?;
            if !docs.contains_key(&id) {
                r.push(format!("path row {} names missing document {id}", key_text(&k)), Vec::new(), false);
            }
        }
        for (prefix, what) in [(rows::TAG, "tag"), (rows::META, "metadata")] {
            for kv in rows_ks.prefix(prefix) {
                let (k, _) = kv?;
                let id = rows::trailing_id(&k)?;
                let label = &k[prefix.len()..k.len() - 8];
                let holds = docs.get(&id).is_some_and(|d| match what {
                    "tag" => label.strip_suffix(&[0]).is_some_and(|t| d.tags.contains(&*String::from_utf8_lossy(t))),
                    _ => d.meta.iter().any(|(mk, mv)| label == [mk.as_bytes(), &[0], mv.as_bytes(), &[0]].concat()),
                });
                if !holds {
                    r.push(format!("{what} row {} disagrees with its document", key_text(&k)), Vec::new(), false);
                }
            }
        }
        // The committed index against the rows, leaving out documents whose change is queued.
        let mut pending = HashSet::new();
        for kv in rows_ks.prefix(rows::QUEUE) {
            let (k, v) = kv?;
            pending.insert(rows::id_value(&k, &v)?);
        }
        let mut counts: BTreeMap<u64, u32> = BTreeMap::new();
        for id in self.inner.index.ids()? {
            *counts.entry(id).or_default() += 1;
        }
        for (id, n) in &counts {
            if pending.contains(id) {
                continue;
            }
            match docs.get(id) {
                None => r.push(
                    format!("the full-text index holds document {id}, which no longer exists (searches skip it)"),
                    Vec::new(),
                    true,
                ),
                Some(d) if !d.indexed => r.push(
                    format!("the full-text index holds {}, which is not indexed", d.path),
                    vec![format!("document {}", d.path)],
                    true,
                ),
                Some(d) if *n > 1 => r.push(
                    format!("the full-text index holds {} {n} times", d.path),
                    vec![format!("document {}", d.path)],
                    true,
                ),
                Some(_) => {}
            }
        }
        for d in docs.values() {
            if d.indexed && !counts.contains_key(&d.id) && !pending.contains(&d.id) {
                r.push(
                    format!("{} is missing from the full-text index (search cannot find it)", d.path),
                    vec![format!("document {}", d.path)],
                    true,
                );
            }
        }
        // Grep reads every text document the n-gram index does not cover: each needs its scan
        // row, or an indexed grep would pass it over.
        let mut scan = HashSet::new();
        for kv in rows_ks.prefix(rows::SCAN) {
            let id = rows::trailing_id(&kv?.0)?;
            if !docs.contains_key(&id) {
                r.push(format!("scan row of missing document {id} (grep skips it)"), Vec::new(), true);
            }
            scan.insert(id);
        }
        for d in docs.values() {
            let uncovered = crate::needs_scan(d)
                || (crate::Kind::from_mime(&d.mime).is_text()
                    && d.indexed
                    && !counts.contains_key(&d.id)
                    && !pending.contains(&d.id));
            if uncovered && !scan.contains(&d.id) {
                r.push(
                    format!(
                        "{} is neither in the n-gram index nor marked for grep to read (grep cannot find it)",
                        d.path
                    ),
                    vec![format!("document {}", d.path)],
                    true,
                );
            }
        }
        self.verify_vectors(&docs, &mut r)?;
        r.problems.sort_by(|a, b| a.problem.cmp(&b.problem));
        Ok(r)
    }

    /// Every (blob, document path, version) the memory references.
    pub fn blob_users(&self) -> Result<Vec<(Id, String, u32)>> {
        let rows_ks = &self.inner.rows;
        let mut paths: HashMap<u64, String> = HashMap::new();
        for kv in rows_ks.prefix(rows::DOC) {
            let (k, v) = kv?;
            let d: DocRecord = decode(&k, &v)?;
            paths.insert(d.id, d.path);
        }
        let mut out = Vec::new();
        for kv in rows_ks.prefix(rows::VERSION) {
            let (k, v) = kv?;
            let ver: VersionRecord = decode(&k, &v)?;
            let id = rows::trailing_id(&k[..k.len().saturating_sub(4)])?;
            let path = paths.get(&id).cloned().unwrap_or_else(|| format!("<document {id}>"));
            out.push((rows::parse_hash(&path, &ver.hash)?, path, ver.version));
        }
        Ok(out)
    }
}

impl Memory {
    /// Rewrites the path, tag and metadata rows from the document records (after `verify`
    /// found rows that disagree with them): they are derived from the records. Returns the
    /// documents whose rows were written.
    pub fn rebuild_rows(&self) -> Result<u64> {
        let _w = self.inner.write.lock();
        let rows_ks = &self.inner.rows;
        let mut b = cairn_kv::KeyspaceBatch::new();
        for prefix in [rows::PATH, rows::TAG, rows::META] {
            let end = cairn_kv::prefix_successor(prefix).expect("row prefixes end below 0xff");
            b.delete_range(rows_ks, prefix, end)?;
        }
        let mut n = 0;
        for kv in rows_ks.prefix(rows::DOC) {
            let (k, v) = kv?;
            let Ok(d) = decode::<DocRecord>(&k, &v) else { continue };
            crate::write_doc_rows(&mut crate::RowSink::Kv(rows_ks, &mut b), &d, None)?;
            n += 1;
        }
        rows_ks.write(b)?;
        Ok(n)
    }
}

impl Memory {
    /// Makes the full-text index agree with the rows after the engine lost a tail of its log
    /// (the index may hold documents whose rows are gone, or old text): removes entries of
    /// documents that do not exist or are not indexed, and indexes again every document the
    /// index lacks. Returns (entries removed, documents indexed again).
    pub fn resync_index(&self) -> Result<(u64, u64)> {
        let mut w = self.inner.write.lock();
        let mut docs: HashMap<u64, DocRecord> = HashMap::new();
        for kv in self.inner.rows.prefix(rows::DOC) {
            let (k, v) = kv?;
            if let Ok(d) = decode::<DocRecord>(&k, &v) {
                docs.insert(d.id, d);
            }
        }
        let in_index: HashSet<u64> = self.inner.index.ids()?.into_iter().collect();
        let (mut removed, mut added) = (0, 0);
        for id in &in_index {
            if docs.get(id).is_none_or(|d| !d.indexed) {
                self.inner.index.write_direct(&crate::index::Change::remove(*id))?;
                removed += 1;
            }
        }
        for d in docs.values() {
            if d.indexed && !in_index.contains(&d.id) {
                if let Some(why) = self.reindex_or_leave_out(d)? {
                    self.inner.warnings.lock().push(why);
                } else {
                    added += 1;
                }
            }
        }
        if removed + added > 0 {
            self.commit_locked(&mut w)?;
        }
        Ok((removed, added))
    }
}
