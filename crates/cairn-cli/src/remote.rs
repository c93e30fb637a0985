//! Running a command in a daemon: `cairn --remote ...`, `cairn --addr ADDR ...`, or
//! automatically when a daemon serves the data directory.

use std::io::{self, IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use cairn_server::client::{self, Client};

use crate::Command;
use crate::docs::DocsCommand;
use crate::kv::KvCommand;
use crate::table::TableCommand;

/// The daemon to use, if any: `--addr`, else the data directory's socket (required with
/// `--remote`; used when it answers otherwise).
pub fn target(data: &Path, remote: bool, addr: Option<&str>) -> Result<Option<Client>> {
    if let Some(a) = addr {
        // Only TCP daemons check the token; the socket's file mode guards the Unix socket.
        let token = crate::serve::token(data)?;
        return Ok(Some(client::connect(a, token.as_deref())?));
    }
    let sock = cairn_server::socket_path(data);
    if remote {
        if !sock.exists() {
            bail!("no daemon serves {} (start one with `cairn serve`)", data.display());
        }
        return Ok(Some(client::connect_unix(&sock, None)?));
    }
    if !sock.exists() {
        return Ok(None);
    }
    match client::connect_unix(&sock, None) {
        Ok(c) => Ok(Some(c)),
        // A socket left by a daemon that was killed: nobody listens.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<io::Error>()
                    .is_some_and(|io| matches!(io.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound))
            }) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The arguments after the program name, without the global options that select the data
/// directory and the daemon (the daemon has its own).
pub fn forwarded_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--" {
            out.push(a);
            out.extend(it);
            break;
        }
        match a.as_str() {
            "--remote" => {}
            "--dir" | "--addr" => {
                it.next();
            }
            s if s.starts_with("--dir=") || s.starts_with("--addr=") => {}
            _ => out.push(a),
        }
    }
    out
}

/// Whether the command reads standard input.
fn reads_stdin(c: &Command) -> bool {
    match c {
        Command::Docs(DocsCommand::Add { paths, .. }) => paths.iter().any(|p| p.as_os_str() == "-"),
        Command::Kv(KvCommand::Put { value, .. }) => value == "-",
        Command::Table(TableCommand::Put { record, .. }) => record.as_deref().is_none_or(|r| r == "-"),
        _ => false,
    }
}

/// Runs the command line of this process in the daemon; the exit status is the command's.
pub fn run(mut client: Client, command: &Command) -> ExitCode {
    let args = forwarded_args(std::env::args().skip(1));
    let cwd = std::env::current_dir().unwrap_or_default();
    let tty = io::stdout().is_terminal();
    let mut stdin = io::stdin().lock();
    let input: Option<&mut dyn Read> = if reads_stdin(command) { Some(&mut stdin) } else { None };
    let mut out = io::stdout().lock();
    let mut err = io::stderr().lock();
    match client.run_cli(args, &cwd, tty, input, &mut out, &mut err) {
        Ok(code) => {
            let _ = out.flush();
            ExitCode::from(code)
        }
        Err(e)
            if e.chain()
                .any(|c| c.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(err, "cairn: daemon: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::forwarded_args;

    #[test]
    fn global_options_are_not_forwarded() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(forwarded_args(v("--dir d --remote search x")), v("search x"));
        assert_eq!(forwarded_args(v("search --dir=d x --addr tcp://h:1")), v("search x"));
        assert_eq!(forwarded_args(v("kv put -- --dir v")), v("kv put -- --dir v"));
    }
}
