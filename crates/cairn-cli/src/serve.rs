//! `cairn serve`: the daemon.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use cairn::Cairn;
use cairn_server::{Config, ServeLock, Shutdown};
use clap::Args;

/// `cairn serve` options.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Also serve framed IPC on this TCP address (token required).
    #[arg(long, value_name = "ADDR")]
    tcp: Option<SocketAddr>,
    /// Serve HTTP/REST on this address (token required).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// A directory TCP and HTTP clients may have the daemon read (add, snapshot) and write
    /// (checkout, restore) files in (repeatable; default: `roots` in [server] of cairn.toml,
    /// else none).
    #[arg(long = "root", value_name = "DIR")]
    roots: Vec<PathBuf>,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(data: &Path, args: ServeArgs) -> cairn::Result<()> {
    let cairn = Cairn::open(data)?;
    let _lock = ServeLock::acquire(cairn.layout())
        .map_err(|e| cairn::Error::new(cairn::ErrorKind::Conflict, format!("{e:#}")))?;
    cairn.open_all()?;
    for w in cairn.take_warnings() {
        eprintln!("cairn: warning: {w}");
    }
    let mut config = Config::new(&cairn);
    config.tcp = args.tcp;
    config.http = args.http;
    config.workers = args.workers;
    if let Ok(t) = std::env::var("CAIRN_TOKEN")
        && !t.is_empty()
    {
        config.token = Some(t);
    }
    if let Ok(t) = std::env::var("CAIRN_READ_ONLY_TOKEN")
        && !t.is_empty()
    {
        config.read_only_token = Some(t);
    }
    for t in [&config.token, &config.read_only_token].into_iter().flatten() {
        cairn::config::check_token(t)?;
    }
    if !args.roots.is_empty() {
        let cwd = std::env::current_dir().unwrap_or_default();
        config.roots = Some(args.roots.iter().map(|r| cairn::absolute(&cwd, r)).collect());
    }
    let shown = crate::backend::shown(data);
    let result = cairn_server::serve(config, cairn.clone(), Shutdown::new(), |c| {
        let mut msg = format!("cairn: serving {} on {}", shown.display(), c.socket.display());
        if let Some(t) = c.tcp {
            msg += &format!(", tcp://{t}");
        }
        if let Some(h) = c.http {
            msg += &format!(", http://{h}");
        }
        if c.tcp.is_some() || c.http.is_some() {
            match &c.roots {
                Some(r) if !r.is_empty() => {
                    msg += &format!(
                        " (remote clients may use files under {})",
                        r.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                    )
                }
                _ => msg += " (remote clients have no file-system access: set roots)",
            }
        }
        eprintln!("{msg}");
    });
    let closed = cairn.close();
    eprintln!("cairn: stopped");
    result.map_err(|e| cairn::Error::internal(format!("{e:#}")))?;
    closed
}
