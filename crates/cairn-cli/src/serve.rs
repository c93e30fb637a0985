//! `cairn serve`: the daemon.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use cairn_server::{CliIo, CliRunner, Config, ServeLock, Services, Shutdown};
use clap::Args;

use crate::ctx::{Ctx, open_services};
use crate::run_line;

/// `cairn serve` options.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Also serve framed IPC on this TCP address (token required).
    #[arg(long, value_name = "ADDR")]
    tcp: Option<SocketAddr>,
    /// Serve HTTP/REST on this address (token required).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
}

/// The bearer token for TCP and HTTP: `CAIRN_TOKEN`, else `token` in `<dir>/cairn.toml` (at
/// the top level or under `[server]`).
pub fn token(data: &Path) -> Result<Option<String>> {
    if let Ok(t) = std::env::var("CAIRN_TOKEN")
        && !t.is_empty()
    {
        return Ok(Some(t));
    }
    let Some(text) = cairn_cas::config::read_file(data)? else { return Ok(None) };
    token_in(&text).with_context(|| data.join(cairn_cas::config::CONFIG_FILE).display().to_string())
}

fn token_in(text: &str) -> Result<Option<String>> {
    let table: toml::Table = toml::from_str(text)?;
    let server = table.get("server").and_then(|s| s.as_table());
    match server.and_then(|s| s.get("token")).or_else(|| table.get("token")) {
        None => Ok(None),
        Some(toml::Value::String(t)) if !t.is_empty() => Ok(Some(t.clone())),
        Some(_) => anyhow::bail!("token must be a non-empty string"),
    }
}

struct Runner {
    data: PathBuf,
    services: Arc<Services>,
}

impl CliRunner for Runner {
    fn run(&self, args: Vec<String>, io: CliIo) -> u8 {
        let (mut ctx, mut out) = Ctx::shared(self.data.clone(), self.services.clone(), io);
        run_line(&mut ctx, args, &mut out)
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(data: &Path, args: ServeArgs) -> Result<()> {
    let _lock = ServeLock::acquire(data)?;
    let services = Arc::new(open_services(data)?);
    let mut config = Config::new(data);
    config.tcp = args.tcp;
    config.http = args.http;
    config.token = token(data)?;
    config.workers = args.workers;
    let runner = Arc::new(Runner { data: data.to_path_buf(), services: services.clone() });
    let result = cairn_server::serve(config, services.clone(), runner, Shutdown::new(), |c| {
        let mut msg = format!("cairn: serving {} on {}", data.display(), c.socket.display());
        if let Some(t) = c.tcp {
            msg += &format!(", tcp://{t}");
        }
        if let Some(h) = c.http {
            msg += &format!(", http://{h}");
        }
        eprintln!("{msg}");
    });
    let db = services.db.clone();
    drop(services);
    db.close()?;
    eprintln!("cairn: stopped");
    result
}

#[cfg(test)]
mod tests {
    use super::token_in;

    #[test]
    fn token_from_the_config_file() {
        assert_eq!(token_in("token = \"a\"\n[s3]\nbucket = \"b\"\n").unwrap().as_deref(), Some("a"));
        assert_eq!(token_in("[server]\ntoken = \"b\"\n").unwrap().as_deref(), Some("b"));
        assert_eq!(token_in("[s3]\nbucket = \"b\"\n").unwrap(), None);
        assert!(token_in("token = 5\n").unwrap_err().to_string().contains("token"));
        assert!(token_in("token = \"\"\n").is_err());
        assert!(token_in("token = \"a\n").is_err());
    }
}
