//! Damage and mishaps (issue 73): each case is a reproduction of something that once lost or
//! changed data without a word. Every command either gives the right answer or fails saying
//! what is wrong; `verify` names the damage with what it affects; `repair` recovers what can
//! be recovered.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::run_in;
use serde_json::Value;

fn cairn(d: &Path, args: &[&str]) -> (i32, String, String) {
    run_in(None, d, args, None)
}

fn ok(d: &Path, args: &[&str]) -> String {
    let (code, out, err) = cairn(d, args);
    assert_eq!(code, 0, "cairn {args:?}: {err}");
    out
}

fn json(d: &Path, args: &[&str]) -> (i32, Value) {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let (code, out, err) = cairn(d, &a);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("cairn {args:?}: {e}: {out} {err}"));
    (code, v)
}

/// A source tree of text files and a data directory holding it as documents and a snapshot.
struct Setup {
    _t: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    src: PathBuf,
    files: Vec<(PathBuf, String)>,
}

fn setup() -> Setup {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().to_path_buf();
    let src = root.join("src");
    let mut files = Vec::new();
    for i in 0..12 {
        let p = src.join(format!("d{}/f{i}.txt", i % 3));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let mut text = format!("file {i} talks about zebras and more\n");
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i;
        while text.len() < 40_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(&format!("{x:016x}\n"));
        }
        fs::write(&p, &text).unwrap();
        files.push((p, text));
    }
    let data = root.join("data");
    ok(&data, &["add", "-r", src.to_str().unwrap()]);
    ok(&data, &["snapshot", src.to_str().unwrap(), "--name", "s1"]);
    ok(&data, &["table", "create", "people"]);
    ok(&data, &["table", "put", "people", r#"{"id":1,"name":"Ada"}"#]);
    Setup { _t: t, root, data, src, files }
}

fn packs(d: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(d.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

fn kv_files(d: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(d.join("kv")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// Issue 73, case 1: a missing CURRENT once made a read-only command delete every table,
/// MANIFEST and log, and the next snapshot overwrite a pack.
#[test]
fn a_missing_current_is_an_error_then_repair_rebuilds() {
    let s = setup();
    let d = &s.data;
    let before_kv = kv_files(d);
    let before_packs = packs(d);
    fs::remove_file(d.join("kv/CURRENT")).unwrap();
    for args in [&["ls"][..], &["search", "zebras"], &["verify"], &["snapshot", s.src.to_str().unwrap()]] {
        let (code, _, err) = cairn(d, args);
        assert_eq!(code, 6, "{args:?}: damaged data: {err}");
        assert!(err.contains("cairn repair") && err.contains("MANIFEST"), "{args:?}: {err}");
    }
    let mut now = kv_files(d);
    now.retain(|f| f != "LOCK");
    let mut want = before_kv.clone();
    want.retain(|f| f != "CURRENT" && f != "LOCK");
    assert_eq!(now, want, "nothing in kv/ was deleted or added");
    assert_eq!(packs(d), before_packs, "no pack was touched");

    let (code, v) = json(d, &["repair"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["actions"][0].as_str().unwrap().contains("rebuilt the engine's state"), "{v}");
    assert_eq!(v["ok"], true, "{v}");
    let listed = ok(d, &["ls"]);
    assert_eq!(listed.lines().count(), 12, "{listed}");
    assert_eq!(ok(d, &["cat", s.files[3].0.to_str().unwrap()]), s.files[3].1);
    assert!(ok(d, &["table", "get", "people", "1"]).contains("Ada"));
    // A new snapshot writes a new pack, never over an old one.
    fs::write(s.src.join("new.txt"), "brand new content for a new pack").unwrap();
    ok(d, &["snapshot", s.src.to_str().unwrap(), "--name", "s2"]);
    for (p, b) in &before_packs {
        assert_eq!(&fs::read(p).unwrap(), b, "{} was rewritten", p.display());
    }
    let out = s.root.join("out");
    ok(d, &["checkout", "s2", out.to_str().unwrap()]);
    assert_eq!(fs::read_to_string(out.join("new.txt")).unwrap(), "brand new content for a new pack");
}

/// An engine directory deleted outright: the packs are not adopted by a new, empty index.
#[test]
fn packs_beside_an_empty_index_are_refused_not_reused() {
    let s = setup();
    let d = &s.data;
    let before = packs(d);
    fs::remove_dir_all(d.join("kv")).unwrap();
    let (code, _, err) = cairn(d, &["ls"]);
    assert_eq!(code, 3, "no data directory: {err}");
    let (code, _, err) = cairn(d, &["add", s.files[0].0.to_str().unwrap()]);
    assert_eq!(code, 6, "{err}");
    assert!(err.contains("pack files but the blob store's index is empty"), "{err}");
    assert_eq!(packs(d), before, "no pack reused or deleted");
}

/// Case 2: a hard-linked file shares its inode with the store's copy; an edit through it
/// once reached every later checkout, and modes and times were lost.
#[test]
fn hard_linked_checkouts_keep_modes_and_times_and_edits_stay_theirs() {
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let secret = src.join("secret.txt");
    fs::write(&secret, "original secret").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    fs::File::options().write(true).open(&secret).unwrap().set_modified(old).unwrap();
    let d = t.path().join("data");
    ok(&d, &["snapshot", src.to_str().unwrap(), "--name", "s"]);
    let one = t.path().join("one");
    ok(&d, &["checkout", "s", one.to_str().unwrap(), "--mode", "hardlink"]);
    let m = fs::metadata(one.join("secret.txt")).unwrap();
    assert_eq!(m.mode() & 0o777, 0o400, "owner-only stays owner-only (write bit dropped)");
    assert_eq!(m.mtime(), 1_600_000_000, "the mtime is the file's");
    // The user edits the linked file.
    let f = one.join("secret.txt");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(&f, "EDITED in the checkout").unwrap();
    let two = t.path().join("two");
    ok(&d, &["checkout", "s", two.to_str().unwrap(), "--mode", "hardlink"]);
    assert_eq!(fs::read_to_string(two.join("secret.txt")).unwrap(), "original secret");
    assert_eq!(fs::read_to_string(&f).unwrap(), "EDITED in the checkout", "the user's edit is kept");
    // An edit that restores the mtime is found by verify, and repair unlinks the copy.
    let g = two.join("secret.txt");
    fs::set_permissions(&g, fs::Permissions::from_mode(0o400 | 0o200)).unwrap();
    fs::write(&g, "sneaky same-size edit!!").unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o400)).unwrap();
    fs::File::open(&g).unwrap().set_modified(old).unwrap();
    let (code, v) = json(&d, &["verify"]);
    assert_eq!(code, 6, "{v}");
    assert!(v["problems"].as_array().unwrap().iter().any(|p| p["layer"] == "files"), "{v}");
    let (code, v) = json(&d, &["repair"]);
    assert_eq!(code, 0, "{v}");
    let three = t.path().join("three");
    ok(&d, &["checkout", "s", three.to_str().unwrap(), "--mode", "hardlink"]);
    assert_eq!(fs::read_to_string(three.join("secret.txt")).unwrap(), "original secret");
    // The default checkout shares nothing writable with the store.
    let four = t.path().join("four");
    ok(&d, &["checkout", "s", four.to_str().unwrap()]);
    let m4 = fs::metadata(four.join("secret.txt")).unwrap();
    assert_eq!(m4.mode() & 0o777, 0o600);
    assert_ne!(m4.ino(), fs::metadata(three.join("secret.txt")).unwrap().ino());
}

/// Flips one byte in the middle of the first pack (inside the documents' and the snapshot's
/// content).
fn damage_first_pack(d: &Path) -> PathBuf {
    let (p, mut b) = packs(d).remove(0);
    let at = b.len() / 2;
    b[at] ^= 0x40;
    fs::write(&p, b).unwrap();
    p
}

/// Cases 3 and 10: verify names the documents and snapshot paths damage affects; a new
/// snapshot of the intact source stores the damaged chunks again instead of sharing them.
#[test]
fn damage_is_named_and_an_intact_source_repairs_it() {
    let s = setup();
    let d = &s.data;
    damage_first_pack(d);
    let (code, v) = json(d, &["verify"]);
    assert_eq!(code, 6, "{v}");
    let problems = v["problems"].as_array().unwrap();
    let affects: Vec<&str> =
        problems.iter().flat_map(|p| p["affects"].as_array().unwrap()).map(|a| a.as_str().unwrap()).collect();
    assert!(affects.iter().any(|a| a.starts_with("document ") && a.contains("/src/")), "{v}");
    assert!(affects.iter().any(|a| a.starts_with("snapshot s1: /")), "{v}");
    // Reading a damaged document fails saying so (never wrong bytes).
    let mut failed = 0;
    for (p, text) in &s.files {
        let (code, out, err) = cairn(d, &["cat", p.to_str().unwrap()]);
        if code == 0 {
            assert_eq!(&out, text, "{}", p.display());
        } else {
            assert_eq!(code, 6, "{err}");
            failed += 1;
        }
    }
    assert!(failed > 0, "the flipped byte damaged some document");
    // Snapshot the intact source again: not taken as unchanged, the damaged chunks re-stored.
    let (code, v) = json(d, &["snapshot", s.src.to_str().unwrap(), "--name", "s2"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["files_read"].as_u64().unwrap() > 0, "damaged files were read again: {v}");
    let (code, v) = json(d, &["verify"]);
    assert_eq!(code, 0, "repaired by the snapshot: {v}");
    for (p, text) in &s.files {
        assert_eq!(&ok(d, &["cat", p.to_str().unwrap()]), text);
    }
    let out = s.root.join("out");
    ok(d, &["checkout", "s1", out.to_str().unwrap()]);
}

/// A deleted pack: writes of the same content store it again; repair reads the documents'
/// own files when no source is given.
#[test]
fn a_deleted_pack_is_reported_and_repaired_from_the_files() {
    let s = setup();
    let d = &s.data;
    let (p, _) = packs(d).remove(0);
    fs::remove_file(&p).unwrap();
    let (code, v) = json(d, &["verify", "--no-chunks"]);
    assert_eq!(code, 6, "{v}");
    let text = v.to_string();
    assert!(text.contains("missing"), "{v}");
    let (code, v) = json(d, &["repair"]);
    assert_eq!(code, 0, "{v}");
    assert!(v["chunks_restored"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    for (p, text) in &s.files {
        assert_eq!(&ok(d, &["cat", p.to_str().unwrap()]), text);
    }
}

/// Case 5: a truncated log once dropped an acknowledged add without a word, and the index kept
/// a ghost (a page of ten hits showed nine).
#[test]
fn a_truncated_log_is_reported_and_leaves_no_ghosts() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let logs = |d: &Path| -> Vec<(PathBuf, u64)> {
        let Ok(dir) = fs::read_dir(d.join("kv")) else { return Vec::new() };
        let mut v: Vec<(PathBuf, u64)> = dir
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .map(|p| {
                let n = fs::metadata(&p).unwrap().len();
                (p, n)
            })
            .collect();
        v.sort();
        v
    };
    let mut before = Vec::new();
    for i in 0..15 {
        before = logs(&d);
        let (code, _, err) = run_in(None, &d, &["add", "-", "--name", &format!("n{i:02}")], Some(b"zebra note"));
        assert_eq!(code, 0, "{err}");
    }
    // The log the last add wrote to: cut it in the middle of what that add appended, so the
    // add's records are torn and recovery must discard them.
    let after = logs(&d);
    let (log, from, to) = after
        .iter()
        .filter_map(|(p, n)| {
            let was = before.iter().find(|(q, _)| q == p).map_or(0, |(_, m)| *m);
            (*n > was).then(|| (p.clone(), was, *n))
        })
        .next_back()
        .expect("the last add grew a log");
    fs::File::options().write(true).open(&log).unwrap().set_len(from + (to - from) / 2).unwrap();
    let (code, out, err) = cairn(&d, &["search", "zebra"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("discarded") && err.contains(".log"), "said at open: {err}");
    let shown = out.lines().filter(|l| l.contains(". n")).count();
    assert_eq!(shown, 10, "a full page: {out}");
    let listed = ok(&d, &["ls"]).lines().count();
    assert!(listed < 15, "the cut add is gone: {listed}");
    let (_, v) = json(&d, &["search", "zebra", "-n", "100"]);
    assert_eq!(v["hits"].as_array().unwrap().len(), listed, "no ghost hits: {v}");
}

/// Case 9: a damaged full-text index once made every document command fail, reindex included.
#[test]
fn a_damaged_index_does_not_stop_commands() {
    let s = setup();
    let d = &s.data;
    fs::write(d.join("docs-index/meta.json"), "not json at all").unwrap();
    let (code, out, err) = cairn(d, &["search", "zebras"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("made anew"), "{err}");
    assert!(out.contains("10 of 12 matching"), "{out}");
    assert!(ok(d, &["reindex"]).contains("indexed 12 documents"));
    // Segment files garbled too: still a clear path back.
    for e in fs::read_dir(d.join("docs-index")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "idx" || x == "pos") {
            fs::write(&p, b"garbage").unwrap();
        }
    }
    let (code, _, err) = cairn(d, &["reindex"]);
    assert_eq!(code, 0, "{err}");
    assert!(ok(d, &["search", "zebras"]).contains("10 of 12 matching"));
}

/// Damages each kind of file in turn and checks that no command silently loses or changes
/// data: each read gives the stored bytes or fails with the damage named, and verify (the
/// first command after the damage) reports it.
#[test]
fn fault_injection_every_kind_of_file() {
    type Damage = fn(&Path);
    fn flip_middle(p: &Path) {
        let mut b = fs::read(p).unwrap();
        let at = b.len() / 2;
        b[at] ^= 0x08;
        fs::write(p, b).unwrap();
    }
    fn largest(dir: &Path, ext: &str) -> Option<PathBuf> {
        let mut v: Vec<(u64, PathBuf)> = fs::read_dir(dir)
            .ok()?
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .map(|p| (fs::metadata(&p).unwrap().len(), p))
            .collect();
        v.sort();
        v.pop().map(|(_, p)| p)
    }
    let cases: Vec<(&str, Damage)> = vec![
        ("a pack byte", |d| flip_middle(&largest(&d.join("packs"), "pack").unwrap())),
        ("a pack deleted", |d| fs::remove_file(largest(&d.join("packs"), "pack").unwrap()).unwrap()),
        ("an engine table byte", |d| {
            let kv = d.join("kv");
            match largest(&kv, "sst") {
                Some(p) => flip_middle(&p),
                None => {
                    // Everything is still in the log: damage the middle of it.
                    flip_middle(&largest(&kv, "log").unwrap());
                }
            }
        }),
        ("the MANIFEST deleted", |d| {
            for e in fs::read_dir(d.join("kv")).unwrap() {
                let p = e.unwrap().path();
                if p.file_name().unwrap().to_string_lossy().starts_with("MANIFEST") {
                    fs::remove_file(p).unwrap();
                }
            }
        }),
        ("the log's tail cut", |d| {
            let p = largest(&d.join("kv"), "log").unwrap();
            let n = fs::metadata(&p).unwrap().len();
            fs::File::options().write(true).open(&p).unwrap().set_len(n / 2).unwrap();
        }),
        ("the index's files", |d| {
            for e in fs::read_dir(d.join("docs-index")).unwrap() {
                let p = e.unwrap().path();
                if p.is_file() {
                    fs::write(&p, b"garbage").unwrap();
                }
            }
        }),
        ("a shared checkout copy", |d| {
            let dir = fs::read_dir(d.join("files")).unwrap().next().unwrap().unwrap().path();
            let f = fs::read_dir(dir).unwrap().next().unwrap().unwrap().path();
            let m = fs::metadata(&f).unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
            let mut b = fs::read(&f).unwrap();
            b[0] ^= 0x20;
            fs::write(&f, b).unwrap();
            fs::set_permissions(&f, m.permissions()).unwrap();
            fs::File::open(&f).unwrap().set_modified(m.modified().unwrap()).unwrap();
        }),
    ];
    for (what, damage) in cases {
        let s = setup();
        let d = &s.data;
        ok(d, &["checkout", "s1", s.root.join("co").to_str().unwrap(), "--mode", "hardlink"]);
        damage(d);
        // Verify first: it names the damage (or the command fails naming it).
        let (code, out, err) = cairn(d, &["--json", "verify"]);
        // Clean and silent: then the damage destroyed nothing (a log holding no records, say),
        // and every read below must give exactly what was stored.
        let silent = code == 0 && !err.contains("made anew");
        if code == 0 {
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["ok"], true, "{what}: verify exits 0 but reports problems: {out}");
        } else {
            assert!(code == 6, "{what}: verify exit {code}: {err}");
            assert!(!out.is_empty() || err.contains("repair"), "{what}: {err}");
        }
        // Every document reads back as stored, or fails naming damage.
        for (p, text) in &s.files {
            let (code, out, err) = cairn(d, &["cat", p.to_str().unwrap()]);
            assert!(code == 0 || !silent, "{what}: verify was clean and silent, yet cat fails: {err}");
            match code {
                0 => assert_eq!(&out, text, "{what}: {} changed silently", p.display()),
                _ => assert!(code == 6 || code == 3, "{what}: cat exit {code}: {err}"),
            }
        }
        // The table row reads back, or fails naming damage.
        let (code, out, err) = cairn(d, &["table", "get", "people", "1"]);
        assert!(code == 0 || !silent, "{what}: verify was clean and silent, yet table get fails: {err}");
        if code == 0 {
            assert!(out.contains("Ada"), "{what}: {out}");
        } else {
            assert!(code == 6 || code == 3, "{what}: {err}");
        }
        // Repair, then what remains readable is what was stored.
        let (_, _, _) = cairn(d, &["repair"]);
        for (p, text) in &s.files {
            let (code, out, _) = cairn(d, &["cat", p.to_str().unwrap()]);
            if code == 0 {
                assert_eq!(&out, text, "{what}: after repair {} changed", p.display());
            }
        }
    }
}

/// A killed write leaves a pack file its batch never committed. Its number was handed out by
/// the index before the file existed, so it is accounted for: verify stays clean and the next
/// collection deletes it, while a pack nobody handed out is kept (see
/// `packs_beside_an_empty_index_are_refused_not_reused`).
#[test]
fn a_killed_add_leaves_nothing_unaccounted() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..64 {
        let mut b = Vec::with_capacity(1 << 20);
        while b.len() < 1 << 20 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.extend_from_slice(&x.to_le_bytes());
        }
        fs::write(src.join(format!("f{i:02}.bin")), b).unwrap();
    }
    let d = t.path().join("data");
    ok(&d, &["kv", "put", "k", "v"]);
    let mut child = std::process::Command::new(common::bin())
        .args(["--dir", d.to_str().unwrap(), "snapshot", src.to_str().unwrap(), "--name", "s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once its pack file has content, mid-write.
    let packs = d.join("packs");
    for _ in 0..2000 {
        let big = fs::read_dir(&packs)
            .map(|rd| rd.flatten().any(|e| e.metadata().map(|m| m.len() > (4 << 20)).unwrap_or(false)))
            .unwrap_or(false);
        if big || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let _ = child.kill();
    child.wait().unwrap();
    let (code, v) = json(&d, &["verify"]);
    assert_eq!(code, 0, "{v}");
    ok(&d, &["gc"]);
    let (code, v) = json(&d, &["verify"]);
    assert_eq!(code, 0, "{v}");
    // The snapshot, when it was committed, is whole; a new one stores everything.
    ok(&d, &["snapshot", src.to_str().unwrap(), "--name", "s2"]);
    ok(&d, &["checkout", "s2", t.path().join("co").to_str().unwrap()]);
    for i in 0..64 {
        let n = format!("f{i:02}.bin");
        assert!(fs::read(src.join(&n)).unwrap() == fs::read(t.path().join("co").join(&n)).unwrap(), "{n}");
    }
}
