//! Power cuts at every storage operation of a table workload (puts, patches, deletes, a
//! transaction, an index built on a populated table): after reopening, every acknowledged write
//! holds, nothing unacknowledged half-exists, and every index matches its records exactly.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_kv::{Db, MemStorage, Options, Storage};
use cairn_tables::{IndexKind, Query, Tables};
use serde_json::{Value, json};

fn open(storage: &MemStorage) -> cairn_tables::Result<Tables> {
    let s: Arc<dyn Storage> = Arc::new(storage.clone());
    Tables::open(Db::open_with_storage("/d/kv", Options::small_for_tests(), s)?.keyspace(cairn_kv::keyspace::TABLES))
}

/// Acknowledged state: id -> record (None: deleted). Plus whether the index creation returned.
type Acked = (BTreeMap<u64, Option<Value>>, bool);

fn workload(storage: &MemStorage) -> Acked {
    let mut acked = BTreeMap::new();
    let mut indexed = false;
    let Ok(t) = open(storage) else { return (acked, indexed) };
    if t.create_table("t", "id", None).is_err() {
        return (acked, indexed);
    }
    if t.create_index("t", "by_city", "city", IndexKind::Hash).is_err() {
        return (acked, indexed);
    }
    for step in 0..40u64 {
        let id = step % 15;
        let city = ["Oslo", "Rome", "Lima"][(step % 3) as usize];
        let rec = json!({"id": id, "city": city, "n": step, "tags": [format!("t{}", step % 4)]});
        let r = match step % 6 {
            0..=2 => t.put("t", rec.clone()).map(|_| vec![(id, Some(rec))]),
            3 => t.patch("t", &json!(id), &json!({"n": step * 10}), None).map(|r| vec![(id, Some(r.data))]),
            4 => t.delete("t", &json!(id), None).map(|_| vec![(id, None)]),
            // Move the record to another id in one transaction.
            _ => t.transaction(|tx| {
                let Some(r) = tx.get("t", &json!(id))? else { return Ok(vec![]) };
                let mut moved = r.data.clone();
                moved["id"] = json!(id + 100);
                tx.delete("t", &json!(id), None)?;
                tx.put("t", moved.clone())?;
                Ok(vec![(id, None), (id + 100, Some(moved))])
            }),
        };
        match r {
            Ok(changes) => acked.extend(changes),
            // A patch of a missing record is refused; anything else means the power is gone.
            Err(cairn_tables::Error::NotFound(..)) => {}
            Err(_) => return (acked, indexed),
        }
        if step == 20 {
            // An index created on a populated table, built in the background.
            if t.create_index("t", "by_n", "n", IndexKind::Range).is_err() || t.wait_for_index("t", "by_n").is_err() {
                return (acked, indexed);
            }
            indexed = true;
        }
    }
    t.close();
    (acked, indexed)
}

fn check(storage: &MemStorage, acked: &Acked, cut: u64) {
    let t = open(storage).unwrap_or_else(|e| panic!("cut {cut}: reopen failed: {e}"));
    if t.table("t").is_err() {
        assert!(acked.0.is_empty(), "cut {cut}: table lost");
        return;
    }
    for (id, want) in &acked.0 {
        let got = t.get("t", &json!(id)).unwrap().map(|r| r.data);
        assert_eq!(got.as_ref(), want.as_ref(), "cut {cut}: record {id}");
    }
    for ix in t.table("t").unwrap().indexes {
        if !ix.ready {
            t.wait_for_index("t", &ix.name).unwrap_or_else(|e| panic!("cut {cut}: resuming {}: {e}", ix.name));
        }
    }
    if acked.1 {
        assert!(t.table("t").unwrap().indexes.iter().any(|i| i.name == "by_n" && i.ready), "cut {cut}");
    }
    t.verify("t").unwrap_or_else(|e| panic!("cut {cut}: {e}"));
    // Index answers equal scan answers.
    let all = t.query("t", &Query::default()).unwrap().records;
    for city in ["Oslo", "Rome", "Lima"] {
        let got = t.query("t", &Query { filter: Some(format!("city=={city}")), ..Default::default() }).unwrap();
        let want: Vec<&Value> = all.iter().filter(|r| r["city"] == city).collect();
        assert_eq!(got.records.iter().collect::<Vec<_>>(), want, "cut {cut}: {city} via {}", got.plan);
    }
    t.close();
}

#[test]
fn power_cut_at_every_storage_operation() {
    let probe = MemStorage::new();
    let full = workload(&probe);
    assert!(full.1 && full.0.len() >= 15, "the workload runs to the end without cuts");
    let ops = probe.mutating_ops();
    eprintln!("table workload: {ops} mutating storage operations");
    let stride = std::env::var("CAIRN_CRASH_STRIDE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    for cut in (0..ops).step_by(stride) {
        let storage = MemStorage::new();
        storage.fail_after(cut);
        let acked = workload(&storage);
        storage.crash();
        check(&storage, &acked, cut);
    }
}
