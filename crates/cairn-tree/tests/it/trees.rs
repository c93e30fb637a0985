use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use cairn_tree::{Change, CheckoutMode};

use crate::{open, project, write};

fn noop(_: cairn_tree::Progress) {}

/// Compares two directory trees: names, kinds, content, exec bits, symlink targets, mtimes.
fn assert_same(a: &Path, b: &Path) {
    let mut names_a: Vec<_> = fs::read_dir(a).unwrap().map(|e| e.unwrap().file_name()).collect();
    let mut names_b: Vec<_> = fs::read_dir(b).unwrap().map(|e| e.unwrap().file_name()).collect();
    names_a.sort();
    names_b.sort();
    assert_eq!(names_a, names_b, "entries of {}", a.display());
    for n in names_a {
        let (pa, pb) = (a.join(&n), b.join(&n));
        let (ma, mb) = (fs::symlink_metadata(&pa).unwrap(), fs::symlink_metadata(&pb).unwrap());
        assert_eq!(ma.file_type().is_dir(), mb.file_type().is_dir());
        if ma.file_type().is_symlink() {
            assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap());
        } else if ma.is_dir() {
            assert_same(&pa, &pb);
        } else {
            assert_eq!(fs::read(&pa).unwrap(), fs::read(&pb).unwrap(), "{}", pa.display());
            assert_eq!(ma.mode() & 0o111, mb.mode() & 0o111, "exec bits of {}", pa.display());
        }
    }
}

#[test]
fn snapshot_and_checkout_round_trip_in_every_mode() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    project(&src, 1);
    let trees = open(&t.path().join("data"));
    let s = trees.snapshot(&src, Some("one"), &noop).unwrap();
    assert_eq!(s.info.files, 44);
    assert_eq!(s.info.symlinks, 1);
    assert_eq!(s.files_read, 44);
    for mode in [CheckoutMode::Copy, CheckoutMode::Hardlink, CheckoutMode::Reflink] {
        let dest = t.path().join(format!("out-{mode:?}"));
        let c = trees.checkout("one", &dest, mode).unwrap();
        assert_eq!(c.files, 44);
        assert_same(&src, &dest);
        // File mtimes and modes come back in copy mode.
        if mode == CheckoutMode::Copy {
            let (m1, m2) =
                (fs::metadata(src.join("package.json")).unwrap(), fs::metadata(dest.join("package.json")).unwrap());
            assert_eq!(m1.mtime(), m2.mtime());
            assert_eq!(m1.mode() & 0o7777, m2.mode() & 0o7777);
            assert_eq!(fs::metadata(dest.join("empty.txt")).unwrap().mode() & 0o777, 0o600);
        }
    }
    // Hard links: two checkouts share one inode per content, read-only.
    let again = t.path().join("again");
    trees.checkout("one", &again, CheckoutMode::Hardlink).unwrap();
    let (a, b) =
        (fs::metadata(t.path().join("out-Hardlink/big.bin")).unwrap(), fs::metadata(again.join("big.bin")).unwrap());
    assert_eq!(a.ino(), b.ino());
    assert!(a.nlink() >= 3);
    assert!(a.permissions().readonly());
    assert!(fs::metadata(again.join("bin/run.sh")).unwrap().mode() & 0o111 != 0);
    // A non-empty destination is refused.
    assert!(trees.checkout("one", &again, CheckoutMode::Copy).is_err());
    assert!(trees.verify().unwrap().is_ok());
}

#[test]
fn unchanged_resnapshot_reads_nothing_and_changes_cost_only_their_path() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    project(&src, 1);
    let trees = open(&t.path().join("data"));
    let first = trees.snapshot(&src, Some("a"), &noop).unwrap();
    let second = trees.snapshot(&src, Some("b"), &noop).unwrap();
    assert_eq!(second.files_read, 0, "every file came from the inode cache");
    assert_eq!(second.files_cached, 44);
    assert_eq!(second.blobs_stored, 0, "no new blob for an unchanged tree");
    assert_eq!(second.info.root, first.info.root);
    // Change one file deep in node_modules.
    write(&src.join("node_modules/lib3/f3.js"), b"changed", 0o644);
    let third = trees.snapshot(&src, Some("c"), &noop).unwrap();
    assert_eq!(third.files_read, 1);
    // The file, its directory, node_modules and the root: 4 new blobs.
    assert_eq!(third.blobs_stored, 4, "only the changed path is stored");
    assert_ne!(third.info.root, first.info.root);
    assert_eq!(trees.diff("b", "c").unwrap(), vec![Change::Modified("node_modules/lib3/f3.js".into())]);
    assert!(matches!(trees.snapshot(&src, Some("c"), &noop), Err(cairn_tree::Error::SnapshotExists(_))));
}

#[test]
fn second_project_sharing_files_deduplicates() {
    let t = tempfile::tempdir().unwrap();
    let (p1, p2) = (t.path().join("p1"), t.path().join("p2"));
    project(&p1, 1);
    project(&p2, 2); // same node_modules and big file, different package.json
    let trees = open(&t.path().join("data"));
    let a = trees.snapshot(&p1, Some("p1"), &noop).unwrap();
    let b = trees.snapshot(&p2, Some("p2"), &noop).unwrap();
    // File contents are shared; only p2's package.json and its tree objects (directory mtimes
    // differ between the two checkouts) are new.
    assert!(b.bytes_stored * 20 < a.bytes_stored, "{} vs {}", b.bytes_stored, a.bytes_stored);
    let du = trees.du(None).unwrap();
    assert_eq!(du.logical_bytes, a.info.bytes + b.info.bytes);
    assert!(du.dedup_ratio() > 1.5, "ratio {}", du.dedup_ratio());
    assert_eq!(trees.snapshots().unwrap().len(), 2);
}

#[test]
fn diff_reports_added_removed_modified_and_renamed() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    project(&src, 1);
    let trees = open(&t.path().join("data"));
    trees.snapshot(&src, Some("before"), &noop).unwrap();
    fs::rename(src.join("big.bin"), src.join("moved.bin")).unwrap();
    fs::remove_file(src.join("empty.txt")).unwrap();
    write(&src.join("new/file.txt"), b"brand new", 0o644);
    write(&src.join("package.json"), b"{}", 0o644);
    fs::set_permissions(src.join("bin/run.sh"), fs::Permissions::from_mode(0o644)).unwrap();
    trees.snapshot(&src, Some("after"), &noop).unwrap();
    let d = trees.diff("before", "after").unwrap();
    assert_eq!(
        d,
        vec![
            Change::Modified("bin/run.sh".into()),
            Change::Removed("empty.txt".into()),
            Change::Renamed { from: "big.bin".into(), to: "moved.bin".into() },
            Change::Added("new/".into()),
            Change::Added("new/file.txt".into()),
            Change::Modified("package.json".into()),
        ]
    );
    assert!(trees.diff("after", "after").unwrap().is_empty());
}

#[test]
fn removing_snapshots_and_gc_free_space_and_keep_the_rest() {
    let t = tempfile::tempdir().unwrap();
    let (p1, p2) = (t.path().join("p1"), t.path().join("p2"));
    project(&p1, 1);
    write(&p2.join("only-here.bin"), &crate::noise(99, 500_000), 0o644);
    let data = t.path().join("data");
    let trees = open(&data);
    trees.snapshot(&p1, Some("keep"), &noop).unwrap();
    trees.snapshot(&p2, Some("drop"), &noop).unwrap();
    trees.checkout("drop", &t.path().join("co"), CheckoutMode::Hardlink).unwrap();
    let before = trees.store().stats().unwrap();
    trees.remove_snapshot("drop").unwrap();
    let r = trees.gc().unwrap();
    assert!(r.released >= 2, "the file and its tree");
    assert!(r.shared_files_removed >= 1);
    let after = trees.store().stats().unwrap();
    assert!(after.stored_bytes < before.stored_bytes, "{} -> {}", before.stored_bytes, after.stored_bytes);
    let out = t.path().join("out");
    trees.checkout("keep", &out, CheckoutMode::Copy).unwrap();
    assert_same(&p1, &out);
    assert!(trees.verify().unwrap().is_ok());
    assert!(matches!(
        trees.checkout("drop", &t.path().join("x"), CheckoutMode::Copy),
        Err(cairn_tree::Error::NoSuchSnapshot(_))
    ));
    // gc twice is a no-op.
    assert_eq!(trees.gc().unwrap().released, 0);
}
