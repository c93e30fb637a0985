//! `cairn snapshot | checkout | diff | snapshots | rm-snapshot | gc | verify | du`: directory
//! snapshots over the blob store.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, bail};
use cairn_tree::{Change, CheckoutMode};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::ctx::Ctx;

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// `cairn snapshot DIR [--name N]`.
pub fn snapshot(ctx: &mut Ctx, src: &Path, name: Option<&str>, json: bool, out: &mut dyn Write) -> Result<()> {
    let trees = ctx.trees()?;
    let src = &ctx.abs(src);
    let bar = if ctx.progress { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos}/{len} files {msg} [{elapsed_precise}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = |p: cairn_tree::Progress| {
        bar.set_length(p.files_total);
        bar.set_position(p.files_done);
        bar.set_message(format!("{:.1} MiB", mib(p.bytes_done)));
    };
    // Never snapshot the data directory itself (the default ./.cairn sits inside projects).
    let s = trees.snapshot_excluding(src, name, &[ctx.abs(&ctx.data)], &progress)?;
    bar.finish_and_clear();
    let rate = s.info.files as f64 / s.seconds.max(1e-9);
    if json {
        writeln!(
            out,
            "{}",
            json!({
                "name": s.info.name, "root": s.info.root.to_hex(), "files": s.info.files, "dirs": s.info.dirs,
                "symlinks": s.info.symlinks, "bytes": s.info.bytes, "files_read": s.files_read,
                "files_cached": s.files_cached, "blobs_stored": s.blobs_stored, "bytes_stored": s.bytes_stored,
                "special_skipped": s.special_skipped, "seconds": s.seconds,
            })
        )?;
    } else {
        writeln!(
            out,
            "snapshot {} of {}: {} files, {} dirs, {} symlinks, {:.1} MiB in {:.2}s ({:.0} files/s)",
            s.info.name,
            s.info.source,
            s.info.files,
            s.info.dirs,
            s.info.symlinks,
            mib(s.info.bytes),
            s.seconds,
            rate
        )?;
        writeln!(
            out,
            "read {} files, {} unchanged (skipped); stored {} new blobs, {:.1} MiB written; root {}",
            s.files_read,
            s.files_cached,
            s.blobs_stored,
            mib(s.bytes_stored),
            s.info.root.short()
        )?;
        if s.special_skipped > 0 {
            writeln!(out, "skipped {} sockets, FIFOs or devices", s.special_skipped)?;
        }
    }
    Ok(())
}

/// `cairn checkout SNAPSHOT DEST [--mode]`.
pub fn checkout(
    ctx: &mut Ctx,
    name: &str,
    dest: &Path,
    mode: CheckoutMode,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let trees = ctx.trees()?;
    let dest = &ctx.abs(dest);
    let t = std::time::Instant::now();
    let c = trees.checkout(name, dest, mode)?;
    let secs = t.elapsed().as_secs_f64();
    if json {
        writeln!(
            out,
            "{}",
            json!({ "files": c.files, "dirs": c.dirs, "symlinks": c.symlinks, "bytes": c.bytes,
                    "linked": c.linked, "reflinked": c.reflinked, "copied": c.copied, "seconds": secs })
        )?;
    } else {
        writeln!(
            out,
            "checked out {name} into {}: {} files ({} hard-linked, {} reflinked, {} copied), {} dirs, {} symlinks, {:.1} MiB in {:.2}s",
            dest.display(),
            c.files,
            c.linked,
            c.reflinked,
            c.copied,
            c.dirs,
            c.symlinks,
            mib(c.bytes),
            secs
        )?;
    }
    Ok(())
}

/// `cairn diff A B`.
pub fn diff(ctx: &mut Ctx, a: &str, b: &str, json: bool, out: &mut dyn Write) -> Result<()> {
    let trees = ctx.trees()?;
    for c in trees.diff(a, b)? {
        if json {
            let v = match &c {
                Change::Added(p) => json!({ "change": "added", "path": p }),
                Change::Removed(p) => json!({ "change": "removed", "path": p }),
                Change::Modified(p) => json!({ "change": "modified", "path": p }),
                Change::Renamed { from, to } => json!({ "change": "renamed", "from": from, "path": to }),
            };
            writeln!(out, "{v}")?;
        } else {
            match &c {
                Change::Added(p) => writeln!(out, "+ {p}")?,
                Change::Removed(p) => writeln!(out, "- {p}")?,
                Change::Modified(p) => writeln!(out, "M {p}")?,
                Change::Renamed { from, to } => writeln!(out, "R {from} -> {to}")?,
            }
        }
    }
    Ok(())
}

/// `cairn snapshots`.
pub fn list(ctx: &mut Ctx, json: bool, out: &mut dyn Write) -> Result<()> {
    let trees = ctx.trees()?;
    for s in trees.snapshots()? {
        if json {
            writeln!(
                out,
                "{}",
                json!({ "name": s.name, "root": s.root.to_hex(), "created_ns": s.created_ns, "files": s.files,
                        "dirs": s.dirs, "symlinks": s.symlinks, "bytes": s.bytes, "source": s.source })
            )?;
        } else {
            writeln!(out, "{}\t{} files\t{:.1} MiB\t{}\t{}", s.name, s.files, mib(s.bytes), s.root.short(), s.source)?;
        }
    }
    Ok(())
}

/// `cairn rm-snapshot NAME...`.
pub fn remove(ctx: &mut Ctx, names: &[String], out: &mut dyn Write) -> Result<()> {
    let trees = ctx.trees()?;
    for n in names {
        trees.remove_snapshot(n)?;
        writeln!(out, "removed snapshot {n} (run `cairn gc` to free its space)")?;
    }
    Ok(())
}

/// `cairn gc`.
pub fn gc(ctx: &mut Ctx, json: bool, out: &mut dyn Write) -> Result<()> {
    let trees = ctx.trees()?;
    let r = trees.gc()?;
    if json {
        writeln!(
            out,
            "{}",
            json!({ "reachable": r.reachable, "released": r.released, "cache_rows_removed": r.cache_rows_removed,
                    "shared_files_removed": r.shared_files_removed, "bytes_before": r.bytes_before, "bytes_after": r.bytes_after })
        )?;
    } else {
        writeln!(
            out,
            "released {} unreachable blobs ({} reachable); packs {:.1} MiB -> {:.1} MiB",
            r.released,
            r.reachable,
            mib(r.bytes_before),
            mib(r.bytes_after)
        )?;
    }
    Ok(())
}

/// `cairn verify`.
pub fn verify(ctx: &mut Ctx, json: bool, out: &mut dyn Write) -> Result<()> {
    let trees = ctx.trees()?;
    let r = trees.verify()?;
    if json {
        let damaged: Vec<_> = r
            .store
            .damaged
            .iter()
            .map(|d| {
                json!({ "chunk": d.chunk.to_hex(), "pack": d.pack, "offset": d.offset, "problem": d.problem,
                             "blobs": d.blobs.iter().map(|b| b.to_hex()).collect::<Vec<_>>() })
            })
            .collect();
        writeln!(
            out,
            "{}",
            json!({ "ok": r.is_ok(), "chunks": r.store.chunks, "bytes": r.store.bytes, "blobs": r.store.blobs,
                    "snapshots": r.snapshots, "trees": r.trees, "damaged": damaged,
                    "dangling": r.store.dangling.len(), "refcount_errors": r.store.refcount_errors.len(),
                    "problems": r.problems.iter().map(|(s, p)| json!({"snapshot": s, "problem": p})).collect::<Vec<_>>() })
        )?;
    } else {
        writeln!(
            out,
            "checked {} chunks ({:.1} MiB reread and rehashed), {} blobs, {} snapshots, {} trees",
            r.store.chunks,
            mib(r.store.bytes),
            r.store.blobs,
            r.snapshots,
            r.trees
        )?;
        for d in &r.store.damaged {
            writeln!(
                out,
                "DAMAGED chunk {} in pack {} at offset {}: {} (blobs: {})",
                d.chunk,
                d.pack,
                d.offset,
                d.problem,
                d.blobs.iter().map(|b| b.short()).collect::<Vec<_>>().join(", ")
            )?;
        }
        for (b, c) in &r.store.dangling {
            writeln!(out, "DANGLING blob {} refers to missing chunk {}", b, c)?;
        }
        for (c, idx, counted) in &r.store.refcount_errors {
            writeln!(out, "REFCOUNT chunk {c}: index says {idx}, blobs hold {counted}")?;
        }
        for (s, p) in &r.problems {
            writeln!(out, "SNAPSHOT {s}: {p}")?;
        }
    }
    if !r.is_ok() {
        bail!("verification found damage");
    }
    if !json {
        writeln!(out, "ok")?;
    }
    Ok(())
}

/// `cairn du [SNAPSHOT]`.
pub fn du(ctx: &mut Ctx, name: Option<&str>, json: bool, out: &mut dyn Write) -> Result<()> {
    let trees = ctx.trees()?;
    let d = trees.du(name)?;
    let u = d.usage;
    if json {
        writeln!(
            out,
            "{}",
            json!({ "logical_bytes": d.logical_bytes, "unique_bytes": u.chunk_bytes, "stored_bytes": u.stored_bytes,
                    "blobs": u.blobs, "chunks": u.chunks, "dedup_ratio": d.dedup_ratio() })
        )?;
    } else {
        writeln!(out, "logical size:  {:>10.1} MiB (sum of file sizes)", mib(d.logical_bytes))?;
        writeln!(out, "unique data:   {:>10.1} MiB ({} chunks of {} blobs)", mib(u.chunk_bytes), u.chunks, u.blobs)?;
        writeln!(out, "stored size:   {:>10.1} MiB (compressed, in packs)", mib(u.stored_bytes))?;
        writeln!(out, "dedup ratio:   {:>10.2}x", d.dedup_ratio())?;
    }
    Ok(())
}

/// Parses `--mode`.
pub fn parse_mode(s: &str) -> Result<CheckoutMode, String> {
    s.parse()
}
