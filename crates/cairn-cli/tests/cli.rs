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

fn run_stdin(data: &Path, args: &[&str], input: &[u8]) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--dir")
        .arg(data)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "cairn {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn document_memory_end_to_end() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("notes");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::create_dir_all(src.join(".hidden")).unwrap();
    fs::write(src.join("wal.md"), "# WAL\nThe write-ahead log uses group commit.\n").unwrap();
    fs::write(src.join("sub/cache.rs"), "fn get_block_handle() {}\n// block cache\n").unwrap();
    fs::write(src.join("sub/blob.bin"), [0u8, 1, 2, 3]).unwrap();
    fs::write(src.join(".hidden/secret.txt"), "group commit secret").unwrap();
    let d = t.path().join("data");
    let s = src.to_str().unwrap();

    // A directory needs --recursive; hidden files are skipped like ripgrep does.
    let (success, _, err) = cairn(&d, &["add", s]);
    assert!(!success && err.contains("--recursive"), "{err}");
    let out = ok(&d, &["add", "-r", s, "--tag", "notes", "--meta", "owner=ann"]);
    assert!(out.starts_with("added 3 documents"), "{out}");
    let out = ok(&d, &["add", "-r", s]);
    assert!(out.contains("3 unchanged"), "{out}");

    // Search: stemming, code tokens, filters, JSON.
    let wal = src.join("wal.md");
    let wal = wal.to_str().unwrap();
    let hits = ok(&d, &["search", "committing", "--json"]);
    assert_eq!(hits.lines().count(), 1, "{hits}");
    let hit: serde_json::Value = serde_json::from_str(hits.lines().next().unwrap()).unwrap();
    assert_eq!(hit["path"], wal);
    assert!(hit["snippet"]["highlights"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(ok(&d, &["search", "handle"]).contains("cache.rs"));
    assert!(ok(&d, &["search", "block", "--path-glob", "*.md"]).contains("0 of 0"));
    assert!(ok(&d, &["search", "block", "--meta", "owner=ann"]).contains("1 of 1"));

    // grep: ripgrep-style lines, exit status 1 when nothing matches.
    let g = ok(&d, &["grep", "-i", "-w", "BLOCK", "-C", "1"]);
    let cache = src.join("sub/cache.rs");
    let cache = cache.to_str().unwrap();
    assert_eq!(g, format!("{cache}-1-fn get_block_handle() {{}}\n{cache}:2:// block cache\n"));
    let (success, out, _) = cairn(&d, &["grep", "nothing-matches-this"]);
    assert!(!success && out.is_empty());

    // Versions, cat, restore.
    fs::write(wal, "# WAL\nRewritten.\n").unwrap();
    assert!(ok(&d, &["add", wal]).contains("1 new versions"));
    let vs = ok(&d, &["versions", wal]);
    assert_eq!(vs.lines().count(), 2, "{vs}");
    assert_eq!(ok(&d, &["cat", wal, "--version", "1"]), "# WAL\nThe write-ahead log uses group commit.\n");
    let back = t.path().join("restored.md");
    ok(&d, &["restore", wal, "--version", "1", "--to", back.to_str().unwrap()]);
    assert_eq!(fs::read_to_string(&back).unwrap(), "# WAL\nThe write-ahead log uses group commit.\n");
    ok(&d, &["restore", wal, "--version", "1"]);
    assert!(fs::read_to_string(wal).unwrap().contains("group commit"));
    assert!(ok(&d, &["search", "rewritten"]).contains("wal.md"), "current version is indexed");

    // Tags and metadata (bulk by filter), listing.
    ok(&d, &["tag", wal, "--tag", "log"]);
    assert_eq!(ok(&d, &["ls", "--tag", "log"]).lines().count(), 1);
    ok(&d, &["untag", wal, "--tag", "log"]);
    assert_eq!(ok(&d, &["ls", "--tag", "log"]), "");
    assert!(ok(&d, &["meta", "set", "--where-tag", "notes", "--set", "stage=draft"]).contains("3 documents"));
    assert_eq!(ok(&d, &["meta", "get", cache, "stage"]), "draft\n");
    assert_eq!(ok(&d, &["ls", "--meta", "stage=draft", "--path-glob", "*.bin"]).lines().count(), 1);
    let (success, _, err) = cairn(&d, &["ls", "--since", "yesterday"]);
    assert!(!success && err.contains("YYYY-MM-DD"), "{err}");

    // stdin, get, rm.
    assert!(
        run_stdin(&d, &["add", "-", "--name", "agent/note-1", "--tag", "agent"], b"remember the milk")
            .contains("added 1")
    );
    assert!(ok(&d, &["get", "agent/note-1"]).contains("tags:     agent"));
    assert!(ok(&d, &["search", "milk"]).contains("agent/note-1"));
    ok(&d, &["rm", "agent/note-1"]);
    assert!(ok(&d, &["search", "milk"]).contains("0 of 0"));
    let (success, _, err) = cairn(&d, &["get", "agent/note-1"]);
    assert!(!success && err.contains("no document"), "{err}");

    // The index can be rebuilt; searches still work.
    assert!(ok(&d, &["reindex"]).contains("indexed 2 documents"));
    assert!(ok(&d, &["search", "handle"]).contains("cache.rs"));
}

#[test]
fn add_skips_unreadable_files_and_says_so() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("ok.txt"), "readable words").unwrap();
    let locked = src.join("locked.txt");
    fs::write(&locked, "secret").unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    let d = t.path().join("data");
    let as_root = fs::read(&locked).is_ok();
    let mut bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cairn"));
    if as_root {
        // Root reads anything: run the tool as `nobody`, in directories it may use, from a
        // copy of the binary it can reach (the build directory may sit under a 0700 parent).
        for p in [t.path(), &src] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o777)).unwrap();
        }
        fs::set_permissions(src.join("ok.txt"), fs::Permissions::from_mode(0o644)).unwrap();
        let copy = t.path().join("cairn");
        fs::copy(&bin, &copy).unwrap();
        fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
        bin = copy;
    }
    let mut cmd = Command::new(&bin);
    cmd.arg("--dir").arg(&d).args(["add", "-r"]).arg(&src);
    if as_root {
        cmd.uid(65534).gid(65534);
    }
    // A test thread forking while the copy was open for writing can briefly hold the file
    // open in its child (ETXTBSY until that child execs); retry.
    let out = (0..50)
        .find_map(|_| match cmd.output() {
            Err(e) if e.raw_os_error() == Some(26) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            }
            r => Some(r.unwrap()),
        })
        .expect("binary stayed busy");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "the exit status reports the unreadable file: {stdout} {stderr}");
    assert!(stdout.contains("added 1 documents"), "{stdout} {stderr}");
    assert!(stderr.contains("locked.txt") && stderr.contains("1 paths could not be read"), "{stderr}");
    // What was readable is stored and searchable (read back as the same user).
    let mut search = Command::new(&bin);
    search.arg("--dir").arg(&d).args(["search", "readable"]);
    if as_root {
        search.uid(65534).gid(65534);
    }
    let found = search.output().unwrap();
    assert!(String::from_utf8_lossy(&found.stdout).contains("ok.txt"));
}
