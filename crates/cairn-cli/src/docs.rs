//! The document memory commands: `add`, `versions`, `get`, `cat`, `restore`, `ls`, `rm`, `tag`,
//! `untag`, `meta`, `search`, `grep`, `reindex`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::ctx::Ctx;

use anyhow::{Context, Result, bail};
use cairn_docs::{
    AddOptions, AddStatus, DocRecord, Filter, GrepOptions, Memory, NewDoc, QueryMode, SearchOptions, format_time,
    parse_time,
};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

/// Document memory commands (top level: `cairn add`, `cairn search`, ...).
#[derive(Subcommand, Debug)]
pub enum DocsCommand {
    /// Add files, directories (with --recursive) or stdin (`-`) as documents; re-adding a
    /// changed path makes a new version.
    Add {
        /// Files, directories, or `-` for stdin.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Descend into directories (skipping hidden and .gitignore'd files, like ripgrep).
        #[arg(short, long)]
        recursive: bool,
        /// Tag every added document (repeatable).
        #[arg(short, long = "tag", value_name = "TAG")]
        tags: Vec<String>,
        /// Set metadata key=value on every added document (repeatable).
        #[arg(short, long = "meta", value_name = "K=V", value_parser = parse_kv)]
        meta: Vec<(String, String)>,
        /// Document path for stdin content (default `stdin`).
        #[arg(long)]
        name: Option<String>,
        /// Print one JSON line per document.
        #[arg(long)]
        json: bool,
    },
    /// List the versions of a document.
    Versions {
        /// Document path.
        path: String,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Show a document's record (path, versions, tags, metadata, size, type).
    Get {
        /// Document path.
        path: String,
        /// A specific version.
        #[arg(long)]
        version: Option<u32>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a document's content.
    Cat {
        /// Document path.
        path: String,
        /// A specific version (default: current).
        #[arg(long)]
        version: Option<u32>,
    },
    /// Write a document's content (a version of it) back to the filesystem.
    Restore {
        /// Document path.
        path: String,
        /// A specific version (default: current).
        #[arg(long)]
        version: Option<u32>,
        /// Where to write it (default: the document's own path).
        #[arg(long)]
        to: Option<PathBuf>,
    },
    /// List documents.
    Ls {
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Remove documents and all their versions.
    Rm {
        /// Document paths.
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Add tags to documents.
    Tag {
        /// Document paths.
        #[arg(required = true)]
        paths: Vec<String>,
        /// Tags to add (repeatable).
        #[arg(short, long = "tag", value_name = "TAG", required = true)]
        tags: Vec<String>,
    },
    /// Remove tags from documents.
    Untag {
        /// Document paths.
        #[arg(required = true)]
        paths: Vec<String>,
        /// Tags to remove (repeatable).
        #[arg(short, long = "tag", value_name = "TAG", required = true)]
        tags: Vec<String>,
    },
    /// Document metadata.
    #[command(subcommand)]
    Meta(MetaCommand),
    /// Full-text search (BM25): words, "phrases", AND/OR/NOT, +must, -mustnot, field:word.
    Search {
        /// The query.
        query: String,
        /// Hits to show.
        #[arg(short = 'n', long, default_value_t = 10)]
        limit: usize,
        /// Hits to skip.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// Read the query as a bag of words (no syntax).
        #[arg(long)]
        words: bool,
        /// Leave out snippets.
        #[arg(long)]
        no_snippets: bool,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON lines (one per hit).
        #[arg(long)]
        json: bool,
    },
    /// Regex search over stored document content, ripgrep style (`path:line:text`).
    Grep {
        /// The regular expression.
        pattern: String,
        /// Case-insensitive.
        #[arg(short = 'i', long)]
        ignore_case: bool,
        /// Whole words only.
        #[arg(short = 'w', long)]
        word_regexp: bool,
        /// The pattern is a literal string.
        #[arg(short = 'F', long)]
        fixed_strings: bool,
        /// Lines of context around matches.
        #[arg(short = 'C', long, default_value_t = 0)]
        context: usize,
        /// Print only the paths of documents with matches.
        #[arg(short = 'l', long)]
        files_with_matches: bool,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON lines (one per matching line).
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the full-text index from the stored documents.
    Reindex,
}

/// `cairn meta ...`.
#[derive(Subcommand, Debug)]
pub enum MetaCommand {
    /// Set (K=V) or remove (--unset K) metadata on the given documents and/or every document
    /// matching the filter, all in one write.
    Set {
        /// Document paths.
        paths: Vec<String>,
        /// key=value to set (repeatable).
        #[arg(short, long = "set", value_name = "K=V", value_parser = parse_kv)]
        set: Vec<(String, String)>,
        /// Key to remove (repeatable).
        #[arg(long = "unset", value_name = "K")]
        unset: Vec<String>,
        /// Also select documents with this tag (repeatable: all of them).
        #[arg(long = "where-tag", value_name = "TAG")]
        where_tags: Vec<String>,
        /// Also select documents whose path matches this glob.
        #[arg(long = "where-path", value_name = "GLOB")]
        where_path: Option<String>,
    },
    /// Print a document's metadata (one key, or all).
    Get {
        /// Document path.
        path: String,
        /// Key.
        key: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Which documents (`ls`, `search`, `grep`).
#[derive(Args, Debug, Default)]
pub struct FilterArgs {
    /// Documents with this tag (repeatable: all of them).
    #[arg(short, long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Documents with metadata key=value (repeatable: all of them).
    #[arg(long = "meta", value_name = "K=V", value_parser = parse_kv)]
    meta: Vec<(String, String)>,
    /// Documents whose path matches this glob (`*` also crosses `/`).
    #[arg(long, value_name = "GLOB")]
    path_glob: Option<String>,
    /// Updated at or after (YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ or Unix seconds).
    #[arg(long, value_parser = parse_when)]
    since: Option<i64>,
    /// Updated before (same forms as --since).
    #[arg(long, value_parser = parse_when)]
    until: Option<i64>,
}

impl FilterArgs {
    fn filter(self) -> Filter {
        Filter { tags: self.tags, meta: self.meta, path_glob: self.path_glob, since: self.since, until: self.until }
    }
}

fn parse_kv(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not key=value")),
    }
}

fn parse_when(s: &str) -> std::result::Result<i64, String> {
    parse_time(s).map_err(|e| e.to_string())
}

/// The stored path an argument names: itself if a document has it, else its absolute form.
fn resolve(m: &Memory, ctx: &Ctx, arg: &str) -> Result<String> {
    if m.doc_by_path(arg)?.is_some() {
        return Ok(arg.to_string());
    }
    let abs = ctx.abs(Path::new(arg)).to_string_lossy().into_owned();
    if m.doc_by_path(&abs)?.is_some() {
        return Ok(abs);
    }
    bail!("no document {arg}")
}

fn resolve_all(m: &Memory, ctx: &Ctx, args: &[String]) -> Result<Vec<String>> {
    args.iter().map(|a| resolve(m, ctx, a)).collect()
}

/// Runs a document command.
pub fn run(ctx: &mut Ctx, cmd: DocsCommand, out: &mut dyn Write) -> Result<()> {
    let m = ctx.memory()?;
    dispatch(&m, ctx, cmd, out)
}

fn dispatch(m: &Memory, ctx: &mut Ctx, cmd: DocsCommand, out: &mut dyn Write) -> Result<()> {
    match cmd {
        DocsCommand::Add { paths, recursive, tags, meta, name, json } => {
            add(m, ctx, &paths, recursive, AddOptions { tags, meta }, name, json, out)
        }
        DocsCommand::Versions { path, json } => {
            let path = resolve(m, ctx, &path)?;
            for v in m.versions(&path)? {
                if json {
                    writeln!(out, "{}", serde_json::to_string(&v)?)?;
                } else {
                    writeln!(
                        out,
                        "v{}\t{}\t{} B\t{}\t{}",
                        v.version,
                        format_time(v.added),
                        v.size,
                        v.mime,
                        &v.hash[..16]
                    )?;
                }
            }
            Ok(())
        }
        DocsCommand::Get { path, version, json } => {
            let path = resolve(m, ctx, &path)?;
            let doc = m.get(&path)?;
            let v = match version {
                Some(n) => m.versions(&path)?.into_iter().find(|v| v.version == n),
                None => None,
            };
            if let Some(n) = version
                && v.is_none()
            {
                bail!("{path} has no version {n}");
            }
            if json {
                let mut j = serde_json::to_value(&doc)?;
                if let Some(v) = &v {
                    j["selected_version"] = serde_json::to_value(v)?;
                }
                writeln!(out, "{j}")?;
            } else {
                print_doc(&doc, out)?;
                if let Some(v) = v {
                    writeln!(out, "selected: v{} {} B {} added {}", v.version, v.size, v.hash, format_time(v.added))?;
                }
            }
            Ok(())
        }
        DocsCommand::Cat { path, version } => {
            let path = resolve(m, ctx, &path)?;
            let mut r = m.reader(&path, version)?;
            std::io::copy(&mut r, out)?;
            Ok(())
        }
        DocsCommand::Restore { path, version, to } => {
            let path = resolve(m, ctx, &path)?;
            let dest = ctx.abs(&to.unwrap_or_else(|| PathBuf::from(&path)));
            restore(m, &path, version, &dest)?;
            writeln!(
                out,
                "restored {path} v{} to {}",
                version.unwrap_or_else(|| m.get(&path).map(|d| d.version).unwrap_or(0)),
                dest.display()
            )?;
            Ok(())
        }
        DocsCommand::Ls { filter, json } => {
            for d in m.list(&filter.filter())? {
                if json {
                    writeln!(out, "{}", serde_json::to_string(&d)?)?;
                } else {
                    let tags = d.tags.iter().cloned().collect::<Vec<_>>().join(",");
                    writeln!(
                        out,
                        "{}\tv{}\t{}\t{}\t{}\t{}",
                        d.path,
                        d.version,
                        d.size,
                        d.mime,
                        format_time(d.updated),
                        tags
                    )?;
                }
            }
            Ok(())
        }
        DocsCommand::Rm { paths } => {
            let paths = resolve_all(m, ctx, &paths)?;
            m.remove(&paths)?;
            writeln!(out, "removed {} documents", paths.len())?;
            Ok(())
        }
        DocsCommand::Tag { paths, tags } => {
            let paths = resolve_all(m, ctx, &paths)?;
            m.tag(&paths, &tags, &[])?;
            writeln!(out, "tagged {} documents", paths.len())?;
            Ok(())
        }
        DocsCommand::Untag { paths, tags } => {
            let paths = resolve_all(m, ctx, &paths)?;
            m.tag(&paths, &[], &tags)?;
            writeln!(out, "untagged {} documents", paths.len())?;
            Ok(())
        }
        DocsCommand::Meta(MetaCommand::Set { paths, set, unset, where_tags, where_path }) => {
            if set.is_empty() && unset.is_empty() {
                bail!("nothing to do: give --set K=V or --unset K");
            }
            let mut targets = resolve_all(m, ctx, &paths)?;
            if !where_tags.is_empty() || where_path.is_some() {
                let f = Filter { tags: where_tags, path_glob: where_path, ..Default::default() };
                targets.extend(m.list(&f)?.into_iter().map(|d| d.path));
            }
            let changes: Vec<(String, Option<String>)> =
                set.into_iter().map(|(k, v)| (k, Some(v))).chain(unset.into_iter().map(|k| (k, None))).collect();
            let updates: Vec<_> = targets.iter().map(|p| (p.clone(), changes.clone())).collect();
            m.set_meta(&updates)?;
            writeln!(out, "updated metadata of {} documents", updates.len())?;
            Ok(())
        }
        DocsCommand::Meta(MetaCommand::Get { path, key, json }) => {
            let doc = m.get(&resolve(m, ctx, &path)?)?;
            match key {
                Some(k) => match doc.meta.get(&k) {
                    Some(v) if json => writeln!(out, "{}", json!({ k: v }))?,
                    Some(v) => writeln!(out, "{v}")?,
                    None => bail!("{} has no metadata key {k:?}", doc.path),
                },
                None if json => writeln!(out, "{}", serde_json::to_string(&doc.meta)?)?,
                None => {
                    for (k, v) in &doc.meta {
                        writeln!(out, "{k}={v}")?;
                    }
                }
            }
            Ok(())
        }
        DocsCommand::Search { query, limit, offset, words, no_snippets, filter, json } => {
            let opts = SearchOptions {
                limit,
                offset,
                filter: filter.filter(),
                mode: if words { QueryMode::Words } else { QueryMode::Syntax },
                snippets: !no_snippets,
            };
            search(m, ctx, &query, &opts, json, out)
        }
        DocsCommand::Grep {
            pattern,
            ignore_case,
            word_regexp,
            fixed_strings,
            context,
            files_with_matches,
            filter,
            json,
        } => {
            let opts = GrepOptions {
                pattern,
                ignore_case,
                word: word_regexp,
                fixed: fixed_strings,
                context,
                filter: filter.filter(),
                max_files: None,
            };
            grep(m, ctx, &opts, files_with_matches, json, out)
        }
        DocsCommand::Reindex => {
            let t = std::time::Instant::now();
            let n = m.rebuild_index()?;
            writeln!(out, "indexed {n} documents in {:.2}s", t.elapsed().as_secs_f64())?;
            Ok(())
        }
    }
}

fn print_doc(d: &DocRecord, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "path:     {}", d.path)?;
    writeln!(out, "id:       {}", d.id)?;
    writeln!(out, "version:  {}", d.version)?;
    writeln!(out, "size:     {} B", d.size)?;
    writeln!(out, "type:     {}{}", d.mime, if d.indexed { "" } else { " (not indexed)" })?;
    if let Some(t) = &d.title {
        writeln!(out, "title:    {t}")?;
    }
    writeln!(out, "hash:     {}", d.hash)?;
    writeln!(out, "created:  {}", format_time(d.created))?;
    writeln!(out, "updated:  {}", format_time(d.updated))?;
    writeln!(out, "tags:     {}", d.tags.iter().cloned().collect::<Vec<_>>().join(", "))?;
    for (k, v) in &d.meta {
        writeln!(out, "meta:     {k}={v}")?;
    }
    Ok(())
}

fn restore(m: &Memory, path: &str, version: Option<u32>, dest: &Path) -> Result<()> {
    let mut r = m.reader(path, version)?;
    let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".cairn-restore-{}", std::process::id()));
    let res = (|| -> Result<()> {
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        std::io::copy(&mut r, &mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dest).with_context(|| format!("replacing {}", dest.display()))?;
        Ok(())
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Files to add: every argument, directories walked when recursive. What a walk cannot read is
/// reported in `skipped` (and on stderr) rather than stopping the add.
fn collect(ctx: &mut Ctx, paths: &[PathBuf], recursive: bool, skipped: &mut Vec<String>) -> Result<Vec<PathBuf>> {
    let data_abs = ctx.abs(&ctx.data);
    let mut files = Vec::new();
    for arg in paths {
        let p = &ctx.abs(arg);
        let meta = std::fs::metadata(p).with_context(|| format!("{}", arg.display()))?;
        if meta.is_file() {
            files.push(p.clone());
        } else if meta.is_dir() {
            if !recursive {
                bail!("{} is a directory (use --recursive)", arg.display());
            }
            let walk = ignore::WalkBuilder::new(p).build();
            for e in walk {
                let e = match e {
                    Ok(e) => e,
                    Err(err) => {
                        writeln!(ctx.err, "cairn: skipping: {err}")?;
                        skipped.push(err.to_string());
                        continue;
                    }
                };
                if e.file_type().is_some_and(|t| t.is_file()) {
                    let abs = ctx.abs(e.path());
                    if !abs.starts_with(&data_abs) {
                        files.push(abs);
                    }
                }
            }
        }
    }
    Ok(files)
}

#[allow(clippy::too_many_arguments)]
fn add(
    m: &Memory,
    ctx: &mut Ctx,
    paths: &[PathBuf],
    recursive: bool,
    opts: AddOptions,
    name: Option<String>,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let t = std::time::Instant::now();
    let mut results = Vec::new();
    let (stdin, paths): (Vec<&PathBuf>, Vec<&PathBuf>) = paths.iter().partition(|p| p.as_os_str() == "-");
    if !stdin.is_empty() {
        let name = name.unwrap_or_else(|| "stdin".to_string());
        results.push(m.add_reader(&name, &mut ctx.input, &opts)?);
    } else if name.is_some() {
        bail!("--name names stdin content; give `-` as the path");
    }
    let owned: Vec<PathBuf> = paths.into_iter().cloned().collect();
    let mut skipped = Vec::new();
    let files = collect(ctx, &owned, recursive, &mut skipped)?;
    let bar = if ctx.progress { ProgressBar::new(files.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos}/{len} files [{elapsed_precise}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Windows of up to 2,000 files / 64 MiB: read, then one durable write per window.
    let mut window: Vec<NewDoc> = Vec::new();
    let mut window_bytes = 0u64;
    let flush = |window: &mut Vec<NewDoc>, results: &mut Vec<cairn_docs::Added>| -> Result<()> {
        if !window.is_empty() {
            let n = window.len() as u64;
            results.extend(m.add(std::mem::take(window), &opts)?);
            bar.inc(n);
        }
        Ok(())
    };
    for f in &files {
        let path = f.to_string_lossy().into_owned();
        let opened = std::fs::File::open(f).and_then(|h| Ok((h.metadata()?.len(), h)));
        let (size, mut file) = match opened {
            Ok(x) => x,
            Err(e) => {
                bar.suspend(|| writeln!(ctx.err, "cairn: skipping {}: {e}", f.display()))?;
                skipped.push(format!("{}: {e}", f.display()));
                bar.inc(1);
                continue;
            }
        };
        if size > cairn_docs::MAX_INDEXED {
            results.push(m.add_reader(&path, file, &opts)?);
            bar.inc(1);
            continue;
        }
        let mut content = Vec::with_capacity(size as usize);
        if let Err(e) = file.read_to_end(&mut content) {
            bar.suspend(|| writeln!(ctx.err, "cairn: skipping {}: {e}", f.display()))?;
            skipped.push(format!("{}: {e}", f.display()));
            bar.inc(1);
            continue;
        }
        window_bytes += content.len() as u64;
        window.push(NewDoc { path, content });
        if window.len() >= 2000 || window_bytes >= 64 << 20 {
            flush(&mut window, &mut results)?;
            window_bytes = 0;
        }
    }
    flush(&mut window, &mut results)?;
    // Searchable once this returns: the index commit is part of the work timed.
    bar.set_message("indexing");
    m.commit()?;
    bar.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    let count = |s: AddStatus| results.iter().filter(|a| a.status == s).count();
    if json {
        for a in &results {
            let status = match a.status {
                AddStatus::Added => "added",
                AddStatus::NewVersion => "new_version",
                AddStatus::Unchanged => "unchanged",
            };
            writeln!(
                out,
                "{}",
                json!({ "path": a.doc.path, "status": status, "version": a.doc.version, "size": a.doc.size,
                        "mime": a.doc.mime, "indexed": a.doc.indexed, "hash": a.doc.hash })
            )?;
        }
    } else {
        let bytes: u64 = results.iter().map(|a| a.doc.size).sum();
        writeln!(
            out,
            "added {} documents, {} new versions, {} unchanged ({:.1} MiB) in {:.2}s ({:.0} docs/s)",
            count(AddStatus::Added),
            count(AddStatus::NewVersion),
            count(AddStatus::Unchanged),
            bytes as f64 / (1 << 20) as f64,
            secs,
            results.len() as f64 / secs.max(1e-9)
        )?;
    }
    if !skipped.is_empty() {
        // Everything readable is added (and durable); the exit status still says some was not.
        bail!("{} paths could not be read (listed above)", skipped.len());
    }
    Ok(())
}

fn search(m: &Memory, ctx: &mut Ctx, query: &str, opts: &SearchOptions, json: bool, out: &mut dyn Write) -> Result<()> {
    let t = std::time::Instant::now();
    let r = m.search(query, opts)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    for w in &r.warnings {
        writeln!(ctx.err, "cairn: query: {w} (searched leniently)")?;
    }
    let color = !json && ctx.tty;
    for (i, h) in r.hits.iter().enumerate() {
        if json {
            let snippet = h.snippet.as_ref().map(|s| {
                json!({ "text": s.text, "highlights": s.highlights.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>() })
            });
            writeln!(
                out,
                "{}",
                json!({ "rank": opts.offset + i + 1, "score": h.score, "path": h.doc.path, "id": h.doc.id,
                        "version": h.doc.version, "title": h.doc.title, "mime": h.doc.mime,
                        "tags": h.doc.tags, "meta": h.doc.meta, "snippet": snippet })
            )?;
            continue;
        }
        let tags = if h.doc.tags.is_empty() {
            String::new()
        } else {
            format!("  [{}]", h.doc.tags.iter().cloned().collect::<Vec<_>>().join(", "))
        };
        writeln!(
            out,
            "{:>3}. {}  (score {:.2}, v{}){}",
            opts.offset + i + 1,
            h.doc.path,
            h.score,
            h.doc.version,
            tags
        )?;
        if let Some(s) = &h.snippet {
            let text = highlight(&s.text, &s.highlights, color);
            writeln!(out, "     {}", text.split_whitespace().collect::<Vec<_>>().join(" "))?;
        }
    }
    if !json {
        writeln!(out, "{} of {} matching documents in {ms:.1} ms", r.hits.len(), r.total)?;
    }
    Ok(())
}

/// Marks highlighted ranges: bold red on a terminal, `[..]` otherwise.
fn highlight(text: &str, ranges: &[std::ops::Range<usize>], color: bool) -> String {
    let (open, close) = if color { ("\x1b[1;31m", "\x1b[0m") } else { ("[", "]") };
    let mut s = String::with_capacity(text.len() + ranges.len() * 8);
    let mut at = 0;
    for r in ranges {
        if r.start < at || r.end > text.len() || !text.is_char_boundary(r.start) || !text.is_char_boundary(r.end) {
            continue;
        }
        s.push_str(&text[at..r.start]);
        s.push_str(open);
        s.push_str(&text[r.clone()]);
        s.push_str(close);
        at = r.end;
    }
    s.push_str(&text[at..]);
    s
}

fn grep(m: &Memory, ctx: &Ctx, opts: &GrepOptions, files_only: bool, json: bool, out: &mut dyn Write) -> Result<()> {
    let color = !json && ctx.tty;
    let mut first = true;
    let stats = m.grep(opts, |f| {
        let res = (|| -> std::io::Result<()> {
            if files_only {
                return writeln!(out, "{}", f.path);
            }
            for g in &f.groups {
                if opts.context > 0 && !first && !json {
                    writeln!(out, "--")?;
                }
                first = false;
                for l in g {
                    if json {
                        let ms: Vec<[usize; 2]> = l.matches.iter().map(|r| [r.start, r.end]).collect();
                        let kind = if l.is_match { "match" } else { "context" };
                        writeln!(
                            out,
                            "{}",
                            json!({ "type": kind, "path": f.path, "line": l.number, "text": l.text, "matches": ms })
                        )?;
                    } else {
                        let sep = if l.is_match { ':' } else { '-' };
                        let text = if color { highlight(&l.text, &l.matches, true) } else { l.text.clone() };
                        writeln!(out, "{}{sep}{}{sep}{text}", f.path, l.number)?;
                    }
                }
            }
            Ok(())
        })();
        res.map_err(|e| cairn_docs::Error::Io { path: PathBuf::from("<stdout>"), source: e })
    });
    let stats = stats?;
    if stats.files_matched == 0 {
        // Like grep and ripgrep: no match is exit status 1.
        return Err(anyhow::Error::new(NoMatch));
    }
    Ok(())
}

/// No line matched (exit status 1, nothing printed on stderr).
#[derive(Debug)]
pub struct NoMatch;

impl std::fmt::Display for NoMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no match")
    }
}

impl std::error::Error for NoMatch {}
