//! `grep`: regular expressions over stored content, line by line, with ripgrep's matcher and
//! searcher (the `grep-regex` and `grep-searcher` crates).

use std::ops::Range;

use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use rayon::prelude::*;

use crate::{DocRecord, Error, Filter, Memory, Result, rows};

/// What to grep for and where.
#[derive(Clone, Debug, Default)]
pub struct GrepOptions {
    /// The regular expression (Rust `regex` syntax), or a literal with `fixed`.
    pub pattern: String,
    /// Match case-insensitively.
    pub ignore_case: bool,
    /// Match whole words only.
    pub word: bool,
    /// The pattern is a literal string.
    pub fixed: bool,
    /// Lines of context before and after each match.
    pub context: usize,
    /// Which documents to search.
    pub filter: Filter,
    /// Stop after this many files with matches.
    pub max_files: Option<usize>,
    /// Read every document in scope instead of the n-gram index's candidates (same output,
    /// slower: for checks and measurements).
    pub scan_all: bool,
}

/// One printed line.
#[derive(Clone, Debug, PartialEq)]
pub struct GrepLine {
    /// Line number, from 1.
    pub number: u64,
    /// The line without its terminator (invalid UTF-8 replaced).
    pub text: String,
    /// A matching line (else a context line).
    pub is_match: bool,
    /// Byte ranges of the matches in `text`.
    pub matches: Vec<Range<usize>>,
}

/// The matches in one document.
#[derive(Clone, Debug, PartialEq)]
pub struct GrepFile {
    /// The document's path.
    pub path: String,
    /// Runs of adjacent lines; runs are separated by `--` in ripgrep's output.
    pub groups: Vec<Vec<GrepLine>>,
    /// Matching lines.
    pub matched_lines: u64,
}

/// Totals of a grep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrepStats {
    /// Text documents the filter allows.
    pub in_scope: u64,
    /// Documents the n-gram index named as candidates (with those it does not cover); `None`
    /// when the pattern has no usable trigram (or the index could not be read) and every
    /// document in scope was read.
    pub candidates: Option<u64>,
    /// Trigram terms in the index query.
    pub grams: usize,
    /// Documents read and searched.
    pub files_searched: u64,
    /// Documents with a match.
    pub files_matched: u64,
    /// Matching lines.
    pub lines_matched: u64,
    /// Bytes searched.
    pub bytes_searched: u64,
    /// Documents that could not be read, with why (the grep went on without them).
    pub errors: Vec<(String, String)>,
    /// What went wrong around the documents (the grep still read every one it had to).
    pub warnings: Vec<String>,
    /// Time taken, in microseconds.
    pub micros: u64,
}

struct Collect<'m> {
    matcher: &'m RegexMatcher,
    groups: Vec<Vec<GrepLine>>,
    matched: u64,
}

impl Collect<'_> {
    fn push(&mut self, number: Option<u64>, bytes: &[u8], is_match: bool) {
        let line = trim_eol(bytes);
        let mut matches = Vec::new();
        if is_match {
            let _ = self.matcher.find_iter(line, |m| {
                matches.push(m.start()..m.end());
                true
            });
        }
        let text = String::from_utf8_lossy(line).into_owned();
        if self.groups.is_empty() {
            self.groups.push(Vec::new());
        }
        if let Some(g) = self.groups.last_mut() {
            g.push(GrepLine { number: number.unwrap_or(0), text, is_match, matches });
        }
    }
}

fn trim_eol(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> std::result::Result<bool, std::io::Error> {
        // A match spans one line in line-oriented search; split defensively anyway.
        let first = m.line_number();
        for (i, line) in m.lines().enumerate() {
            self.push(first.map(|n| n + i as u64), line, true);
            self.matched += 1;
        }
        Ok(true)
    }

    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> std::result::Result<bool, std::io::Error> {
        self.push(c.line_number(), c.bytes(), false);
        Ok(true)
    }

    fn context_break(&mut self, _s: &Searcher) -> std::result::Result<bool, std::io::Error> {
        if self.groups.last().is_some_and(|g| !g.is_empty()) {
            self.groups.push(Vec::new());
        }
        Ok(true)
    }
}

pub(crate) fn matcher(opts: &GrepOptions) -> Result<RegexMatcher> {
    RegexMatcherBuilder::new()
        .case_insensitive(opts.ignore_case)
        .word(opts.word)
        .fixed_strings(opts.fixed)
        .build(&opts.pattern)
        .map_err(|e| Error::Query(e.to_string()))
}

fn grep_one(m: &Memory, matcher: &RegexMatcher, ctx: usize, doc: &DocRecord) -> Result<(GrepFile, u64)> {
    let id = rows::parse_hash(&doc.path, &doc.hash)?;
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(ctx)
        .after_context(ctx)
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let mut sink = Collect { matcher, groups: Vec::new(), matched: 0 };
    let len = if doc.size > crate::MAX_INDEXED {
        // Too large to hold whole: streamed, chunk by chunk, each checked against its hash.
        let r = m.store().reader(&id)?;
        searcher.search_reader(matcher, r, &mut sink).map_err(|e| read_error(&doc.path, e))?;
        doc.size
    } else {
        let content = m.store().get(&id)?;
        searcher.search_slice(matcher, &content, &mut sink).map_err(|e| Error::io(&doc.path, e))?;
        content.len() as u64
    };
    sink.groups.retain(|g| !g.is_empty());
    Ok((GrepFile { path: doc.path.clone(), groups: sink.groups, matched_lines: sink.matched }, len))
}

/// A read error of streamed content, keeping the blob store's error when it is one.
fn read_error(path: &str, e: std::io::Error) -> Error {
    match e.downcast::<cairn_cas::Error>() {
        Ok(inner) => Error::Cas(inner),
        Err(e) => Error::io(path, e),
    }
}

pub(crate) fn run(
    m: &Memory,
    opts: &GrepOptions,
    matcher: &RegexMatcher,
    docs: &[DocRecord],
    mut on_file: impl FnMut(GrepFile) -> Result<()>,
) -> Result<GrepStats> {
    let mut stats = GrepStats::default();
    // Files are searched in parallel a window at a time and reported in path order. A
    // document that cannot be read is reported and the grep goes on.
    for window in docs.chunks(256) {
        let found: Vec<Result<(GrepFile, u64)>> =
            window.par_iter().map(|d| grep_one(m, matcher, opts.context, d)).collect();
        for (doc, result) in window.iter().zip(found) {
            let (file, bytes) = match result {
                Ok(x) => x,
                Err(e) => {
                    stats.errors.push((doc.path.clone(), e.to_string()));
                    continue;
                }
            };
            stats.files_searched += 1;
            stats.bytes_searched += bytes;
            if file.matched_lines == 0 {
                continue;
            }
            stats.files_matched += 1;
            stats.lines_matched += file.matched_lines;
            on_file(file)?;
            if opts.max_files.is_some_and(|n| stats.files_matched as usize >= n) {
                return Ok(stats);
            }
        }
    }
    Ok(stats)
}
