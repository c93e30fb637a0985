//! Queries: a FIQL filter planned onto a ready index when one applies (equality, `=in=`,
//! ranges, text prefixes; `,` of indexable parts as a union), otherwise a scan; then sort,
//! offset, limit and projection. Candidates from an index are always re-checked against the
//! whole filter, so hash collisions and partly indexable filters stay exact.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound;

use cairn_kv::prefix_successor;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fiql::{self, Arg, Expr, Op};
use crate::{Error, IndexDef, IndexKind, Result, TableDef, Tables, keys, record};

/// What to read from a table.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// FIQL filter (none: every record).
    pub filter: Option<String>,
    /// Sort keys: dotted attribute paths, `-` in front for descending. Unsorted results come in
    /// primary-key order.
    pub sort: Vec<String>,
    /// At most this many records.
    pub limit: Option<usize>,
    /// Skip this many first.
    pub offset: usize,
    /// Keep only these attributes (dotted paths).
    pub fields: Option<Vec<String>>,
}

/// A query's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueryResult {
    /// The records (projected).
    pub records: Vec<Value>,
    /// How the records were found: `scan`, or `index <name> (<kind>): <n> ranges`.
    pub plan: String,
    /// Records read from the table (candidates checked against the filter).
    pub examined: u64,
}

/// One index range: bounds over entry keys.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

enum Plan {
    Scan,
    Index(Vec<(IndexDef, Vec<KeyRange>)>),
}

fn prefix_range(p: Vec<u8>) -> KeyRange {
    let end = prefix_successor(&p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Included(p), end)
}

fn ready_index<'a>(def: &'a TableDef, path: &[String]) -> Option<&'a IndexDef> {
    let attr = path.join(".");
    // A range index serves everything a hash index does; prefer it.
    let mut best: Option<&IndexDef> = None;
    for ix in def.indexes.iter().filter(|i| i.ready && i.attr == attr) {
        if best.is_none() || ix.kind == IndexKind::Range {
            best = Some(ix);
        }
    }
    best
}

fn scalar_prefix(ix: &IndexDef, v: &Value) -> Option<Vec<u8>> {
    let mut k = Vec::new();
    match ix.kind {
        IndexKind::Range => keys::encode_scalar(v, &mut k)?,
        IndexKind::Hash => k.extend_from_slice(&keys::hash_scalar(v)?),
    }
    Some(k)
}

/// Ranges (relative to the index prefix) holding every entry that can equal `a`.
fn eq_ranges(ix: &IndexDef, a: &Arg) -> Option<Vec<KeyRange>> {
    if a.has_wildcard() {
        let lit = a.text.split('*').next().unwrap_or("");
        if ix.kind != IndexKind::Range || lit.is_empty() {
            return None;
        }
        // Text starting with `lit`: the encoding without its terminator is a prefix.
        let mut k = Vec::new();
        keys::encode_scalar(&Value::String(lit.to_string()), &mut k)?;
        k.truncate(k.len() - 2);
        return Some(vec![prefix_range(k)]);
    }
    a.candidates().iter().map(|v| scalar_prefix(ix, v).map(prefix_range)).collect()
}

/// Ranges for `=lt=` etc. on a range index, per type the argument can stand for.
fn cmp_ranges(op: Op, a: &Arg) -> Vec<KeyRange> {
    let mut out = Vec::new();
    for v in a.candidates() {
        let tag = match &v {
            Value::Number(_) => 4u8,
            Value::String(_) => 5,
            _ => continue,
        };
        let mut k = Vec::new();
        if keys::encode_scalar(&v, &mut k).is_none() {
            continue;
        }
        let (lo, hi) = (Bound::Included(vec![tag]), Bound::Excluded(vec![tag + 1]));
        // The first key after every entry holding exactly this value (encodings start with a
        // type tag below 0xFF, so there always is one).
        let after = prefix_successor(&k).expect("scalar encodings have a successor");
        out.push(match op {
            Op::Lt => (lo, Bound::Excluded(k)),
            Op::Le => (lo, Bound::Excluded(after)),
            Op::Gt => (Bound::Included(after), hi),
            Op::Ge => (Bound::Included(k), hi),
            _ => continue,
        });
    }
    out
}

fn lower_max(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match (a, b) {
        (Bound::Unbounded, x) | (x, Bound::Unbounded) => x.clone(),
        (Bound::Included(x), Bound::Included(y)) => Bound::Included(x.max(y).clone()),
        (Bound::Excluded(x), Bound::Excluded(y)) => Bound::Excluded(x.max(y).clone()),
        (Bound::Included(i), Bound::Excluded(e)) | (Bound::Excluded(e), Bound::Included(i)) => {
            if i > e {
                Bound::Included(i.clone())
            } else {
                Bound::Excluded(e.clone())
            }
        }
    }
}

fn upper_min(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match (a, b) {
        (Bound::Unbounded, x) | (x, Bound::Unbounded) => x.clone(),
        (Bound::Included(x), Bound::Included(y)) => Bound::Included(x.min(y).clone()),
        (Bound::Excluded(x), Bound::Excluded(y)) => Bound::Excluded(x.min(y).clone()),
        (Bound::Included(i), Bound::Excluded(e)) | (Bound::Excluded(e), Bound::Included(i)) => {
            if i < e {
                Bound::Included(i.clone())
            } else {
                Bound::Excluded(e.clone())
            }
        }
    }
}

fn nonempty(r: &KeyRange) -> bool {
    match (&r.0, &r.1) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b)) | (Bound::Excluded(a), Bound::Included(b)) => {
            a < b
        }
        _ => true,
    }
}

/// An index and ranges covering every record that can satisfy `e` (None: not indexable).
fn plan_one(def: &TableDef, e: &Expr) -> Option<(IndexDef, Vec<KeyRange>)> {
    match e {
        Expr::Cmp { path, op, args } => {
            let ix = ready_index(def, path)?;
            let ranges = match op {
                Op::Eq => eq_ranges(ix, &args[0])?,
                Op::In => {
                    let mut v = Vec::new();
                    for a in args {
                        v.extend(eq_ranges(ix, a)?);
                    }
                    v
                }
                Op::Lt | Op::Le | Op::Gt | Op::Ge if ix.kind == IndexKind::Range => cmp_ranges(*op, &args[0]),
                _ => return None,
            };
            Some((ix.clone(), ranges))
        }
        Expr::And(parts) => {
            // Equality first (most selective), then the intersection of ranges on one index.
            // `eq`: the number of values an equality looks up (0: a range).
            let mut best: Option<(IndexDef, Vec<KeyRange>, usize)> = None;
            for p in parts {
                let Some((ix, ranges)) = plan_one(def, p) else { continue };
                let eq = match p {
                    Expr::Cmp { op: Op::Eq | Op::In, args, .. } => args.len(),
                    _ => 0,
                };
                best = match best {
                    None => Some((ix, ranges, eq)),
                    Some((bix, branges, 0)) if eq == 0 && bix.id == ix.id => {
                        let mut both = Vec::new();
                        for a in &branges {
                            for b in &ranges {
                                let r = (lower_max(&a.0, &b.0), upper_min(&a.1, &b.1));
                                if nonempty(&r) {
                                    both.push(r);
                                }
                            }
                        }
                        Some((bix, both, 0))
                    }
                    Some((_, _, 0)) if eq > 0 => Some((ix, ranges, eq)),
                    // Of two equalities, the one with fewer values to look up.
                    Some((_, _, beq)) if eq > 0 && eq < beq => Some((ix, ranges, eq)),
                    keep => keep,
                };
            }
            best.map(|(ix, r, _)| (ix, r))
        }
        Expr::Or(_) => None,
    }
}

fn plan(def: &TableDef, e: &Expr) -> Plan {
    match e {
        Expr::Or(parts) => {
            let mut v = Vec::new();
            for p in parts {
                match plan_one(def, p) {
                    Some(x) => v.push(x),
                    None => return Plan::Scan,
                }
            }
            Plan::Index(v)
        }
        e => plan_one(def, e).map_or(Plan::Scan, |x| Plan::Index(vec![x])),
    }
}

/// Orders JSON values: absent/null < false < true < numbers < text < arrays < objects.
fn cmp_values(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    fn rank(v: Option<&Value>) -> u8 {
        match v {
            None | Some(Value::Null) => 0,
            Some(Value::Bool(_)) => 1,
            Some(Value::Number(_)) => 2,
            Some(Value::String(_)) => 3,
            Some(Value::Array(_)) => 4,
            Some(Value::Object(_)) => 5,
        }
    }
    match (a, b) {
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().unwrap_or(0.0).total_cmp(&y.as_f64().unwrap_or(0.0))
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(Value::Array(x)), Some(Value::Array(y))) => x.len().cmp(&y.len()),
        _ => rank(a).cmp(&rank(b)),
    }
}

fn get_path<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, p| v.get(*p))
}

fn project(v: &Value, fields: &[String]) -> Value {
    let mut out = Value::Object(Map::new());
    for f in fields {
        let parts: Vec<&str> = f.split('.').collect();
        if let Some(x) = get_path(v, &parts) {
            let mut t = &mut out;
            for p in &parts[..parts.len() - 1] {
                let m = t.as_object_mut().expect("built from objects");
                t = m.entry(p.to_string()).or_insert_with(|| Value::Object(Map::new()));
                if !t.is_object() {
                    *t = Value::Object(Map::new());
                }
            }
            t.as_object_mut().expect("object").insert(parts[parts.len() - 1].to_string(), x.clone());
        }
    }
    out
}

impl Tables {
    /// Runs a query on `table`.
    pub fn query(&self, table: &str, q: &Query) -> Result<QueryResult> {
        let expr = q.filter.as_deref().filter(|f| !f.trim().is_empty()).map(fiql::parse).transpose()?;
        for s in &q.sort {
            let a = s.strip_prefix('-').unwrap_or(s);
            if a.is_empty() || a.split('.').any(str::is_empty) {
                return Err(Error::Invalid(format!("sort key {s:?} is not an attribute path")));
            }
        }
        let snap = self.rows().snapshot();
        let def = self.inner.def(table, |k| snap.get(k))?;
        let plan = expr.as_ref().map_or(Plan::Scan, |e| plan(&def, e));
        // Without sorting, records come in key order and the scan can stop at offset + limit.
        let stop = if q.sort.is_empty() { q.limit.map(|l| l.saturating_add(q.offset)) } else { None };
        let mut out = Vec::new();
        let mut examined = 0u64;
        // A scan first tries the filter on the attributes it reads and decodes only matches
        // whole (most records of a scan do not match; most index candidates do).
        let roots = expr.as_ref().filter(|_| matches!(plan, Plan::Scan)).map(fiql::Expr::roots);
        let mut keep = |k: &[u8], v: &[u8], out: &mut Vec<Value>| -> Result<bool> {
            examined += 1;
            if let (Some(e), Some(roots)) = (&expr, &roots)
                && !record::matches(k, v, e, roots)?
            {
                return Ok(true);
            }
            let data = record::decode(k, v)?.data;
            if roots.is_none() && expr.as_ref().is_some_and(|e| !e.matches(&data)) {
                return Ok(true);
            }
            out.push(data);
            Ok(stop.is_none_or(|s| out.len() < s))
        };
        let prefix = keys::records_prefix(table);
        let desc = match &plan {
            Plan::Scan => {
                snap.prefix(&prefix).for_each_ref(|k, v| keep(k, v, &mut out))?;
                "scan".to_string()
            }
            Plan::Index(parts) => {
                let mut pks = BTreeSet::new();
                let mut names = Vec::new();
                let mut n_ranges = 0;
                for (ix, ranges) in parts {
                    let ip = keys::index_prefix(table, ix.id);
                    let with = |b: &Bound<Vec<u8>>| match b {
                        Bound::Included(k) => Bound::Included([&ip[..], k].concat()),
                        Bound::Excluded(k) => Bound::Excluded([&ip[..], k].concat()),
                        Bound::Unbounded => Bound::Unbounded,
                    };
                    let end = prefix_successor(&ip).expect("prefix has a successor");
                    for r in ranges {
                        n_ranges += 1;
                        let hi = match with(&r.1) {
                            Bound::Unbounded => Bound::Excluded(end.clone()),
                            b => b,
                        };
                        let lo = match with(&r.0) {
                            Bound::Unbounded => Bound::Included(ip.clone()),
                            b => b,
                        };
                        for kv in snap.range::<Vec<u8>, _>((lo, hi)) {
                            let (k, _) = kv?;
                            let rest = &k[ip.len()..];
                            let skip = match ix.kind {
                                IndexKind::Hash => 8,
                                IndexKind::Range => {
                                    keys::decode_scalar(rest).ok_or_else(|| Error::corrupt(&k, "bad index entry"))?.1
                                }
                            };
                            pks.insert(
                                rest.get(skip..).ok_or_else(|| Error::corrupt(&k, "short index entry"))?.to_vec(),
                            );
                        }
                    }
                    if !names.contains(&ix.name) {
                        names.push(ix.name.clone());
                    }
                }
                for pk in pks {
                    let k = [&prefix[..], &pk].concat();
                    let Some(v) = snap.get(&k)? else { continue };
                    if !keep(&k, &v, &mut out)? {
                        break;
                    }
                }
                format!("index {}: {n_ranges} ranges", names.join("+"))
            }
        };
        if !q.sort.is_empty() {
            let keys: Vec<(Vec<&str>, bool)> = q
                .sort
                .iter()
                .map(|s| match s.strip_prefix('-') {
                    Some(a) => (a.split('.').collect(), true),
                    None => (s.trim_start_matches('+').split('.').collect(), false),
                })
                .collect();
            out.sort_by(|a, b| {
                for (p, desc) in &keys {
                    let o = cmp_values(get_path(a, p), get_path(b, p));
                    let o = if *desc { o.reverse() } else { o };
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                Ordering::Equal
            });
        }
        let records: Vec<Value> = out
            .into_iter()
            .skip(q.offset)
            .take(q.limit.unwrap_or(usize::MAX))
            .map(|v| match &q.fields {
                Some(f) => project(&v, f),
                None => v,
            })
            .collect();
        Ok(QueryResult { records, plan: desc, examined })
    }
}
