//! The `cairn` command-line tool. Every command runs embedded on the data directory
//! (`--dir`, `$CAIRN_DIR`, default `./.cairn`).

mod kv;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// cairn: one embedded storage engine for keys, blobs, trees, documents and records.
#[derive(Parser, Debug)]
#[command(name = "cairn", version, about)]
struct Cli {
    /// Data directory.
    #[arg(long, global = true, env = "CAIRN_DIR", default_value = ".cairn")]
    dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The key-value engine.
    #[command(subcommand)]
    Kv(kv::KvCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = io::BufWriter::new(io::stdout().lock());
    let result = match cli.command {
        Command::Kv(cmd) => kv::run(&cli.dir, cmd, &mut out),
    };
    let result = result.and_then(|()| out.flush().map_err(Into::into));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe))
}
