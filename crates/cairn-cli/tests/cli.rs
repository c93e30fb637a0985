//! End-to-end tests of the `cairn` binary.

mod common;

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
    // Piped, a value's bytes come out unchanged (no newline added).
    assert_eq!(ok(&d, &["kv", "get", "user:1"]), "ada");
    assert_eq!(ok(&d, &["kv", "scan", "--prefix", "user:", "--keys-only"]), "user:1\nuser:2\n");
    assert_eq!(
        ok(&d, &["kv", "scan", "--reverse", "--limit", "1", "--json"]),
        "{\"rows\":[{\"key\":{\"text\":\"user:2\"},\"value\":{\"text\":\"grace\"}}],\"truncated\":true}\n"
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
    assert_eq!(hits.lines().count(), 1, "one JSON document: {hits}");
    let hits: serde_json::Value = serde_json::from_str(&hits).unwrap();
    assert_eq!(hits["total"], 1, "{hits}");
    let hit = &hits["hits"][0];
    assert_eq!(hit["path"], wal);
    assert_eq!(hit["rank"], 1);
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
    // --stats: what the n-gram index named, after the matches; --no-index reads everything.
    let g = ok(&d, &["grep", "--stats", "block cache"]);
    assert!(g.starts_with(&format!("{cache}:2:// block cache\n\n")), "{g}");
    assert!(g.contains(" documents in scope\n1 candidates from the n-gram index"), "{g}");
    assert!(g.contains("\n1 documents read\n") && g.contains("\n1 matched lines\n"), "{g}");
    let g = ok(&d, &["grep", "--stats", "--no-index", "block cache"]);
    assert!(g.contains("no n-gram index used: every document in scope read"), "{g}");
    let j: serde_json::Value = serde_json::from_str(&ok(&d, &["grep", "--json", "block cache"])).unwrap();
    assert_eq!((j["candidates"].as_u64(), j["files_searched"].as_u64()), (Some(1), Some(1)), "{j}");
    assert!(j["in_scope"].as_u64().is_some_and(|n| n > 1) && j["index_terms"].as_u64().is_some_and(|n| n > 3), "{j}");

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

/// The example at the top of issue 72: raw key-value commands once reached every layer's rows;
/// now they work in the user keyspace and cannot touch documents, blobs, trees or tables.
#[test]
fn the_user_keyspace_cannot_reach_other_layers() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("st");
    let a = t.path().join("a.txt");
    fs::write(&a, "hello zebra\n").unwrap();
    let a = a.to_str().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f.txt"), "tree file").unwrap();
    ok(&d, &["add", a]);
    ok(&d, &["snapshot", src.to_str().unwrap(), "--name", "s1"]);
    ok(&d, &["table", "create", "people"]);
    ok(&d, &["table", "put", "people", r#"{"id":1,"name":"Ada"}"#]);
    ok(&d, &["kv", "put", "mine", "x"]);

    // The README's own example, then the whole user range, then a key named like the store's.
    ok(&d, &["kv", "delete-range", "a", "m"]);
    ok(&d, &["kv", "delete-range", "", "\u{7f}"]);
    ok(&d, &["kv", "put", "cas/meta", "x"]);
    ok(&d, &["kv", "put", "docs/d/\u{1}", "y"]);
    assert!(ok(&d, &["search", "zebra"]).contains("1 of 1 matching"));
    assert_eq!(ok(&d, &["cat", a]), "hello zebra\n");
    assert!(ok(&d, &["snapshots"]).starts_with("s1\t"));
    assert!(ok(&d, &["table", "get", "people", "1"]).contains("Ada"));
    let out = t.path().join("out");
    ok(&d, &["checkout", "s1", out.to_str().unwrap()]);
    assert_eq!(fs::read_to_string(out.join("f.txt")).unwrap(), "tree file");
    let v: serde_json::Value = serde_json::from_str(&ok(&d, &["verify", "--json"])).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["chunks"].as_u64().unwrap() >= 2, "every chunk was checked: {v}");
    // New writes still work: the store opened.
    fs::write(t.path().join("b.txt"), "another zebra").unwrap();
    ok(&d, &["add", t.path().join("b.txt").to_str().unwrap()]);
    assert!(ok(&d, &["search", "zebra"]).contains("2 of 2 matching"));

    // Keys print escaped on a terminal-less stdout too; `--json` gives text or base64.
    assert_eq!(ok(&d, &["kv", "scan", "--keys-only"]), "cas/meta\ndocs/d/\\x01\n");
    let scan: serde_json::Value = serde_json::from_str(&ok(&d, &["kv", "scan", "--json"])).unwrap();
    assert_eq!(scan["rows"][1]["key"]["text"], "docs/d/\u{1}");
    // The expert's escape hatch sees the physical rows, the user keys under `user/`.
    let raw = ok(&d, &["kv", "scan", "--raw", "--keys-only", "--limit", "0"]);
    assert!(raw.contains("user/cas/meta\n") && raw.contains("docs/p/"), "{raw}");
}

#[test]
fn kv_get_writes_the_value_unchanged() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let value: Vec<u8> = (0..=255u8).collect();
    let (code, _, err) = common::run_in(None, &d, &["kv", "put", "bin", "-"], Some(&value));
    assert_eq!(code, 0, "{err}");
    let out =
        Command::new(env!("CARGO_BIN_EXE_cairn")).arg("--dir").arg(&d).args(["kv", "get", "bin"]).output().unwrap();
    assert_eq!(out.stdout, value, "piped: the bytes, no newline added");
    let json: serde_json::Value = serde_json::from_str(&ok(&d, &["kv", "get", "bin", "--json"])).unwrap();
    let b64 = json["value"]["base64"].as_str().unwrap();
    assert_eq!(cairn::text::from_base64(b64, "v").unwrap(), value);
}

#[test]
fn unknown_configuration_is_an_error_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    ok(&d, &["kv", "put", "a", "b"]);
    for bad in
        ["[sever]\ntoken = \"0123456789abcdef\"\n", "[s3]\nbuckt = \"b\"\n", "tokn = 1\n", "[server]\nroots = 3\n"]
    {
        fs::write(d.join("cairn.toml"), bad).unwrap();
        let (success, _, err) = cairn(&d, &["kv", "get", "a"]);
        assert!(!success && err.contains("cairn.toml"), "{bad}: {err}");
    }
    fs::write(d.join("cairn.toml"), "[server]\ntoken = \"short\"\n").unwrap();
    let (success, _, err) = cairn(&d, &["kv", "get", "a"]);
    assert!(!success && err.contains("16 bytes"), "{err}");
    fs::remove_file(d.join("cairn.toml")).unwrap();
    assert_eq!(ok(&d, &["kv", "get", "a"]), "b");
}

#[test]
fn read_commands_do_not_create_a_data_directory() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("nothing-here");
    for args in [&["ls"][..], &["search", "x"], &["kv", "scan"], &["verify"], &["snapshots"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_cairn")).arg("--dir").arg(&d).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}: not found");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no cairn data directory"));
        assert!(!d.exists(), "{args:?} created {}", d.display());
    }
}

#[test]
fn names_stay_apart_from_files_and_never_escape() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let notes = t.path().join("notes");
    fs::create_dir_all(&notes).unwrap();
    fs::write(notes.join("plan.md"), "the file's plan").unwrap();
    let run_in = |args: &[&str], stdin: Option<&[u8]>| common::run_in(Some(t.path()), &d, args, stdin);
    run_in(&["add", "notes/plan.md"], None);
    // A name equal to the file's relative path does not win over the file: both exist, and a
    // bare argument naming both is refused as ambiguous.
    let (code, _, err) = run_in(&["add", "-", "--name", "notes/plan.md"], Some(b"the agent's plan"));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run_in(&["cat", "notes/plan.md"], None);
    assert!(code == 4 && err.contains("ambiguous"), "{code:?} {err}");
    assert_eq!(run_in(&["cat", "./notes/plan.md"], None).1, "the file's plan");
    assert_eq!(run_in(&["cat", "name:notes/plan.md"], None).1, "the agent's plan");
    // Names that would escape the working tree are refused.
    for bad in ["../../etc/evil", "/home/u/plan.md", "a/../b", "x\ny"] {
        let (code, _, err) = run_in(&["add", "-", "--name", bad], Some(b"x"));
        assert_eq!(code, 2, "{bad}: {err}");
    }
    // A named document restores under the working directory; a file document to its file.
    fs::remove_file(notes.join("plan.md")).unwrap();
    let (code, _, err) = run_in(&["restore", "name:notes/plan.md", "--to", "restored.md"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fs::read_to_string(t.path().join("restored.md")).unwrap(), "the agent's plan");
    let (code, _, err) = run_in(&["restore", "./notes/plan.md"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fs::read_to_string(notes.join("plan.md")).unwrap(), "the file's plan");
}

/// File names are bytes: two names that differ only in bytes that are not UTF-8 are two
/// documents, and adding them again changes nothing.
#[test]
fn file_names_that_are_not_utf8_stay_distinct() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let e9 = src.join(OsStr::from_bytes(b"caf\xe9.txt"));
    let e8 = src.join(OsStr::from_bytes(b"caf\xe8.txt"));
    fs::write(&e9, "latin-1 e acute").unwrap();
    fs::write(&e8, "latin-1 e grave").unwrap();
    let d = t.path().join("data");
    let out = ok(&d, &["add", "-r", src.to_str().unwrap()]);
    assert!(out.starts_with("added 2 documents, 0 new versions"), "{out}");
    for _ in 0..2 {
        let out = ok(&d, &["add", "-r", src.to_str().unwrap()]);
        assert!(out.contains("0 new versions, 2 unchanged"), "{out}");
    }
    let cat = |p: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_cairn")).arg("--dir").arg(&d).arg("cat").arg(p).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(cat(&e9), "latin-1 e acute");
    assert_eq!(cat(&e8), "latin-1 e grave");
    let ls: serde_json::Value = serde_json::from_str(&ok(&d, &["ls", "--json"])).unwrap();
    let shown: Vec<&str> = ls["docs"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert!(shown.iter().any(|p| p.ends_with("caf\\xe8.txt")) && shown.iter().any(|p| p.ends_with("caf\\xe9.txt")));
    // The shown form names the document too (as HTTP and MCP clients give it).
    let by_text = format!("{}/caf\\xe9.txt", src.display());
    assert_eq!(ok(&d, &["cat", &by_text]), "latin-1 e acute");
    // Restored to the file's own bytes.
    fs::remove_file(&e9).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn")).arg("--dir").arg(&d).arg("restore").arg(&e9).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read_to_string(&e9).unwrap(), "latin-1 e acute");
}

/// Numbers are stored as given: a record's floats come back bit for bit (a JSON parser that
/// rounds the last digit would change what the user stored without a word).
#[test]
fn table_floats_come_back_bit_for_bit() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    ok(&d, &["table", "create", "nums"]);
    // Values with 16-17 significant digits: f32 values widened to f64 (as scores are) and
    // arbitrary f64 bit patterns.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut values = Vec::new();
    for i in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = if i % 2 == 0 {
            f64::from(f32::from_bits(0x3f00_0000 | (x as u32 & 0x007f_ffff)))
        } else {
            f64::from_bits(0x3fe0_0000_0000_0000 | (x & 0x000f_ffff_ffff_ffff))
        };
        values.push(v);
    }
    let record = serde_json::json!({ "id": 1, "v": values });
    ok(&d, &["table", "put", "nums", &record.to_string()]);
    let out: serde_json::Value = serde_json::from_str(&ok(&d, &["--json", "table", "get", "nums", "1"])).unwrap();
    let got = out.pointer("/data/v").expect("the record's array").clone();
    let got: Vec<u64> = got.as_array().unwrap().iter().map(|n| n.as_f64().unwrap().to_bits()).collect();
    let want: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
    let changed = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(changed, 0, "{changed} of {} floats changed", want.len());
}
