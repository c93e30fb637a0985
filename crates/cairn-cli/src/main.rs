//! The `cairn` command-line tool. Every command runs embedded on the data directory
//! (`--dir`, `$CAIRN_DIR`, default `./.cairn`).

mod docs;
mod kv;
mod tree;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// cairn: one embedded storage engine for keys, blobs, trees, documents and records.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about)]
struct Cli {
    /// Data directory. (Its id is not `dir`, so no subcommand argument can shadow it.)
    #[arg(long = "dir", global = true, env = "CAIRN_DIR", default_value = ".cairn", value_name = "DIR")]
    data_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(flatten)]
    Docs(docs::DocsCommand),
    /// The key-value engine.
    #[command(subcommand)]
    Kv(kv::KvCommand),
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = io::BufWriter::new(io::stdout().lock());
    let result = match cli.command {
        Command::Docs(cmd) => docs::run(&cli.data_dir, cmd, &mut out),
        Command::Kv(cmd) => kv::run(&cli.data_dir, cmd, &mut out),
        Command::Snapshot { source, name, json } => {
            tree::snapshot(&cli.data_dir, &source, name.as_deref(), json, &mut out)
        }
        Command::Checkout { snapshot, dest, mode, json } => {
            tree::checkout(&cli.data_dir, &snapshot, &dest, mode, json, &mut out)
        }
        Command::Diff { a, b, json } => tree::diff(&cli.data_dir, &a, &b, json, &mut out),
        Command::Snapshots { json } => tree::list(&cli.data_dir, json, &mut out),
        Command::RmSnapshot { names } => tree::remove(&cli.data_dir, &names, &mut out),
        Command::Gc { json } => tree::gc(&cli.data_dir, json, &mut out),
        Command::Verify { json } => tree::verify(&cli.data_dir, json, &mut out),
        Command::Du { snapshot, json } => tree::du(&cli.data_dir, snapshot.as_deref(), json, &mut out),
    };
    let result = result.and_then(|()| out.flush().map_err(Into::into));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<docs::NoMatch>().is_some() => ExitCode::from(1),
        Err(e) => {
            eprintln!("cairn: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe))
}
