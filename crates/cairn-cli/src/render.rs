//! Results rendered for people (ripgrep's printer in spirit): one function per result, no
//! logic beyond layout. `--json` bypasses this and prints the result's JSON.

use std::io::Write;

use cairn::docs::format_time;
use cairn::docs::{GrepFile, GrepRequest, SearchResult};
use cairn::text::{Blob, escape};
use cairn::{Error, Request, Response};

use crate::backend::Backend;
use crate::docs::GrepPrint;
use crate::stdout_err;

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// The exit status a successful result still calls for: `verify` that found problems.
pub fn status(r: &Response) -> u8 {
    match r {
        Response::Verify(v) if !v.ok => crate::exit_code(cairn::ErrorKind::Corrupt),
        Response::Repair(r) if !r.ok => crate::exit_code(cairn::ErrorKind::Corrupt),
        Response::Add(a) if !a.skipped.is_empty() => crate::exit_code(cairn::ErrorKind::Internal),
        _ => 0,
    }
}

/// Marks highlighted ranges: bold red on a terminal, `[..]` otherwise.
fn highlight(text: &str, ranges: &[[usize; 2]], color: bool) -> String {
    let (open, close) = if color { ("\x1b[1;31m", "\x1b[0m") } else { ("[", "]") };
    let mut s = String::with_capacity(text.len() + ranges.len() * 8);
    let mut at = 0;
    for &[start, end] in ranges {
        if start < at || end > text.len() || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
            continue;
        }
        s.push_str(&text[at..start]);
        s.push_str(open);
        s.push_str(&text[start..end]);
        s.push_str(close);
        at = end;
    }
    s.push_str(&text[at..]);
    s
}

fn blob_text(b: &Blob) -> String {
    match (&b.text, &b.base64) {
        (Some(t), _) => escape(t.as_bytes()),
        (None, Some(b64)) => cairn::text::from_base64(b64, "value").map(|v| escape(&v)).unwrap_or_default(),
        _ => String::new(),
    }
}

fn blob_bytes(b: &Blob) -> Vec<u8> {
    b.bytes("value").unwrap_or_default()
}

/// Prints a result for people; returns the exit status.
pub fn text(r: &Response, tty: bool, explain: bool, out: &mut dyn Write) -> cairn::Result<u8> {
    let w = |out: &mut dyn Write, s: String| writeln!(out, "{s}").map_err(stdout_err);
    match r {
        Response::Add(a) => {
            for d in &a.docs {
                if let Some(n) = &d.note {
                    eprintln!("cairn: {}: {n}", d.path);
                }
            }
            for s in &a.skipped {
                eprintln!("cairn: skipped {}: {}", s.path, s.error);
            }
            w(
                out,
                format!(
                    "added {} documents, {} new versions, {} unchanged ({:.1} MiB) in {:.2}s ({:.0} docs/s)",
                    a.added,
                    a.new_versions,
                    a.unchanged,
                    mib(a.bytes),
                    a.seconds,
                    a.docs.len() as f64 / a.seconds.max(1e-9)
                ),
            )?;
            if !a.skipped.is_empty() {
                eprintln!(
                    "cairn: {} paths could not be read (listed above); everything else was added",
                    a.skipped.len()
                );
            }
        }
        Response::Versions(v) => {
            for v in &v.versions {
                w(
                    out,
                    format!(
                        "v{}\t{}\t{} B\t{}\t{}",
                        v.version,
                        format_time(v.added),
                        v.size,
                        v.mime,
                        &v.hash[..16.min(v.hash.len())]
                    ),
                )?;
            }
        }
        Response::Get(g) => {
            let d = &g.doc;
            w(out, format!("path:     {}", d.path))?;
            w(out, format!("id:       {}", d.id))?;
            w(out, format!("version:  {}", d.version))?;
            w(out, format!("size:     {} B", d.size))?;
            w(out, format!("type:     {}{}", d.mime, if d.indexed { "" } else { " (not indexed)" }))?;
            if let Some(t) = &d.title {
                w(out, format!("title:    {t}"))?;
            }
            w(out, format!("hash:     {}", d.hash))?;
            w(out, format!("created:  {}", format_time(d.created)))?;
            w(out, format!("updated:  {}", format_time(d.updated)))?;
            w(out, format!("tags:     {}", d.tags.iter().cloned().collect::<Vec<_>>().join(", ")))?;
            for (k, v) in &d.meta {
                w(out, format!("meta:     {k}={v}"))?;
            }
            if let Some(v) = &g.selected_version {
                w(out, format!("selected: v{} {} B {} added {}", v.version, v.size, v.hash, format_time(v.added)))?;
            }
        }
        Response::Content(c) => {
            out.write_all(&blob_bytes(&c.content)).map_err(stdout_err)?;
        }
        Response::Restore(r) => {
            w(out, format!("restored {} v{} to {} ({} B)", r.path, r.version, r.to.display(), r.bytes))?
        }
        Response::Ls(l) => {
            for d in &l.docs {
                let tags = d.tags.iter().cloned().collect::<Vec<_>>().join(",");
                w(
                    out,
                    format!("{}\tv{}\t{}\t{}\t{}\t{}", d.path, d.version, d.size, d.mime, format_time(d.updated), tags),
                )?;
            }
            if l.truncated {
                eprintln!("cairn: showing {} of {} documents", l.docs.len(), l.total);
            }
        }
        Response::Rm(r) => w(out, format!("removed {} documents", r.removed.len()))?,
        Response::Tag(t) => w(out, format!("updated the tags of {} documents", t.updated.len()))?,
        Response::MetaSet(t) => w(out, format!("updated metadata of {} documents", t.updated.len()))?,
        Response::MetaGet(m) => match &m.value {
            // One key asked for: its value alone (a script's `$(cairn meta get DOC KEY)`).
            Some(v) => w(out, v.clone())?,
            None => {
                for (k, v) in &m.meta {
                    w(out, format!("{k}={v}"))?;
                }
            }
        },
        Response::Search(s) => search(s, tty, out)?,
        Response::Grep(g) => {
            let mut first = true;
            for f in &g.files {
                grep_file(f, &mut first, 0, false, tty, out)?;
            }
        }
        Response::Reindex(r) => {
            w(out, format!("indexed {} documents in {:.2}s", r.indexed, r.seconds))?;
            if r.embeddings_queued > 0 {
                w(out, format!("queued {} documents to be embedded again", r.embeddings_queued))?;
            }
        }
        Response::ModelInstall(r) => {
            w(
                out,
                format!(
                    "installed {} ({} dimensions, sha256 {}) in models/{}",
                    r.model.name, r.model.dimension, r.model.sha256, r.model.dir
                ),
            )?;
            if !r.active {
                w(out, "another model is in use in this process; the next open uses this one".to_string())?;
            }
        }
        Response::ModelStatus(s) => match &s.model {
            None => w(out, "no embedding model installed: search is keyword (BM25) only".to_string())?,
            Some(m) => {
                w(out, format!("model    {} ({} dimensions, sha256 {})", m.name, m.dimension, m.sha256))?;
                w(out, format!("path     models/{}", m.dir))?;
                w(out, format!("embedded {} documents, {} passages; {} queued", s.documents, s.passages, s.queued))?;
                w(out, format!("search   {} by default", s.search_mode))?;
                if let Some(e) = &s.error {
                    w(out, format!("error    {e}"))?;
                }
            }
        },
        Response::Snapshot(s) => {
            let i = &s.snapshot;
            w(
                out,
                format!(
                    "snapshot {} of {}: {} files, {} dirs, {} symlinks, {:.1} MiB in {:.2}s ({:.0} files/s)",
                    i.name,
                    i.source,
                    i.files,
                    i.dirs,
                    i.symlinks,
                    mib(i.bytes),
                    s.seconds,
                    i.files as f64 / s.seconds.max(1e-9)
                ),
            )?;
            w(
                out,
                format!(
                    "read {} files, {} unchanged (skipped); stored {} new blobs, {:.1} MiB written; root {}",
                    s.files_read,
                    s.files_cached,
                    s.blobs_stored,
                    mib(s.bytes_stored),
                    &i.root[..16.min(i.root.len())]
                ),
            )?;
            if s.special_skipped > 0 {
                w(out, format!("skipped {} sockets, FIFOs or devices", s.special_skipped))?;
            }
        }
        Response::Checkout(c) => w(
            out,
            format!(
                "checked out into {}: {} files ({} hard-linked, {} reflinked, {} copied), {} dirs, {} symlinks, {:.1} MiB in {:.2}s",
                c.dest.display(),
                c.files,
                c.linked,
                c.reflinked,
                c.copied,
                c.dirs,
                c.symlinks,
                mib(c.bytes),
                c.seconds
            ),
        )?,
        Response::Diff(d) => {
            for c in &d.changes {
                let line = match (c.change.as_str(), &c.from) {
                    ("added", _) => format!("+ {}", c.path),
                    ("removed", _) => format!("- {}", c.path),
                    ("renamed", Some(f)) => format!("R {f} -> {}", c.path),
                    _ => format!("M {}", c.path),
                };
                w(out, line)?;
            }
        }
        Response::Snapshots(s) => {
            for s in &s.snapshots {
                w(
                    out,
                    format!(
                        "{}\t{} files\t{:.1} MiB\t{}\t{}",
                        s.name,
                        s.files,
                        mib(s.bytes),
                        &s.root[..16.min(s.root.len())],
                        s.source
                    ),
                )?;
            }
        }
        Response::RmSnapshot(r) => {
            for s in &r.removed {
                w(out, format!("removed snapshot {} (run `cairn gc` to free its space)", s.name))?;
            }
        }
        Response::Gc(g) => w(
            out,
            format!(
                "released {} unreachable blobs ({} reachable); packs {:.1} MiB -> {:.1} MiB",
                g.released,
                g.reachable,
                mib(g.bytes_before),
                mib(g.bytes_after)
            ),
        )?,
        Response::Du(d) => {
            w(out, format!("logical size:  {:>10.1} MiB (sum of file sizes)", mib(d.logical_bytes)))?;
            w(
                out,
                format!("unique data:   {:>10.1} MiB ({} chunks of {} blobs)", mib(d.unique_bytes), d.chunks, d.blobs),
            )?;
            w(out, format!("stored size:   {:>10.1} MiB (compressed, in packs)", mib(d.stored_bytes)))?;
            w(out, format!("dedup ratio:   {:>10.2}x", d.dedup_ratio))?;
        }
        Response::Verify(v) => {
            w(
                out,
                format!(
                    "checked {} engine entries, {} chunks ({:.1} MiB reread and rehashed), {} blobs, {} documents ({} versions), {} snapshots ({} trees), {} tables ({} records)",
                    v.engine_entries,
                    v.chunks,
                    mib(v.bytes),
                    v.blobs,
                    v.documents,
                    v.versions,
                    v.snapshots,
                    v.trees,
                    v.tables,
                    v.records
                ),
            )?;
            for p in &v.problems {
                w(out, format!("PROBLEM [{}] {}", p.layer, p.problem))?;
                for a in &p.affects {
                    w(out, format!("  affects {a}"))?;
                }
                if let Some(r) = &p.repair {
                    w(out, format!("  repair: {r}"))?;
                }
            }
            w(out, if v.ok { "ok".into() } else { format!("{} problems found", v.problems.len()) })?;
        }
        Response::Repair(r) => {
            for a in &r.actions {
                w(out, a.clone())?;
            }
            for p in &r.lost {
                w(out, format!("LOST [{}] {}", p.layer, p.problem))?;
                for a in &p.affects {
                    w(out, format!("  affects {a}"))?;
                }
            }
            for p in &r.remaining {
                w(out, format!("STILL [{}] {}", p.layer, p.problem))?;
                for a in &p.affects {
                    w(out, format!("  affects {a}"))?;
                }
            }
            w(
                out,
                match (r.ok, r.lost.is_empty()) {
                    (true, true) => "ok: nothing is wrong now".into(),
                    (true, false) => {
                        format!("ok now, but {} pieces of data could not be recovered (above)", r.lost.len())
                    }
                    (false, _) => format!("{} problems remain", r.remaining.len()),
                },
            )?;
        }
        Response::TableCreate(d) => w(out, format!("created table {} (primary key {})", d.name, d.pk))?,
        Response::TableLs(t) => {
            for d in &t.tables {
                let ix: Vec<String> = d
                    .indexes
                    .iter()
                    .map(|i| {
                        format!("{}({} {:?}{})", i.name, i.attr, i.kind, if i.ready { "" } else { ", building" })
                            .to_lowercase()
                    })
                    .collect();
                w(out, format!("{}\tpk={}\t{}", d.name, d.pk, ix.join(" ")))?;
            }
        }
        Response::TableDrop(d) | Response::IndexDrop(d) => w(out, format!("dropped {}", d.dropped))?,
        Response::TablePut(p) => match p.versions.as_slice() {
            [v] => w(out, format!("version {v}"))?,
            vs => w(out, format!("{} records written", vs.len()))?,
        },
        Response::TableGet(r) => w(out, r.data.to_string())?,
        Response::TablePatch(r) => w(out, format!("version {}", r.version))?,
        Response::TableRm(_) => {}
        Response::TableQuery(q) => {
            for rec in &q.records {
                w(out, rec.to_string())?;
            }
            if explain {
                eprintln!("plan: {}; examined {}; returned {}", q.plan, q.examined, q.records.len());
            }
        }
        Response::TableVerify(t) => {
            w(out, format!("table {}: {} records, every index consistent", t.table, t.records))?
        }
        Response::TableBatch(b) => {
            for r in &b.results {
                w(out, r.to_string())?;
            }
        }
        Response::IndexCreate(i) => {
            w(out, format!("index {} on {} is {}", i.name, i.attr, if i.ready { "ready" } else { "building" }))?
        }
        Response::IndexLs(l) => {
            for i in &l.indexes {
                let state = if i.ready { "ready" } else { "building" };
                w(out, format!("{}\t{}\t{}\t{state}", i.name, i.attr, format!("{:?}", i.kind).to_lowercase()))?;
            }
        }
        Response::KvPut(_) | Response::KvDelete(_) | Response::KvDeleteRange(_) | Response::KvCompact(_) => {}
        Response::KvGet(row) => {
            let v = row.value.as_ref().map(blob_bytes).unwrap_or_default();
            if tty {
                // On a terminal: readable, one line.
                w(out, escape(&v))?;
            } else {
                // Piped: the value's bytes, unchanged.
                out.write_all(&v).map_err(stdout_err)?;
            }
        }
        Response::KvScan(s) => {
            for r in &s.rows {
                match &r.value {
                    Some(v) => w(out, format!("{}\t{}", blob_text(&r.key), blob_text(v)))?,
                    None => w(out, blob_text(&r.key))?,
                }
            }
            if s.truncated {
                eprintln!("cairn: stopped at the limit ({} keys; --limit 0 for all)", s.rows.len());
            }
        }
        Response::KvLoad(l) => {
            let rate = |n: u64, secs: f64| n as f64 / secs.max(1e-9);
            w(
                out,
                format!(
                    "loaded {} records ({:.1} MiB) from {} in {:.2}s ({:.0} records/s)",
                    l.records,
                    mib(l.bytes),
                    l.file.display(),
                    l.load_secs,
                    rate(l.records, l.load_secs)
                ),
            )?;
            w(
                out,
                format!(
                    "read back all {} records by key in {:.2}s ({:.0} gets/s)",
                    l.records,
                    l.get_secs,
                    rate(l.records, l.get_secs)
                ),
            )?;
            w(
                out,
                format!(
                    "scanned {} keys in {:.2}s ({:.0} keys/s)",
                    l.scanned,
                    l.scan_secs,
                    rate(l.scanned, l.scan_secs)
                ),
            )?;
        }
        Response::KvStats(s) => {
            w(out, "level  tables  bytes".into())?;
            for (i, l) in s.levels.iter().enumerate() {
                w(out, format!("L{i:<5} {:>6}  {}", l.tables, l.bytes))?;
            }
            w(out, format!("memtable: {} bytes, {} frozen", s.memtable_bytes, s.immutable_memtables))?;
            w(out, format!("last sequence: {}", s.last_seq))?;
            w(out, format!("range tombstones: {}", s.range_tombstones))?;
            w(out, format!("block cache: {} bytes", s.block_cache_bytes))?;
        }
        Response::KvVerify(v) => w(out, format!("verified {} table entries: every block checksum matches", v.entries))?,
    }
    Ok(status(r))
}

fn search(r: &SearchResult, tty: bool, out: &mut dyn Write) -> cairn::Result<()> {
    for w in &r.warnings {
        eprintln!("cairn: query: {w} (searched leniently)");
    }
    for h in &r.hits {
        let tags = if h.tags.is_empty() { String::new() } else { format!("  [{}]", h.tags.join(", ")) };
        let scores = match (h.bm25, h.vector) {
            (Some(b), Some(v)) if r.mode != cairn::docs::SearchMode::Keyword => {
                format!("score {:.3}: bm25 {b:.2}, vector {v:.3}", h.score)
            }
            (None, Some(v)) if r.mode == cairn::docs::SearchMode::Hybrid => {
                format!("score {:.3}: vector {v:.3}", h.score)
            }
            (Some(b), None) if r.mode == cairn::docs::SearchMode::Hybrid => {
                format!("score {:.3}: bm25 {b:.2}", h.score)
            }
            _ => format!("score {:.2}", h.score),
        };
        writeln!(out, "{:>3}. {}  ({scores}, v{}){}", h.rank, h.path, h.version, tags).map_err(stdout_err)?;
        if let Some(s) = &h.snippet {
            let text = highlight(&s.text, &s.highlights, tty);
            writeln!(out, "     {}", text.split_whitespace().collect::<Vec<_>>().join(" ")).map_err(stdout_err)?;
        }
    }
    writeln!(out, "{} of {} matching documents in {:.1} ms", r.hits.len(), r.total, r.took_ms).map_err(stdout_err)
}

/// Prints one document's grep lines ripgrep style: `path:line:text` for matches,
/// `path-line-text` for context, `--` between groups when there is context.
fn grep_file(
    f: &GrepFile,
    first: &mut bool,
    context: usize,
    files_only: bool,
    color: bool,
    out: &mut dyn Write,
) -> cairn::Result<()> {
    if files_only {
        return writeln!(out, "{}", f.path).map_err(stdout_err);
    }
    let mut last: Option<u64> = None;
    for l in &f.lines {
        let new_group = last.is_none_or(|n| l.line != n + 1);
        if context > 0 && new_group && !*first {
            writeln!(out, "--").map_err(stdout_err)?;
        }
        *first = false;
        last = Some(l.line);
        let sep = if l.is_match { ':' } else { '-' };
        let text = if color { highlight(&l.text, &l.ranges, true) } else { l.text.clone() };
        writeln!(out, "{}{sep}{}{sep}{text}", f.path, l.line).map_err(stdout_err)?;
    }
    Ok(())
}

/// Prints a grep's totals (after its matches, as ripgrep's `--stats`).
fn grep_stats(r: &cairn::docs::GrepResult, out: &mut dyn Write) -> cairn::Result<()> {
    let candidates = match r.candidates {
        Some(n) => format!("{n} candidates from the n-gram index ({} trigram terms)", r.index_terms),
        None => "no n-gram index used: every document in scope read".to_string(),
    };
    let text = format!(
        "\n{} documents in scope\n{candidates}\n{} documents read\n{} bytes searched\n{} matched lines\n\
         {} documents contained matches\n{:.3} seconds\n",
        r.in_scope,
        r.files_searched,
        r.bytes_searched,
        r.lines_matched,
        r.files_matched,
        r.took_ms / 1e3
    );
    write!(out, "{text}").map_err(stdout_err)
}

/// Runs a grep, printing as documents are searched when embedded (in path order), and
/// returns the exit status (1: nothing matched, as grep and ripgrep).
pub fn grep(
    backend: &mut Backend,
    req: GrepRequest,
    print: GrepPrint,
    json: bool,
    tty: bool,
    out: &mut dyn Write,
) -> cairn::Result<u8> {
    let context = req.context;
    let color = tty && !json;
    let mut first = true;
    let result = match backend {
        Backend::Local(c) if !json => {
            c.grep_each(&req, |f| grep_file(&f, &mut first, context, print.files_only, color, out))?
        }
        _ => {
            let r = backend.execute(Request::Grep(req), None, None)?;
            let Response::Grep(g) = r else { return Err(Error::internal("unexpected answer to grep")) };
            if json {
                let text = serde_json::to_string(&Response::Grep(g.clone()).to_json())
                    .map_err(|e| Error::internal(e.to_string()))?;
                writeln!(out, "{text}").map_err(stdout_err)?;
            } else {
                for f in &g.files {
                    grep_file(f, &mut first, context, print.files_only, color, out)?;
                }
            }
            g
        }
    };
    for e in &result.errors {
        eprintln!("cairn: grep: {}: {}", e.path, e.error);
    }
    for w in &result.warnings {
        eprintln!("cairn: grep: warning: {w}");
    }
    if print.stats && !json {
        grep_stats(&result, out)?;
    }
    Ok(if result.files_matched == 0 {
        if result.errors.is_empty() { 1 } else { 2 }
    } else if result.errors.is_empty() {
        0
    } else {
        2
    })
}
