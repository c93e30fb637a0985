//! The `cairn` command-line tool. Every command runs embedded on the data directory
//! (`--dir`, `$CAIRN_DIR`, default `./.cairn`), or in the daemon serving it (`cairn serve`)
//! when one runs (`--remote` insists on a daemon; `--addr` names one elsewhere).

mod ctx;
mod docs;
mod kv;
mod mcp;
mod remote;
mod serve;
mod table;
mod tree;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use ctx::Ctx;

use clap::{Parser, Subcommand};

/// cairn: one embedded storage engine for keys, blobs, trees, documents and records.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about)]
pub(crate) struct Cli {
    /// Data directory. (Its id is not `dir`, so no subcommand argument can shadow it.)
    #[arg(long = "dir", global = true, env = "CAIRN_DIR", default_value = ".cairn", value_name = "DIR")]
    data_dir: PathBuf,
    /// Run the command in the daemon serving the data directory (fail if none runs). Without
    /// it, a running daemon is used when its socket answers, else the command runs embedded.
    #[arg(long, global = true)]
    remote: bool,
    /// Run the command in the daemon at this address (a socket path or tcp://HOST:PORT; a TCP
    /// daemon needs CAIRN_TOKEN).
    #[arg(long, global = true, env = "CAIRN_ADDR", value_name = "ADDR")]
    addr: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    #[command(flatten)]
    Docs(docs::DocsCommand),
    /// The key-value engine.
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
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Materialize a snapshot into a new or empty directory.
    Checkout {
        /// Snapshot name.
        snapshot: String,
        /// Destination directory.
        dest: PathBuf,
        /// hardlink (shared read-only files), reflink (copy-on-write where supported) or copy.
        #[arg(long, default_value = "hardlink", value_parser = tree::parse_mode)]
        mode: cairn_tree::CheckoutMode,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Paths added, removed, modified or renamed from snapshot A to snapshot B.
    Diff {
        /// First snapshot.
        a: String,
        /// Second snapshot.
        b: String,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// List snapshots.
    Snapshots {
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Remove snapshots (their space is freed by `cairn gc`).
    RmSnapshot {
        /// Snapshot names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Free the space of data no snapshot refers to.
    Gc {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reread and rehash every stored chunk and check every snapshot.
    Verify {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Logical size, stored size and dedup ratio of one snapshot or all.
    Du {
        /// Snapshot (default: all).
        snapshot: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the daemon on this data directory: framed IPC on <DIR>/cairn.sock, optionally TCP
    /// and HTTP/REST (both need a token: CAIRN_TOKEN or `token` in <DIR>/cairn.toml).
    Serve(serve::ServeArgs),
    /// Serve the document memory to an agent over MCP (JSON-RPC on stdin/stdout): tools add,
    /// search, grep, get, ls, tag. Uses the daemon when one serves the data directory.
    Mcp,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => return report(serve::run(&cli.data_dir, args)),
        Command::Mcp => return report(mcp::run(&cli.data_dir, cli.remote, cli.addr.as_deref())),
        _ => {}
    }
    match remote::target(&cli.data_dir, cli.remote, cli.addr.as_deref()) {
        Ok(Some(client)) => return remote::run(client, &cli.command),
        Ok(None) => {}
        Err(e) => return report(Err(e)),
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    let mut ctx = Ctx::embedded(cli.data_dir);
    let result = execute(&mut ctx, cli.command, &mut out).and_then(|()| ctx.finish());
    let result = result.and_then(|()| out.flush().map_err(Into::into));
    report(result)
}

/// Runs one command (embedded, or inside the daemon for a client).
pub(crate) fn execute(ctx: &mut Ctx, command: Command, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        Command::Docs(cmd) => docs::run(ctx, cmd, out),
        Command::Kv(cmd) => kv::run(ctx, cmd, out),
        Command::Table(cmd) => table::run(ctx, cmd, out),
        Command::Snapshot { source, name, json } => tree::snapshot(ctx, &source, name.as_deref(), json, out),
        Command::Checkout { snapshot, dest, mode, json } => tree::checkout(ctx, &snapshot, &dest, mode, json, out),
        Command::Diff { a, b, json } => tree::diff(ctx, &a, &b, json, out),
        Command::Snapshots { json } => tree::list(ctx, json, out),
        Command::RmSnapshot { names } => tree::remove(ctx, &names, out),
        Command::Gc { json } => tree::gc(ctx, json, out),
        Command::Verify { json } => tree::verify(ctx, json, out),
        Command::Du { snapshot, json } => tree::du(ctx, snapshot.as_deref(), json, out),
        Command::Serve(_) | Command::Mcp => anyhow::bail!("`serve` and `mcp` cannot run inside a daemon"),
    }
}

/// Parses and runs one command line (the arguments after the program name) on `ctx` and
/// returns its exit status: usage errors go to `ctx.err` (help and version text to `out`),
/// command errors to `ctx.err`. The daemon and `cairn mcp` run command lines through this.
pub(crate) fn run_line(ctx: &mut Ctx, args: Vec<String>, out: &mut dyn Write) -> u8 {
    let cli = match Cli::try_parse_from(std::iter::once("cairn".to_string()).chain(args)) {
        Ok(c) => c,
        Err(e) => {
            let text = e.render().to_string();
            let _ = if e.use_stderr() { ctx.err.write_all(text.as_bytes()) } else { out.write_all(text.as_bytes()) };
            return e.exit_code().clamp(0, 255) as u8;
        }
    };
    let result = execute(ctx, cli.command, out).and_then(|()| out.flush().map_err(Into::into));
    exit_status(result, &mut ctx.err)
}

/// The exit status of a command's result; errors are printed to `err`.
pub(crate) fn exit_status(result: anyhow::Result<()>, err: &mut dyn Write) -> u8 {
    match result {
        Ok(()) => 0,
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) if e.downcast_ref::<docs::NoMatch>().is_some() => 1,
        Err(e) => {
            let _ = writeln!(err, "cairn: {}", message(&e));
            1
        }
    }
}

/// The error and its causes, `: `-separated, leaving out a cause whose text the message so
/// far already ends with (error types that print their source as well as returning it).
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    ExitCode::from(exit_status(result, &mut io::stderr()))
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_messages_name_each_cause_once() {
        let source = std::io::Error::other("connection refused");
        let e = cairn_cas::Error::Backend { object: "s3://b/pack-00000001.pack".into(), source };
        let e = anyhow::Error::from(e).context("uploading");
        assert_eq!(super::message(&e), "uploading: backend error on s3://b/pack-00000001.pack: connection refused");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::message(&e), "outer: inner");
    }
}
