//! cairn's daemon. It holds one data directory open (engine, blob store, trees, document
//! memory) and serves it to many clients at once:
//!
//! - framed binary IPC ([`cairn_proto`]) on a Unix socket in the data directory (mode 0600) and
//!   optionally on TCP (token required): typed requests (add, search, ls, get, ...) and `Cli`
//!   requests that run any `cairn` command line in the daemon, streamed back with backpressure
//!   and cancellable;
//! - HTTP/REST ([`http`]) on an optional port, bearer-token authenticated;
//! - graceful shutdown: stop accepting, finish in-flight requests, commit the index.
//!
//! One Tokio runtime; blocking storage work runs on its blocking pool. Every per-connection
//! queue is bounded, so a slow or dead client holds at most a few frames of memory and one
//! blocked worker, and a client that disconnects mid-stream cancels its requests.

mod api;
mod auth;
pub mod client;
pub mod http;
mod ipc;
mod lock;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cairn_docs::Memory;
use cairn_kv::Db;
use cairn_tree::Trees;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use auth::token_matches;
pub use lock::ServeLock;

/// The open layers of one data directory, shared by every request.
pub struct Services {
    /// The engine.
    pub db: Db,
    /// The document memory (over the same engine and blob store).
    pub memory: Memory,
    /// The tree layer (over the same engine and blob store).
    pub trees: Trees,
    /// The record tables (over the same engine).
    pub tables: cairn_tables::Tables,
}

/// Standard streams and working directory of a command line run in the daemon.
pub struct CliIo {
    /// The client's working directory: relative paths in the arguments are relative to it.
    pub cwd: PathBuf,
    /// Standard input (empty unless the client streams input).
    pub input: Box<dyn Read + Send>,
    /// Standard output, streamed to the client.
    pub out: Box<dyn Write + Send>,
    /// Standard error, streamed to the client.
    pub err: Box<dyn Write + Send>,
    /// The client's standard output is a terminal.
    pub tty: bool,
}

/// Runs `cairn` command lines inside the daemon (implemented by the CLI, which owns the
/// commands; the server only transports them).
pub trait CliRunner: Send + Sync + 'static {
    /// Runs `args` (everything after the global options) and returns the exit status. Output
    /// write errors mean the client went away or cancelled: stop and return.
    fn run(&self, args: Vec<String>, io: CliIo) -> u8;
}

/// Where and how the daemon listens.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Unix socket (default `<data dir>/cairn.sock`).
    pub socket: PathBuf,
    /// Optional TCP address for framed IPC (needs a token).
    pub tcp: Option<SocketAddr>,
    /// Optional HTTP/REST address (needs a token).
    pub http: Option<SocketAddr>,
    /// Bearer token for TCP and HTTP clients.
    pub token: Option<String>,
    /// Largest frame payload accepted.
    pub max_payload: u32,
    /// Most connections served at once (more wait in the listen backlog).
    pub max_connections: usize,
    /// Requests in flight per connection.
    pub max_in_flight: usize,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_grace: Duration,
    /// Worker threads of the runtime (default: the number of cores).
    pub workers: Option<usize>,
}

impl Config {
    /// Defaults for a data directory.
    pub fn new(data_dir: &Path) -> Config {
        Config {
            socket: socket_path(data_dir),
            tcp: None,
            http: None,
            token: None,
            max_payload: cairn_proto::DEFAULT_MAX_PAYLOAD,
            max_connections: 1024,
            max_in_flight: 32,
            shutdown_grace: Duration::from_secs(30),
            workers: None,
        }
    }
}

/// The Unix socket of a data directory.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("cairn.sock")
}

/// Everything a connection needs.
pub(crate) struct Shared {
    pub services: Arc<Services>,
    pub cli: Arc<dyn CliRunner>,
    pub config: Config,
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
}

/// Serves until `shutdown` is cancelled (or SIGTERM/SIGINT arrives), then stops accepting,
/// lets in-flight requests finish (up to the grace period), commits the index and returns.
/// `ready` is called once every listener is bound.
pub fn serve(
    config: Config,
    services: Arc<Services>,
    cli: Arc<dyn CliRunner>,
    shutdown: CancellationToken,
    ready: impl FnOnce(&Config) + Send,
) -> Result<()> {
    if (config.tcp.is_some() || config.http.is_some()) && config.token.as_deref().unwrap_or("").is_empty() {
        anyhow::bail!("TCP and HTTP listeners need a token (CAIRN_TOKEN or `token` in cairn.toml)");
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all().thread_name("cairn-server");
    if let Some(n) = config.workers {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build().context("starting the runtime")?;
    let shared = Arc::new(Shared { services, cli, config, shutdown, tasks: TaskTracker::new() });
    rt.block_on(run(shared.clone(), ready))?;
    rt.shutdown_timeout(Duration::from_secs(1));
    shared.services.memory.commit().context("committing the index")?;
    // Index builds still running resume on the next open.
    shared.services.tables.close();
    Ok(())
}

async fn run(shared: Arc<Shared>, ready: impl FnOnce(&Config)) -> Result<()> {
    let unix = ipc::bind_unix(&shared.config.socket)?;
    let tcp = match shared.config.tcp {
        Some(a) => Some(tokio::net::TcpListener::bind(a).await.with_context(|| format!("binding {a}"))?),
        None => None,
    };
    let http = match shared.config.http {
        Some(a) => Some(tokio::net::TcpListener::bind(a).await.with_context(|| format!("binding {a}"))?),
        None => None,
    };
    let mut config = shared.config.clone();
    if let Some(t) = &tcp {
        config.tcp = Some(t.local_addr()?);
    }
    if let Some(h) = &http {
        config.http = Some(h.local_addr()?);
    }
    let limit = Arc::new(tokio::sync::Semaphore::new(shared.config.max_connections));
    let mut listeners = Vec::new();
    listeners.push(tokio::spawn(ipc::accept(ipc::Listener::Unix(unix), shared.clone(), limit.clone())));
    if let Some(t) = tcp {
        listeners.push(tokio::spawn(ipc::accept(ipc::Listener::Tcp(t), shared.clone(), limit.clone())));
    }
    if let Some(h) = http {
        listeners.push(tokio::spawn(http::serve(h, shared.clone())));
    }
    ready(&config);
    let stop = shared.shutdown.clone();
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = signal() => stop.cancel(),
    }
    for l in listeners {
        let _ = l.await;
    }
    let _ = std::fs::remove_file(&shared.config.socket);
    shared.tasks.close();
    if tokio::time::timeout(shared.config.shutdown_grace, shared.tasks.wait()).await.is_err() {
        eprintln!("cairn: shutdown: requests still running after the grace period; exiting anyway");
    }
    Ok(())
}

async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

pub use tokio_util::sync::CancellationToken as Shutdown;
