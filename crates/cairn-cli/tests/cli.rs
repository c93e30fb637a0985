//! End-to-end tests of the `cairn` binary.

use std::fs;
use std::path::Path;
use std::process::Command;

fn cairn(data: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn")).arg("--dir").arg(data).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(data: &Path, args: &[&str]) -> String {
    let (success, out, err) = cairn(data, args);
    assert!(success, "cairn {args:?} failed: {err}");
    out
}

#[test]
fn kv_commands() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    ok(&d, &["kv", "put", "user:1", "ada"]);
    ok(&d, &["kv", "put", "user:2", "grace"]);
    ok(&d, &["kv", "put", "other", "x"]);
    assert_eq!(ok(&d, &["kv", "get", "user:1"]), "ada\n");
    assert_eq!(ok(&d, &["kv", "scan", "--prefix", "user:", "--keys-only"]), "user:1\nuser:2\n");
    assert_eq!(
        ok(&d, &["kv", "scan", "--reverse", "--limit", "1", "--json"]),
        "{\"key\":\"user:2\",\"value\":\"grace\"}\n"
    );
    ok(&d, &["kv", "delete", "user:1"]);
    let (found, _, err) = cairn(&d, &["kv", "get", "user:1"]);
    assert!(!found && err.contains("not found"));
    ok(&d, &["kv", "delete-range", "a", "z"]);
    assert_eq!(ok(&d, &["kv", "scan", "--keys-only"]), "");
    assert!(ok(&d, &["kv", "stats"]).contains("L0"));
    assert!(d.join("kv/CURRENT").exists(), "the engine lives in <dir>/kv");
}

#[test]
fn snapshot_of_a_directory_holding_the_data_directory_leaves_it_out() {
    let t = tempfile::tempdir().unwrap();
    let project = t.path().join("project");
    fs::create_dir_all(&project).unwrap();
    fs::write(project.join("main.rs"), "fn main() {}").unwrap();
    let d = project.join(".cairn");
    let out = ok(&d, &["snapshot", project.to_str().unwrap(), "--name", "p", "--json"]);
    assert!(out.contains("\"files\":1"), "only main.rs: {out}");
    let dest = t.path().join("out");
    ok(&d, &["checkout", "p", dest.to_str().unwrap(), "--mode", "copy"]);
    assert!(!dest.join(".cairn").exists());
}

#[test]
fn tree_commands_end_to_end() {
    let t = tempfile::tempdir().unwrap();
    let (d, src) = (t.path().join("data"), t.path().join("src"));
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a.txt"), "alpha").unwrap();
    fs::write(src.join("sub/b.txt"), "beta").unwrap();
    let before: Vec<_> = fs::read_dir(&src).unwrap().map(|e| e.unwrap().file_name()).collect();
    let s1 = ok(&d, &["snapshot", src.to_str().unwrap(), "--name", "one", "--json"]);
    assert!(s1.contains("\"files\":2"), "{s1}");
    let after: Vec<_> = fs::read_dir(&src).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(before.len(), after.len(), "snapshot writes nothing into the source");
    assert!(d.join("kv").exists() && d.join("packs").exists(), "the data directory is --dir");
    fs::write(src.join("a.txt"), "changed").unwrap();
    fs::write(src.join("c.txt"), "gamma").unwrap();
    ok(&d, &["snapshot", src.to_str().unwrap(), "--name", "two"]);
    let list = ok(&d, &["snapshots"]);
    assert!(list.starts_with("one\t") && list.contains("\ntwo\t"), "{list}");
    assert_eq!(ok(&d, &["diff", "one", "two"]), "M a.txt\n+ c.txt\n");
    for mode in ["hardlink", "reflink", "copy"] {
        let dest = t.path().join(format!("out-{mode}"));
        ok(&d, &["checkout", "two", dest.to_str().unwrap(), "--mode", mode]);
        assert_eq!(fs::read_to_string(dest.join("a.txt")).unwrap(), "changed");
        assert_eq!(fs::read_to_string(dest.join("sub/b.txt")).unwrap(), "beta");
    }
    let du = ok(&d, &["du", "--json"]);
    assert!(du.contains("dedup_ratio"), "{du}");
    assert!(ok(&d, &["verify"]).ends_with("ok\n"));
    ok(&d, &["rm-snapshot", "one"]);
    assert!(ok(&d, &["gc", "--json"]).contains("\"released\""));
    let (found, _, err) = cairn(&d, &["checkout", "one", t.path().join("x").to_str().unwrap()]);
    assert!(!found && err.contains("no snapshot named"), "{err}");
}
