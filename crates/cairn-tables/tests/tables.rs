//! Record tables: CRUD, schema, indexes (background build, maintenance), FIQL planning,
//! transactions and conditional writes.

use cairn_kv::{Db, Options};
use cairn_tables::{AttrSpec, AttrType, Error, IndexKind, Query, Schema, Tables};
use serde_json::{Value, json};

fn open(dir: &std::path::Path) -> Tables {
    Tables::open(Db::open(dir, Options::default()).unwrap().keyspace(cairn_kv::keyspace::TABLES)).unwrap()
}

fn q(t: &Tables, filter: &str) -> (Vec<Value>, String) {
    let r = t.query("people", &Query { filter: Some(filter.into()), ..Default::default() }).unwrap();
    (r.records.iter().map(|r| r["id"].clone()).collect(), r.plan)
}

/// Filters compared between scans and index plans.
const FILTERS: [&str; 9] = [
    "age==30",
    "age=gt=65",
    "age=ge=30;age=lt=33",
    "addr.city==Paris",
    "name==p01*",
    "tags=in=(t1,t2);age==21",
    "age==30,age==31",
    "addr.city!=Paris",
    "age=lt=25,name==p1*",
];

fn people(t: &Tables, n: u64) {
    t.create_table("people", "id", None).unwrap();
    for i in 0..n {
        let city = ["London", "Paris", "Rome", "Oslo"][(i % 4) as usize];
        t.put("people", json!({"id": i, "name": format!("p{i:03}"), "age": 20 + i % 50, "addr": {"city": city}, "tags": [format!("t{}", i % 3)]}))
            .unwrap();
    }
}

#[test]
fn crud_versions_and_conditional_writes() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path());
    t.create_table("kv", "key", None).unwrap();
    assert!(matches!(t.create_table("kv", "key", None), Err(Error::TableExists(_))));
    assert!(matches!(t.create_table("bad/name", "key", None), Err(Error::Invalid(_))));
    let r = t.insert("kv", json!({"key": "a", "n": 1})).unwrap();
    assert_eq!(r.version, 1);
    assert!(matches!(t.insert("kv", json!({"key": "a", "n": 2})), Err(Error::Exists(..))));
    let r = t.put("kv", json!({"key": "a", "n": 3})).unwrap();
    assert_eq!(r.version, 2);
    assert!(matches!(
        t.put_if_version("kv", json!({"key": "a", "n": 4}), 1),
        Err(Error::VersionMismatch { expected: 1, current: 2, .. })
    ));
    assert_eq!(t.put_if_version("kv", json!({"key": "a", "n": 4}), 2).unwrap().version, 3);
    let p = t.patch("kv", &json!("a"), &json!({"n": null, "m": {"x": 1}}), Some(3)).unwrap();
    assert_eq!(p.data, json!({"key": "a", "m": {"x": 1}}));
    assert!(matches!(t.patch("kv", &json!("a"), &json!({"key": "b"}), None), Err(Error::Invalid(_))));
    assert!(matches!(t.patch("kv", &json!("zz"), &json!({}), None), Err(Error::NotFound(..))));
    assert_eq!(t.get("kv", &json!("a")).unwrap().unwrap().version, 4);
    assert!(matches!(t.delete("kv", &json!("a"), Some(1)), Err(Error::VersionMismatch { .. })));
    assert!(t.delete("kv", &json!("a"), Some(4)).unwrap());
    assert!(!t.delete("kv", &json!("a"), None).unwrap());
    assert!(t.get("kv", &json!("a")).unwrap().is_none());
    for bad in [json!([1]), json!({"n": 1}), json!({"key": 1.5}), json!({"key": ""}), json!({"key": {"x": 1}})] {
        assert!(matches!(t.put("kv", bad.clone()), Err(Error::Invalid(_))), "{bad}");
    }
    assert!(matches!(t.put("nope", json!({"key": "a"})), Err(Error::NoTable(_))));
    // Integer and text keys are distinct.
    t.put("kv", json!({"key": 1})).unwrap();
    t.put("kv", json!({"key": "1"})).unwrap();
    assert_eq!(t.query("kv", &Query::default()).unwrap().records.len(), 2);
}

#[test]
fn schema_is_checked_on_every_write() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path());
    let mut s = Schema::default();
    s.attributes.insert("name".into(), AttrSpec { ty: AttrType::String, required: true });
    s.attributes.insert("age".into(), AttrSpec { ty: AttrType::Integer, required: false });
    s.attributes.insert("addr.zip".into(), AttrSpec { ty: AttrType::String, required: false });
    t.create_table("s", "id", Some(s)).unwrap();
    t.put("s", json!({"id": 1, "name": "x", "age": 3, "addr": {"zip": "123"}, "free": true})).unwrap();
    let e = t.put("s", json!({"id": 2, "age": 3})).unwrap_err().to_string();
    assert!(e.contains("\"name\" is required"), "{e}");
    let e = t.put("s", json!({"id": 2, "name": "y", "age": "old"})).unwrap_err().to_string();
    assert!(e.contains("\"age\" must be integer") && e.contains("\"old\""), "{e}");
    let e = t.put("s", json!({"id": 2, "name": "y", "addr": {"zip": 1}})).unwrap_err().to_string();
    assert!(e.contains("addr.zip"), "{e}");
    let e = t.patch("s", &json!(1), &json!({"name": null}), None).unwrap_err().to_string();
    assert!(e.contains("required"), "{e}");
    assert_eq!(t.get("s", &json!(1)).unwrap().unwrap().version, 1, "refused writes change nothing");
}

#[test]
fn indexes_build_in_background_and_queries_use_them() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path());
    people(&t, 2000);
    let before: Vec<(Vec<Value>, String)> = FILTERS.iter().map(|f| q(&t, f)).collect();
    for (_, plan) in &before {
        assert_eq!(plan, "scan");
    }
    t.create_index("people", "by_age", "age", IndexKind::Range).unwrap();
    t.create_index("people", "by_city", "addr.city", IndexKind::Hash).unwrap();
    t.create_index("people", "by_name", "name", IndexKind::Range).unwrap();
    t.create_index("people", "by_tag", "tags", IndexKind::Hash).unwrap();
    // Writes while the builders run are kept in the indexes too.
    for i in 2000..2100u64 {
        t.put(
            "people",
            json!({"id": i, "name": format!("p{i}"), "age": 30, "addr": {"city": "Paris"}, "tags": ["t1"]}),
        )
        .unwrap();
    }
    for i in 0..50u64 {
        t.delete("people", &json!(i * 7), None).unwrap();
    }
    for n in ["by_age", "by_city", "by_name", "by_tag"] {
        t.wait_for_index("people", n).unwrap();
    }
    assert_eq!(t.verify("people").unwrap(), 2050);
    // Same answers as a scan over the same data.
    let plans = [
        "index by_age",
        "index by_age",
        "index by_age",
        "index by_city",
        "index by_name",
        "index by_age",
        "index by_age",
        "scan",
        "index by_age+by_name",
    ];
    for (f, p) in FILTERS.iter().zip(plans) {
        let (ids, plan) = q(&t, f);
        assert!(plan.starts_with(p), "{f}: {plan}");
        let all = t.query("people", &Query::default()).unwrap().records;
        let e = cairn_tables::fiql::parse(f).unwrap();
        let want: Vec<Value> = all.iter().filter(|r| e.matches(r)).map(|r| r["id"].clone()).collect();
        assert_eq!(ids, want, "{f}");
        assert!(!ids.is_empty(), "{f}");
    }
    let r = t.query("people", &Query { filter: Some("age==30".into()), ..Default::default() }).unwrap();
    assert!(r.examined < 200, "an index lookup reads only candidates: {}", r.examined);
    // Updates move entries; a dropped index is gone from plans.
    t.patch("people", &json!(2000), &json!({"age": 99}), None).unwrap();
    assert!(q(&t, "age==99").0.contains(&json!(2000)));
    assert!(!q(&t, "age==30").0.contains(&json!(2000)));
    t.verify("people").unwrap();
    t.drop_index("people", "by_age").unwrap();
    assert_eq!(q(&t, "age==99").1, "scan");
    t.verify("people").unwrap();
    t.close();
    // Reopened: the definition and entries persist.
    drop(t);
    let t = open(d.path());
    assert!(q(&t, "addr.city==Paris").1.starts_with("index by_city"));
    assert_eq!(t.verify("people").unwrap(), 2050);
}

#[test]
fn sort_limit_offset_projection() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path());
    people(&t, 100);
    let r = t
        .query(
            "people",
            &Query {
                filter: Some("addr.city==Rome".into()),
                sort: vec!["-age".into(), "name".into()],
                limit: Some(3),
                offset: 1,
                fields: Some(vec!["name".into(), "addr.city".into()]),
            },
        )
        .unwrap();
    assert_eq!(
        r.records,
        vec![
            json!({"name": "p046", "addr": {"city": "Rome"}}),
            json!({"name": "p094", "addr": {"city": "Rome"}}),
            json!({"name": "p042", "addr": {"city": "Rome"}}),
        ]
    );
    let r = t.query("people", &Query { limit: Some(5), offset: 10, ..Default::default() }).unwrap();
    assert_eq!(r.records.iter().map(|v| v["id"].as_u64().unwrap()).collect::<Vec<_>>(), vec![10, 11, 12, 13, 14]);
    assert!(r.examined <= 15, "stops early without a sort");
    let e = t.query("people", &Query { filter: Some("age=zz=3".into()), ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("byte 3"), "{e}");
}

#[test]
fn transactions_retry_on_conflict_and_never_lose_an_update() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path());
    t.create_table("acct", "id", None).unwrap();
    t.put("acct", json!({"id": "a", "bal": 1000})).unwrap();
    t.put("acct", json!({"id": "b", "bal": 0})).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..25 {
                    t.transaction(|tx| {
                        let a = tx.get("acct", &json!("a"))?.unwrap().data;
                        let b = tx.get("acct", &json!("b"))?.unwrap().data;
                        tx.put("acct", json!({"id": "a", "bal": a["bal"].as_i64().unwrap() - 1}))?;
                        tx.put("acct", json!({"id": "b", "bal": b["bal"].as_i64().unwrap() + 1}))?;
                        Ok(())
                    })
                    .unwrap();
                }
            });
        }
    });
    let a = t.get("acct", &json!("a")).unwrap().unwrap();
    let b = t.get("acct", &json!("b")).unwrap().unwrap();
    assert_eq!((a.data["bal"].clone(), b.data["bal"].clone()), (json!(900), json!(100)));
    assert_eq!(a.version, 101);
    // An error inside the closure writes nothing.
    let r: Result<(), Error> = t.transaction(|tx| {
        tx.put("acct", json!({"id": "a", "bal": 0}))?;
        Err(Error::Invalid("changed my mind".into()))
    });
    assert!(r.is_err());
    assert_eq!(t.get("acct", &json!("a")).unwrap().unwrap().data["bal"], json!(900));
}

/// Records stored in format 1 (version, then JSON text) by earlier releases stay readable,
/// filterable, indexable and writable; a write stores format 2.
#[test]
fn format_1_records_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    t.create_table("people", "id", None).unwrap();
    for i in 0..20u64 {
        let rec = json!({"id": i, "name": format!("p{i:03}"), "age": 20 + i, "addr": {"city": "Oslo"}});
        let mut row = vec![1u8];
        row.extend_from_slice(&3u64.to_le_bytes());
        row.extend_from_slice(serde_json::to_string(&rec).unwrap().as_bytes());
        let key = cairn_tables::keys::record_key("people", &cairn_tables::encode_id(&json!(i)).unwrap());
        t.rows().put(&key, &row).unwrap();
    }
    let r = t.get("people", &json!(4)).unwrap().unwrap();
    assert_eq!((r.version, r.data["name"].clone()), (3, json!("p004")));
    assert_eq!(q(&t, "age=gt=35;addr.city==Oslo").0, vec![json!(16), json!(17), json!(18), json!(19)]);
    t.create_index("people", "age", "age", IndexKind::Range).unwrap();
    t.wait_for_index("people", "age").unwrap();
    let (ids, plan) = q(&t, "age=ge=38");
    assert_eq!((ids, plan.starts_with("index")), (vec![json!(18), json!(19)], true));
    // Replacing a format-1 record moves its index entry and bumps its version.
    let r = t.put("people", json!({"id": 18, "name": "p018", "age": 1})).unwrap();
    assert_eq!(r.version, 4);
    assert_eq!(q(&t, "age=ge=38").0, vec![json!(19)]);
    assert_eq!(q(&t, "age==1").0, vec![json!(18)]);
    let key = cairn_tables::keys::record_key("people", &cairn_tables::encode_id(&json!(18)).unwrap());
    assert_eq!(t.rows().get(&key).unwrap().unwrap()[0], 2, "rewritten in format 2");
    assert!(t.delete("people", &json!(19), Some(3)).unwrap());
    assert_eq!(q(&t, "age=ge=38").0, Vec::<Value>::new());
    assert_eq!(t.verify("people").unwrap(), 19);
}

/// Writers that reuse cached table definitions never miss an index created, finished or
/// dropped while they write: every round of index changes ends with the indexes in step.
#[test]
fn writers_racing_index_changes_keep_indexes_in_step() {
    use cairn_tables::Expect;
    use std::sync::atomic::{AtomicBool, Ordering};
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path());
    t.create_table("w", "id", None).unwrap();
    let stop = AtomicBool::new(false);
    /// Stops the writers even when a check below panics (the scope waits for them).
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let (t, stop) = (&t, &stop);
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let id = (i * 3 + w) % 600;
                    let r = json!({"id": id, "a": i % 17, "b": {"c": format!("v{}", i % 5)}});
                    t.put_with("w", &r, Expect::Any).unwrap();
                    if i.is_multiple_of(7) {
                        t.delete("w", &json!((id + 3) % 600), None).unwrap();
                    }
                    i += 1;
                }
            });
        }
        let _stop = Stop(&stop);
        for round in 0..6u32 {
            t.create_index("w", &format!("a{round}"), "a", IndexKind::Range).unwrap();
            t.create_index("w", &format!("c{round}"), "b.c", IndexKind::Hash).unwrap();
            t.wait_for_index("w", &format!("a{round}")).unwrap();
            t.wait_for_index("w", &format!("c{round}")).unwrap();
            t.verify("w").unwrap();
            if !round.is_multiple_of(2) {
                t.drop_index("w", &format!("a{round}")).unwrap();
            }
        }
    });
    t.verify("w").unwrap();
    let (ids, plan) = {
        let r = t.query("w", &Query { filter: Some("a==3".into()), ..Default::default() }).unwrap();
        (r.records.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(), r.plan)
    };
    assert!(plan.starts_with("index"), "{plan}");
    let all = t.query("w", &Query::default()).unwrap().records;
    let want: Vec<Value> = all.iter().filter(|r| r["a"] == json!(3)).map(|r| r["id"].clone()).collect();
    assert_eq!(ids, want);
}

/// A record deleted and created again does not start over at version 1: a client holding the
/// old record's version cannot write the new record (no ABA).
#[test]
fn versions_keep_increasing_across_delete_and_re_create() {
    let t = tempfile::tempdir().unwrap();
    let tables = open(t.path());
    tables.create_table("people", "id", None).unwrap();
    assert_eq!(tables.put("people", json!({"id": 1, "name": "Ada"})).unwrap().version, 1);
    assert_eq!(tables.patch("people", &json!(1), &json!({"age": 36}), Some(1)).unwrap().version, 2);
    assert!(tables.delete("people", &json!(1), Some(2)).unwrap());
    // Absent now: "absent" (version 0) is what a conditional create expects.
    let again = tables.put_if_version("people", json!({"id": 1, "name": "Grace"}), 0).unwrap();
    assert_eq!(again.version, 3, "continues from the deleted record's version");
    // A client that read version 1 or 2 of the old record is refused.
    for stale in [1, 2] {
        let e = tables.patch("people", &json!(1), &json!({"age": 99}), Some(stale)).unwrap_err();
        assert!(matches!(e, Error::VersionMismatch { .. }), "{e}");
    }
    assert_eq!(tables.get("people", &json!(1)).unwrap().unwrap().data["name"], "Grace");
    // Across a reopen too, and for inserts.
    assert!(tables.delete("people", &json!(1), None).unwrap());
    drop(tables);
    let tables = open(t.path());
    assert_eq!(tables.insert("people", json!({"id": 1, "name": "Edsger"})).unwrap().version, 4);
    assert_eq!(tables.verify("people").unwrap(), 1);
    // Dropping the table forgets the deleted versions with everything else.
    tables.drop_table("people").unwrap();
    tables.create_table("people", "id", None).unwrap();
    assert_eq!(tables.put("people", json!({"id": 1})).unwrap().version, 1);
}
