//! cairn's daemon. It holds one data directory open (a [`cairn::Cairn`]) and serves it to many
//! clients at once:
//!
//! - framed binary IPC ([`cairn_proto`]) on a Unix socket in the data directory (mode 0600) and
//!   optionally on TCP (token required): each request is one operation of the application layer
//!   (its JSON), answered by its result's JSON, streamed with backpressure and cancellable;
//! - HTTP/REST ([`http`]) on an optional port, bearer-token authenticated;
//! - graceful shutdown: stop accepting, finish in-flight requests, commit the index.
//!
//! The daemon adds no operations of its own: it translates frames and HTTP requests into the
//! application layer's requests and renders their results ([`cairn::Response::to_json`]), so
//! every front-end answers with the same JSON. What a remote client may do is a
//! [`cairn::Access`]: the Unix socket (only its owner can open it) gets full access; TCP and
//! HTTP clients act inside the configured roots, read-only with the read-only token.
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
mod trim;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cairn::{Access, Cairn, ErrorKind};
use cairn_proto::ErrorCode;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use auth::token_matches;
pub use lock::ServeLock;

/// Where and how the daemon listens.
#[derive(Clone, Debug)]
pub struct Config {
    /// The Unix socket (default: the data directory's).
    pub socket: PathBuf,
    /// Optional TCP address for framed IPC (needs a token).
    pub tcp: Option<SocketAddr>,
    /// Optional HTTP/REST address (needs a token).
    pub http: Option<SocketAddr>,
    /// Bearer token granting full access to TCP and HTTP clients (inside `roots`).
    pub token: Option<String>,
    /// Bearer token granting read-only access.
    pub read_only_token: Option<String>,
    /// Where TCP and HTTP clients may have the daemon read and write files (none: nowhere).
    pub roots: Option<Vec<PathBuf>>,
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
    /// Defaults for the data directory `c` serves, with its `[server]` settings.
    pub fn new(c: &Cairn) -> Config {
        let s = &c.config().server;
        Config {
            socket: c.layout().socket(),
            tcp: None,
            http: None,
            token: s.token.clone(),
            read_only_token: s.read_only_token.clone(),
            roots: s.roots.clone(),
            max_payload: cairn_proto::DEFAULT_MAX_PAYLOAD,
            max_connections: 1024,
            max_in_flight: 32,
            shutdown_grace: Duration::from_secs(30),
            workers: None,
        }
    }

    /// What a remote client presenting `token` may do, if anything.
    pub fn access_for(&self, token: &str) -> Option<Access> {
        let roots = self.roots.as_deref();
        let is = |t: &Option<String>| t.as_deref().is_some_and(|t| token_matches(token.as_bytes(), t.as_bytes()));
        if is(&self.token) {
            Some(Access::remote(roots, false))
        } else if is(&self.read_only_token) {
            Some(Access::remote(roots, true))
        } else {
            None
        }
    }
}

/// The IPC error code of an error kind (the one place they are paired).
pub fn error_code(kind: ErrorKind) -> ErrorCode {
    match kind {
        ErrorKind::NotFound => ErrorCode::NotFound,
        ErrorKind::BadRequest => ErrorCode::BadRequest,
        ErrorKind::Conflict => ErrorCode::Conflict,
        ErrorKind::PreconditionFailed => ErrorCode::PreconditionFailed,
        ErrorKind::Unauthorized => ErrorCode::Unauthorized,
        ErrorKind::Forbidden => ErrorCode::Forbidden,
        ErrorKind::Corrupt => ErrorCode::Corrupt,
        _ => ErrorCode::Internal,
    }
}

/// The error kind of an IPC error code (protocol codes count as bad requests or internal).
pub fn error_kind(code: ErrorCode) -> ErrorKind {
    match code {
        ErrorCode::NotFound => ErrorKind::NotFound,
        ErrorCode::BadRequest | ErrorCode::Version => ErrorKind::BadRequest,
        ErrorCode::Conflict => ErrorKind::Conflict,
        ErrorCode::PreconditionFailed => ErrorKind::PreconditionFailed,
        ErrorCode::Unauthorized => ErrorKind::Unauthorized,
        ErrorCode::Forbidden => ErrorKind::Forbidden,
        ErrorCode::Corrupt => ErrorKind::Corrupt,
        ErrorCode::Cancelled | ErrorCode::ShuttingDown | ErrorCode::Internal => ErrorKind::Internal,
    }
}

/// Everything a connection needs.
pub(crate) struct Shared {
    pub cairn: Cairn,
    pub config: Config,
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
}

/// Serves `cairn` until `shutdown` is cancelled (or SIGTERM/SIGINT arrives), then stops
/// accepting, lets in-flight requests finish (up to the grace period), commits the index and
/// returns. `ready` is called once every listener is bound.
pub fn serve(
    config: Config,
    cairn: Cairn,
    shutdown: CancellationToken,
    ready: impl FnOnce(&Config) + Send,
) -> Result<()> {
    if config.tcp.is_some() || config.http.is_some() {
        let token = config.token.as_deref().or(config.read_only_token.as_deref());
        let Some(token) = token else {
            anyhow::bail!("TCP and HTTP listeners need a token (CAIRN_TOKEN or `token` in [server] of cairn.toml)");
        };
        cairn::config::check_token(token)?;
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all().thread_name("cairn-server");
    if let Some(n) = config.workers {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build().context("starting the runtime")?;
    let shared = Arc::new(Shared { cairn, config, shutdown, tasks: TaskTracker::new() });
    rt.block_on(run(shared.clone(), ready))?;
    rt.shutdown_timeout(Duration::from_secs(1));
    shared.cairn.commit().context("committing the index")?;
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
    let trimmer = tokio::spawn(trim::every(trim::PERIOD));
    ready(&config);
    let stop = shared.shutdown.clone();
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = signal() => stop.cancel(),
    }
    trimmer.abort();
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
