//! The document memory commands: `add`, `versions`, `get`, `cat`, `restore`, `ls`, `rm`, `tag`,
//! `untag`, `meta`, `search`, `grep`, `reindex`: arguments into application-layer requests.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use cairn::Request;
use cairn::docs::{self, Filter};
use clap::{Args, Subcommand};

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
        /// The name of the document read from stdin (default `stdin`): relative, without `.`
        /// or `..` components; named documents never mix with file documents.
        #[arg(long)]
        name: Option<String>,
    },
    /// List the versions of a document.
    Versions {
        /// The document: a file path, or a name (`name:NAME` when a file has the same path).
        doc: PathBuf,
    },
    /// Show a document's record (path, versions, tags, metadata, size, type).
    Get {
        /// The document.
        doc: PathBuf,
        /// Also show this version.
        #[arg(long)]
        version: Option<u32>,
    },
    /// Print a document's content.
    Cat {
        /// The document.
        doc: PathBuf,
        /// A specific version (default: current).
        #[arg(long)]
        version: Option<u32>,
    },
    /// Write a document's content (a version of it) back to a file.
    Restore {
        /// The document.
        doc: PathBuf,
        /// A specific version (default: current).
        #[arg(long)]
        version: Option<u32>,
        /// Where to write it (default: a file document's own path; a named document's name
        /// under the current directory).
        #[arg(long)]
        to: Option<PathBuf>,
    },
    /// List documents.
    Ls {
        #[command(flatten)]
        filter: FilterArgs,
        /// At most this many.
        #[arg(short = 'n', long)]
        limit: Option<usize>,
    },
    /// Remove documents and all their versions.
    Rm {
        /// The documents.
        #[arg(required = true)]
        docs: Vec<PathBuf>,
    },
    /// Add tags to documents.
    Tag {
        /// The documents.
        #[arg(required = true)]
        docs: Vec<PathBuf>,
        /// Tags to add (repeatable).
        #[arg(short, long = "tag", value_name = "TAG", required = true)]
        tags: Vec<String>,
    },
    /// Remove tags from documents.
    Untag {
        /// The documents.
        #[arg(required = true)]
        docs: Vec<PathBuf>,
        /// Tags to remove (repeatable).
        #[arg(short, long = "tag", value_name = "TAG", required = true)]
        tags: Vec<String>,
    },
    /// Document metadata.
    #[command(subcommand)]
    Meta(MetaCommand),
    /// Search: BM25 over words, "phrases", AND/OR/NOT, +must, -mustnot, field:word, and, with
    /// an embedding model installed (`cairn model install`), passage vectors (hybrid by default).
    Search {
        /// The query.
        query: String,
        /// keyword (BM25), semantic (passage vectors) or hybrid (both fused). Default: hybrid
        /// with a model installed, keyword without.
        #[arg(long, value_enum)]
        mode: Option<SearchModeArg>,
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
        /// Stop after this many documents with matches.
        #[arg(short = 'm', long)]
        max_files: Option<usize>,
        /// Print totals after the matches: documents in scope, candidates from the n-gram
        /// index, documents read, matches, bytes and time.
        #[arg(long)]
        stats: bool,
        /// Read every document in scope instead of the n-gram index's candidates (the same
        /// output, slower).
        #[arg(long)]
        no_index: bool,
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Rebuild the full-text index from the stored documents (works from a damaged index).
    Reindex,
}

/// `cairn meta ...`.
#[derive(Subcommand, Debug)]
pub enum MetaCommand {
    /// Set (K=V) or remove (--unset K) metadata on the given documents and/or every document
    /// matching the filter, all in one write.
    Set {
        /// The documents.
        docs: Vec<PathBuf>,
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
        /// The document.
        doc: PathBuf,
        /// Key.
        key: Option<String>,
    },
}

/// `cairn search --mode`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum SearchModeArg {
    /// BM25.
    Keyword,
    /// Passage vectors.
    Semantic,
    /// BM25 and passage vectors fused.
    Hybrid,
}

impl SearchModeArg {
    fn mode(self) -> docs::SearchMode {
        match self {
            SearchModeArg::Keyword => docs::SearchMode::Keyword,
            SearchModeArg::Semantic => docs::SearchMode::Semantic,
            SearchModeArg::Hybrid => docs::SearchMode::Hybrid,
        }
    }
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
    /// Documents whose path matches this glob (`*` also matches `/`).
    #[arg(long)]
    path_glob: Option<String>,
    /// Documents updated at or after this time (YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ, Unix seconds).
    #[arg(long)]
    since: Option<String>,
    /// Documents updated before this time.
    #[arg(long)]
    until: Option<String>,
}

impl FilterArgs {
    fn filter(self) -> Filter {
        Filter {
            tags: self.tags,
            meta: self.meta.into_iter().collect::<BTreeMap<_, _>>(),
            path_glob: self.path_glob,
            since: self.since,
            until: self.until,
        }
    }
}

/// Parses `key=value`.
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("{s:?} is not key=value"))
}

/// A document argument as a reference: its text, with the bytes of a file name that are not
/// UTF-8 shown as `\xHH` (which the application layer reads back).
pub fn doc_ref(p: &std::path::Path) -> String {
    cairn::docs::display_path(p.as_os_str().as_bytes())
}

fn refs(ps: Vec<PathBuf>) -> Vec<String> {
    ps.iter().map(|p| doc_ref(p)).collect()
}

/// What a document command asks for.
pub enum Plan {
    /// One request.
    Run(Request),
    /// Stream a document's content to stdout.
    Cat {
        /// The document.
        doc: String,
        /// The version.
        version: Option<u32>,
    },
    /// A grep, printed as it goes when embedded.
    Grep(docs::GrepRequest, GrepPrint),
}

/// How grep prints.
#[derive(Clone, Copy, Debug)]
pub struct GrepPrint {
    /// Paths only.
    pub files_only: bool,
    /// Totals after the matches.
    pub stats: bool,
}

impl DocsCommand {
    /// The request this command makes, and whether it reads standard input.
    pub fn plan(self) -> cairn::Result<(Plan, bool)> {
        let run = |r| (Plan::Run(r), false);
        Ok(match self {
            DocsCommand::Add { paths, recursive, tags, meta, name } => {
                let (stdin, files): (Vec<PathBuf>, Vec<PathBuf>) =
                    paths.into_iter().partition(|p| p.as_os_str() == "-");
                let reads = !stdin.is_empty();
                let stdin = match (reads, name) {
                    (true, n) => Some(n.unwrap_or_else(|| "stdin".into())),
                    (false, Some(_)) => {
                        return Err(cairn::Error::bad_request("--name names stdin content; give `-` as a path"));
                    }
                    (false, None) => None,
                };
                let req = docs::AddRequest {
                    files,
                    recursive,
                    docs: Vec::new(),
                    stdin,
                    tags,
                    meta: meta.into_iter().collect(),
                };
                (Plan::Run(Request::Add(req)), reads)
            }
            DocsCommand::Versions { doc } => run(Request::Versions(docs::VersionsRequest { doc: doc_ref(&doc) })),
            DocsCommand::Get { doc, version } => run(Request::Get(docs::GetRequest { doc: doc_ref(&doc), version })),
            DocsCommand::Cat { doc, version } => (Plan::Cat { doc: doc_ref(&doc), version }, false),
            DocsCommand::Restore { doc, version, to } => {
                run(Request::Restore(docs::RestoreRequest { doc: doc_ref(&doc), version, to }))
            }
            DocsCommand::Ls { filter, limit } => run(Request::Ls(docs::LsRequest { filter: filter.filter(), limit })),
            DocsCommand::Rm { docs } => run(Request::Rm(docs::RmRequest { docs: refs(docs) })),
            DocsCommand::Tag { docs, tags } => {
                run(Request::Tag(docs::TagRequest { docs: refs(docs), add: tags, remove: Vec::new() }))
            }
            DocsCommand::Untag { docs, tags } => {
                run(Request::Tag(docs::TagRequest { docs: refs(docs), add: Vec::new(), remove: tags }))
            }
            DocsCommand::Meta(MetaCommand::Set { docs, set, unset, where_tags, where_path }) => {
                run(Request::MetaSet(docs::MetaSetRequest {
                    docs: refs(docs),
                    where_tags,
                    where_path,
                    set: set.into_iter().collect(),
                    unset,
                }))
            }
            DocsCommand::Meta(MetaCommand::Get { doc, key }) => {
                run(Request::MetaGet(docs::MetaGetRequest { doc: doc_ref(&doc), key }))
            }
            DocsCommand::Search { query, mode, limit, offset, words, no_snippets, filter } => {
                run(Request::Search(docs::SearchRequest {
                    query,
                    limit,
                    offset,
                    words,
                    snippets: !no_snippets,
                    filter: filter.filter(),
                    mode: mode.map(SearchModeArg::mode),
                }))
            }
            DocsCommand::Grep {
                pattern,
                ignore_case,
                word_regexp,
                fixed_strings,
                context,
                files_with_matches,
                max_files,
                stats,
                no_index,
                filter,
            } => {
                let req = docs::GrepRequest {
                    pattern,
                    ignore_case,
                    word: word_regexp,
                    fixed: fixed_strings,
                    context,
                    filter: filter.filter(),
                    limit: max_files,
                    scan_all: no_index,
                };
                (Plan::Grep(req, GrepPrint { files_only: files_with_matches, stats }), false)
            }
            DocsCommand::Reindex => run(Request::Reindex(Default::default())),
        })
    }
}
