//! The `cairn` binary with its packs in a real MinIO on loopback, configured by the data
//! directory's `cairn.toml`: tree and memory commands with a cold local cache, `verify` and
//! `gc` against the bucket, and MinIO stopped while a snapshot is being taken.

#[path = "../../cairn-cas/tests/support/minio.rs"]
mod minio;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cairn_kv::testing::noise;
use minio::{BUCKET, Minio};

fn command(minio: &Minio, data: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.arg("--dir").arg(data).args(args).envs(minio.credentials_env());
    // Nothing from the caller's environment may redirect the test's packs.
    for k in ["CAIRN_S3_BUCKET", "CAIRN_S3_ENDPOINT", "CAIRN_S3_PREFIX", "CAIRN_PACK_CACHE_MB", "CAIRN_S3_PATH_STYLE"] {
        c.env_remove(k);
    }
    c
}

fn run(minio: &Minio, data: &Path, args: &[&str]) -> Output {
    command(minio, data, args).output().unwrap()
}

fn ok(minio: &Minio, data: &Path, args: &[&str]) -> String {
    let o = run(minio, data, args);
    assert!(o.status.success(), "cairn {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A data directory whose packs (1 MiB each) go to `prefix` in the test bucket.
fn data_dir(root: &Path, minio: &Minio, prefix: &str, extra: &str) -> PathBuf {
    let d = root.join("data");
    fs::create_dir_all(&d).unwrap();
    let toml = format!(
        "token = \"unused-token-0123456789\"\n\n[s3]\nbucket = \"{BUCKET}\"\nendpoint = \"{}\"\nprefix = \"{prefix}\"\ntimeout_secs = 5\n{extra}\n\
         [packs]\ntarget_mb = 1\ncache_mb = 2\n",
        minio.endpoint()
    );
    fs::write(d.join("cairn.toml"), toml).unwrap();
    d
}

/// A source tree of `files` incompressible files of 100 KiB in nested directories, and some
/// small text files.
fn source(root: &Path, files: u64) -> PathBuf {
    let src = root.join("src");
    for i in 0..files {
        let dir = src.join(format!("d{}/e{}", i % 7, i % 3));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("f{i}.bin")), noise(i, 100 << 10)).unwrap();
        fs::write(dir.join(format!("t{i}.txt")), format!("file {i} of the tree\n")).unwrap();
    }
    src
}

/// Every file under `dir`, relative, with its bytes.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(dir).unwrap().to_path_buf(), fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The pack objects under `prefix` in the bucket (MinIO keeps an object as a directory).
fn objects(minio: &Minio, prefix: &str) -> BTreeSet<String> {
    let Ok(rd) = fs::read_dir(minio.data().join(BUCKET).join(prefix.trim_end_matches('/'))) else {
        return BTreeSet::new();
    };
    rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".pack")).collect()
}

/// Bytes of the files under `path` (MinIO keeps an object as a directory of metadata and parts).
fn disk_bytes(path: &Path) -> u64 {
    let m = fs::metadata(path).unwrap();
    if !m.is_dir() {
        return m.len();
    }
    fs::read_dir(path).unwrap().map(|e| disk_bytes(&e.unwrap().path())).sum()
}

/// Removes the local pack copies and the shared checkout copies, so that reads go to MinIO.
fn drop_local_copies(data: &Path) {
    for sub in ["packs", "files"] {
        let _ = fs::remove_dir_all(data.join(sub));
    }
}

#[test]
fn tree_and_memory_commands_work_with_packs_in_minio() {
    let minio = Minio::start();
    let t = tempfile::tempdir().unwrap();
    let data = data_dir(t.path(), &minio, "cli/", "");
    let src = source(t.path(), 40);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    ok(&minio, &data, &["snapshot", &s(&src), "--name", "one"]);
    let packs = objects(&minio, "cli/").len();
    assert!(packs >= 3, "4 MiB of packs of 1 MiB: {packs} objects");
    let local: u64 = fs::read_dir(data.join("packs")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(local <= 3 << 20, "the local cache keeps about 2 MiB, not all packs: {local} bytes");
    let doc = t.path().join("notes.md");
    fs::write(&doc, "# Retention\nKeep the nightly snapshots of the build farm for thirty days.\n").unwrap();
    ok(&minio, &data, &["add", &s(&doc), "--tag", "ops"]);

    // Cold: no local pack and no shared copy.
    drop_local_copies(&data);
    for mode in ["hardlink", "copy"] {
        let out = t.path().join(format!("out-{mode}"));
        ok(&minio, &data, &["checkout", "one", &s(&out), "--mode", mode]);
        assert!(contents(&out) == contents(&src), "checkout --mode {mode} differs from the source");
    }
    drop_local_copies(&data);
    assert!(ok(&minio, &data, &["search", "nightly snapshots"]).contains("notes.md"));
    assert!(ok(&minio, &data, &["cat", &s(&doc)]).contains("thirty days"));
    let verify = ok(&minio, &data, &["verify", "--json"]);
    assert!(verify.contains("\"ok\":true"), "{verify}");

    // A second snapshot shares most content; removing the first and collecting deletes the
    // objects only it used.
    fs::remove_dir_all(src.join("d0")).unwrap();
    fs::write(src.join("new.bin"), noise(999, 300 << 10)).unwrap();
    ok(&minio, &data, &["snapshot", &s(&src), "--name", "two"]);
    let before = objects(&minio, "cli/");
    ok(&minio, &data, &["rm-snapshot", "one"]);
    ok(&minio, &data, &["gc"]);
    let after = objects(&minio, "cli/");
    assert!(
        before.difference(&after).count() > 0,
        "gc deleted collected packs from the bucket: {before:?} -> {after:?}"
    );
    drop_local_copies(&data);
    let out = t.path().join("out-two");
    ok(&minio, &data, &["checkout", "two", &s(&out), "--mode", "copy"]);
    assert!(contents(&out) == contents(&src), "checkout after gc differs from the source");
    let verify = ok(&minio, &data, &["verify", "--json"]);
    assert!(verify.contains("\"ok\":true"), "{verify}");
    assert!(ok(&minio, &data, &["cat", &s(&doc)]).contains("thirty days"));
}

#[test]
fn minio_stopped_during_a_snapshot_loses_nothing() {
    let mut minio = Minio::start();
    let t = tempfile::tempdir().unwrap();
    // One retry: an outage fails the uploads instead of being waited out.
    let data = data_dir(t.path(), &minio, "fault/", "max_retries = 1");
    let src = source(t.path(), 300);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let mut child = command(&minio, &data, &["snapshot", &s(&src), "--name", "one"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Stop MinIO once the first pack has arrived, while the snapshot is still running.
    let t0 = Instant::now();
    while objects(&minio, "fault/").is_empty() && child.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(120), "no pack uploaded");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mid_ingest = child.try_wait().unwrap().is_none();
    minio.stop();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("MinIO stopped mid-ingest: {mid_ingest}; snapshot succeeded: {}; {err}", out.status.success());
    if mid_ingest && !out.status.success() {
        assert!(err.contains("pack-"), "the error names the pack it could not upload: {err}");
    }
    // While MinIO is down, a command that needs no pack still works from the local copies.
    let listed = run(&minio, &data, &["snapshots"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));

    minio.restart();
    // Taken again: what the failed run committed is deduplicated and its local packs uploaded.
    ok(&minio, &data, &["snapshot", &s(&src), "--name", "again"]);
    drop_local_copies(&data);
    let dest = t.path().join("out");
    ok(&minio, &data, &["checkout", "again", &s(&dest), "--mode", "copy"]);
    assert!(contents(&dest) == contents(&src), "checkout differs from the source");
    if out.status.success() {
        // The snapshot finished before MinIO stopped: it is whole.
        let dest = t.path().join("out-one");
        ok(&minio, &data, &["checkout", "one", &s(&dest), "--mode", "copy"]);
        assert!(contents(&dest) == contents(&src), "snapshot one differs from the source");
    }
    let verify = ok(&minio, &data, &["verify", "--json"]);
    assert!(verify.contains("\"ok\":true"), "{verify}");
    // (The 300 files of incompressible 100 KiB are 30 MiB; packs of 1 MiB plus the last group
    // that filled each.)
    let dir = minio.data().join(BUCKET).join("fault");
    let bytes: u64 = objects(&minio, "fault/").iter().map(|n| disk_bytes(&dir.join(n))).sum();
    assert!(bytes >= 300 * (100 << 10), "30 MiB of packs are in the bucket: {bytes} bytes");
}
