//! The `cairn` command-line tool. Every command is one request of the application layer
//! (crate `cairn`), run embedded on the data directory (`--dir`, `$CAIRN_DIR`, default
//! `./.cairn`) or in the daemon serving it (`cairn serve`) when one runs (`--remote` insists on
//! a daemon; `--addr` names one elsewhere). `--json` prints the result's JSON, the same JSON the
//! daemon's IPC and HTTP and the MCP server give; without it the result is rendered for people.
//!
//! Exit status: 0 success; 1 `grep` matched nothing; 2 a bad request or usage; 3 not found;
//! 4 a conflict or a version precondition that does not hold; 5 unauthorized or forbidden;
//! 6 damaged data (also `verify` finding a problem); 7 anything else (I/O errors).

mod backend;
mod docs;
mod kv;
mod mcp;
mod render;
mod serve;
mod table;

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use backend::Backend;
use cairn::{ErrorKind, Request, Response};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

/// cairn: one embedded storage engine for keys, blobs, trees, documents and records.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about)]
pub(crate) struct Cli {
    /// Data directory (default ./.cairn). (Its id is not `dir`, so no subcommand argument can
    /// shadow it.)
    #[arg(long = "dir", global = true, env = "CAIRN_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Run the command in the daemon serving the data directory (fail if none runs). Without
    /// it, a running daemon is used when its socket answers, else the command runs embedded.
    #[arg(long, global = true)]
    remote: bool,
    /// Run the command in the daemon at this address (a socket path or tcp://HOST:PORT; a TCP
    /// daemon needs CAIRN_TOKEN). Not with --dir: the daemon serves its own directory.
    #[arg(long, global = true, env = "CAIRN_ADDR", value_name = "ADDR")]
    addr: Option<String>,
    /// Print the result as JSON (one document).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    #[command(flatten)]
    Docs(docs::DocsCommand),
    /// Keys and values (in the user keyspace), and the engine's statistics.
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// JSON record tables with secondary indexes and FIQL queries.
    #[command(subcommand)]
    Table(table::TableCommand),
    /// Snapshot a directory tree (unchanged files and subtrees are skipped on re-snapshots).
    Snapshot {
        /// The directory to snapshot.
        #[arg(value_name = "DIR")]
        source: PathBuf,
        /// Snapshot name (default: directory name and time).
        #[arg(long)]
        name: Option<String>,
    },
    /// Materialize a snapshot into a new or empty directory.
    Checkout {
        /// Snapshot name.
        snapshot: String,
        /// Destination directory.
        dest: PathBuf,
        /// reflink (copy-on-write clones where the file system supports them, else copies; the
        /// default), copy, or hardlink (links to shared read-only copies: fastest and smallest,
        /// but the files must not be changed in place).
        #[arg(long, default_value = "reflink")]
        mode: String,
    },
    /// Paths added, removed, modified or renamed from snapshot A to snapshot B.
    Diff {
        /// First snapshot.
        a: String,
        /// Second snapshot.
        b: String,
    },
    /// List snapshots.
    Snapshots,
    /// Remove snapshots (their space is freed by `cairn gc`).
    RmSnapshot {
        /// Snapshot names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Free the space of data no snapshot refers to.
    Gc,
    /// Check every layer: reread and rehash every chunk, every document, snapshot, table index
    /// and the full-text index; every problem is named with what it affects.
    Verify {
        /// Check rows and indexes only, without rereading every chunk.
        #[arg(long)]
        no_chunks: bool,
    },
    /// Rebuild what is derivable (the engine's state, reference counts, the full-text index,
    /// table indexes), store damaged content again from sources (every snapshot's source and
    /// every file document's file are tried; add more with --source), and say what is lost.
    /// Never deletes user data.
    Repair {
        /// A directory or file to read damaged content from again (repeatable).
        #[arg(long = "source", value_name = "PATH")]
        sources: Vec<PathBuf>,
    },
    /// Embedding models for semantic search.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Logical size, stored size and dedup ratio of one snapshot or all.
    Du {
        /// Snapshot (default: all).
        snapshot: Option<String>,
    },
    /// Run the daemon on this data directory: framed IPC on <DIR>/cairn.sock, optionally TCP
    /// and HTTP/REST (both need a token: CAIRN_TOKEN or `token` in [server] of cairn.toml).
    Serve(serve::ServeArgs),
    /// Serve the memory to an agent over MCP (JSON-RPC on stdin/stdout). Uses the daemon when
    /// one serves the data directory.
    Mcp,
}

/// `cairn model ...`.
#[derive(Subcommand, Debug)]
pub(crate) enum ModelCommand {
    /// Install an embedding model into the data directory: a model directory (the last line
    /// of scripts/install-model.sh) or an id found in the model caches. Documents are then
    /// embedded in the background and search is hybrid by default.
    Install {
        /// A model directory or id.
        source: String,
    },
    /// The installed model and how far embedding is.
    Status {
        /// Wait until every queued document is embedded.
        #[arg(long)]
        wait: bool,
    },
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let dir_given = matches.value_source("data_dir");
    if cli.addr.is_some() && dir_given == Some(clap::parser::ValueSource::CommandLine) {
        eprintln!("cairn: give --dir or --addr, not both (a daemon serves its own data directory)");
        return ExitCode::from(2);
    }
    if cli.addr.is_some() && dir_given == Some(clap::parser::ValueSource::EnvVariable) {
        eprintln!("cairn: warning: CAIRN_DIR is ignored: --addr names the daemon, which serves its own directory");
    }
    let data = cli.data_dir.clone().unwrap_or_else(|| PathBuf::from(".cairn"));
    let json = cli.json;
    let result = match cli.command {
        Command::Serve(args) => serve::run(&data, args).map(|()| 0),
        Command::Mcp => mcp::run(&data, cli.remote, cli.addr.as_deref()).map(|()| 0),
        command => run(&data, cli.remote, cli.addr.as_deref(), command, json),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn: {e}");
            ExitCode::from(exit_code(e.kind()))
        }
    }
}

/// The exit status of an error kind (the one place they are paired).
pub(crate) fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::BadRequest => 2,
        ErrorKind::NotFound => 3,
        ErrorKind::Conflict | ErrorKind::PreconditionFailed => 4,
        ErrorKind::Unauthorized | ErrorKind::Forbidden => 5,
        ErrorKind::Corrupt => 6,
        _ => 7,
    }
}

fn is_broken_pipe(e: &cairn::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe) {
            return true;
        }
        cause = c.source();
    }
    e.message().contains("Broken pipe")
}

/// What one command runs.
enum Plan {
    Run(Request),
    Cat { doc: String, version: Option<u32> },
    Grep(cairn::docs::GrepRequest, docs::GrepPrint),
}

fn plan(command: Command, json: bool) -> cairn::Result<(Plan, bool)> {
    Ok(match command {
        Command::Docs(d) => match d.plan()? {
            (docs::Plan::Run(r), stdin) => (Plan::Run(r), stdin),
            // With --json, the content in JSON (text, or base64 when binary).
            (docs::Plan::Cat { doc, version }, _) if json => {
                (Plan::Run(Request::Content(cairn::docs::ContentRequest { doc, version, max_bytes: None })), false)
            }
            (docs::Plan::Cat { doc, version }, _) => (Plan::Cat { doc, version }, false),
            (docs::Plan::Grep(r, p), _) => (Plan::Grep(r, p), false),
        },
        Command::Kv(k) => {
            let (r, stdin) = k.plan();
            (Plan::Run(r), stdin)
        }
        Command::Table(t) => {
            let (r, stdin) = t.plan()?;
            (Plan::Run(r), stdin)
        }
        Command::Snapshot { source, name } => {
            (Plan::Run(Request::Snapshot(cairn::trees::SnapshotRequest { source, name })), false)
        }
        Command::Checkout { snapshot, dest, mode } => {
            (Plan::Run(Request::Checkout(cairn::trees::CheckoutRequest { snapshot, dest, mode: mode.parse()? })), false)
        }
        Command::Diff { a, b } => (Plan::Run(Request::Diff(cairn::trees::DiffRequest { a, b })), false),
        Command::Snapshots => (Plan::Run(Request::Snapshots(Default::default())), false),
        Command::RmSnapshot { names } => {
            (Plan::Run(Request::RmSnapshot(cairn::trees::RmSnapshotRequest { names })), false)
        }
        Command::Gc => (Plan::Run(Request::Gc(Default::default())), false),
        Command::Verify { no_chunks } => {
            (Plan::Run(Request::Verify(cairn::verify::VerifyRequest { chunks: !no_chunks })), false)
        }
        Command::Du { snapshot } => (Plan::Run(Request::Du(cairn::trees::DuRequest { snapshot })), false),
        Command::Repair { sources } => (Plan::Run(Request::Repair(cairn::repair::RepairRequest { sources })), false),
        Command::Model(ModelCommand::Install { source }) => {
            (Plan::Run(Request::ModelInstall(cairn::model::ModelInstallRequest { source })), false)
        }
        Command::Model(ModelCommand::Status { wait }) => {
            (Plan::Run(Request::ModelStatus(cairn::model::ModelStatusRequest { wait })), false)
        }
        Command::Serve(_) | Command::Mcp => unreachable!("handled by main"),
    })
}

/// A progress bar on the terminal for operations that take a while (hidden elsewhere).
fn progress_bar(req: &Request) -> Option<ProgressBar> {
    if !matches!(req, Request::Add(_) | Request::Snapshot(_)) || !io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos}/{len} files {msg} [{elapsed_precise}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(bar)
}

fn run(data: &std::path::Path, remote: bool, addr: Option<&str>, command: Command, json: bool) -> cairn::Result<u8> {
    let explain = matches!(&command, Command::Table(t) if table::explains(t));
    let (plan, reads_stdin) = plan(command, json)?;
    let mut backend = Backend::connect(data, remote, addr)?;
    let stdout = io::stdout();
    let tty = stdout.is_terminal();
    let mut out = io::BufWriter::new(stdout.lock());
    let result = (|| -> cairn::Result<u8> {
        match plan {
            Plan::Cat { doc, version } => {
                backend.content(&doc, version, &mut out)?;
                Ok(0)
            }
            Plan::Grep(req, print) => render::grep(&mut backend, req, print, json, tty, &mut out),
            Plan::Run(req) => {
                let bar = progress_bar(&req);
                let report = |p: cairn::Progress| {
                    if let Some(b) = &bar {
                        b.set_length(p.total);
                        b.set_position(p.done);
                        b.set_message(format!("{:.1} MiB", p.bytes as f64 / (1 << 20) as f64));
                    }
                };
                let mut stdin = io::stdin();
                let input: Option<&mut (dyn io::Read + Send)> = if reads_stdin { Some(&mut stdin) } else { None };
                let res = backend.execute(req, input, Some(&report));
                if let Some(b) = &bar {
                    b.finish_and_clear();
                }
                let res: Response = res?;
                if json {
                    let text =
                        serde_json::to_string(&res.to_json()).map_err(|e| cairn::Error::internal(e.to_string()))?;
                    writeln!(out, "{text}").map_err(stdout_err)?;
                    return Ok(render::status(&res));
                }
                render::text(&res, tty, explain, &mut out)
            }
        }
    })();
    for w in backend.warnings() {
        eprintln!("cairn: warning: {w}");
    }
    let flushed = out.flush().map_err(stdout_err);
    drop(out);
    let finished = backend.finish();
    let code = result?;
    flushed?;
    finished?;
    Ok(code)
}

/// A write error on standard output.
pub(crate) fn stdout_err(e: io::Error) -> cairn::Error {
    cairn::Error::io(std::path::Path::new("<stdout>"), e)
}
