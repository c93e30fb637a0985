//! Framed IPC connections: handshake, request dispatch, bounded output, cancellation.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use cairn_proto::frame::{self, HEADER_LEN};
use cairn_proto::{ClientMsg, ErrorCode, Frame, Request, ServerMsg};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Semaphore, mpsc};

use crate::{Shared, api};

/// Encoded frames queued per connection before producers wait (backpressure).
const OUT_QUEUE: usize = 16;
/// Input chunks queued per request.
const IN_QUEUE: usize = 4;
/// Time a client has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the Unix socket with mode 0600 (bound under a temporary name, restricted, then
/// renamed, so it is never reachable with looser permissions). A stale socket left by a
/// killed daemon is replaced (the caller holds the serve lock).
pub fn bind_unix(path: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("sock.tmp");
    let _ = std::fs::remove_file(&tmp);
    let l = std::os::unix::net::UnixListener::bind(&tmp).with_context(|| format!("binding {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, path).with_context(|| format!("binding {}", path.display()))?;
    l.set_nonblocking(true)?;
    Ok(UnixListener::from_std(l)?)
}

/// A listener the daemon accepts IPC connections on.
pub enum Listener {
    /// The Unix socket (no token: the socket's mode restricts who connects).
    Unix(UnixListener),
    /// TCP (token required).
    Tcp(TcpListener),
}

/// Accepts connections until shutdown, at most `limit` served at once.
pub async fn accept(l: Listener, shared: Arc<Shared>, limit: Arc<Semaphore>) {
    loop {
        let permit = tokio::select! {
            p = limit.clone().acquire_owned() => p,
            _ = shared.shutdown.cancelled() => return,
        };
        let Ok(permit) = permit else { return };
        let accepted = tokio::select! {
            c = async {
                match &l {
                    Listener::Unix(u) => u.accept().await.map(|(s, _)| Box::pin(s) as std::pin::Pin<Box<dyn Stream>>),
                    Listener::Tcp(t) => t.accept().await.map(|(s, _)| {
                        let _ = s.set_nodelay(true);
                        Box::pin(s) as std::pin::Pin<Box<dyn Stream>>
                    }),
                }
            } => c,
            _ = shared.shutdown.cancelled() => return,
        };
        match accepted {
            Ok(s) => {
                let sh = shared.clone();
                let needs_token = matches!(l, Listener::Tcp(_));
                shared.tasks.spawn(async move {
                    connection(s, sh, needs_token).await;
                    drop(permit);
                });
            }
            Err(e) => {
                eprintln!("cairn: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A connected byte stream.
pub trait Stream: AsyncRead + AsyncWrite + Send {}
impl<T: AsyncRead + AsyncWrite + Send> Stream for T {}

/// Sends frames of one request into the connection's bounded queue; blocks (on a blocking
/// thread) while the queue is full, fails once the client cancelled or went away.
#[derive(Clone)]
pub struct Sink {
    tx: mpsc::Sender<Vec<u8>>,
    stream: u32,
    cancel: Arc<AtomicBool>,
}

impl Sink {
    /// Sends one message (`end`: the last of the request).
    pub fn send(&self, msg: &ServerMsg, end: bool) -> io::Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "request cancelled"));
        }
        self.tx
            .blocking_send(msg.to_frame(self.stream, end))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client disconnected"))
    }

    /// Sends the final frame after a failure, unless the client cancelled or left.
    pub fn fail(&self, code: ErrorCode, message: String) {
        // A request stopped because the client cancelled it (its answer could not be sent)
        // says so; one that failed on its own keeps its reason.
        let stopped = self.cancel.load(Ordering::Relaxed) && code == ErrorCode::Internal;
        let code = if stopped { ErrorCode::Cancelled } else { code };
        let _ = self.tx.blocking_send(ServerMsg::error(code, message).to_frame(self.stream, true));
    }
}

struct InFlight {
    cancel: Arc<AtomicBool>,
    input: Option<mpsc::Sender<Vec<u8>>>,
}

enum Event {
    Frame(Frame),
    Closed(Option<String>),
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: u32) -> Result<Option<Frame>, String> {
    let mut header = [0u8; HEADER_LEN];
    // The magic first, so a client speaking something else is told at once.
    match r.read_exact(&mut header[..4]).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    frame::decode_header(&header[..4], max).map_err(|e| e.to_string())?;
    r.read_exact(&mut header[4..]).await.map_err(|e| format!("truncated frame header: {e}"))?;
    let h = match frame::decode_header(&header, max) {
        Ok(Some(h)) => h,
        Ok(None) => unreachable!("a whole header was read"),
        Err(e) => return Err(e.to_string()),
    };
    let mut payload = vec![0u8; h.len as usize];
    r.read_exact(&mut payload).await.map_err(|e| format!("truncated frame: {e}"))?;
    frame::check_payload(&header, &h, &payload).map_err(|e| e.to_string())?;
    Ok(Some(Frame { stream: h.stream, flags: h.flags, payload }))
}

async fn send_now(tx: &mpsc::Sender<Vec<u8>>, stream: u32, msg: ServerMsg) {
    let _ = tx.send(msg.to_frame(stream, true)).await;
}

/// Serves one connection until the client leaves, breaks the protocol, or shutdown.
pub async fn connection<S: AsyncRead + AsyncWrite + Send + 'static>(s: S, shared: Arc<Shared>, needs_token: bool) {
    // The Unix socket (mode 0600) is only its owner's: full access. TCP: what the token grants.
    let mut access = cairn::Access::full();
    let (rd, wr) = tokio::io::split(s);
    // Buffered: a frame's header and payload usually arrive in one read.
    let mut rd = tokio::io::BufReader::with_capacity(64 << 10, rd);
    let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(OUT_QUEUE);
    let writer = tokio::spawn(async move {
        let mut w = BufWriter::with_capacity(64 << 10, wr);
        while let Some(buf) = out_rx.recv().await {
            if w.write_all(&buf).await.is_err() {
                return;
            }
            while let Ok(more) = out_rx.try_recv() {
                if w.write_all(&more).await.is_err() {
                    return;
                }
            }
            if w.flush().await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    });
    let max = shared.config.max_payload;

    // Handshake.
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut rd, max)).await {
        Ok(Ok(Some(f))) => ClientMsg::decode(&f.payload).map_err(|e| e.to_string()),
        Ok(Ok(None)) => Err("closed before hello".to_string()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("no hello within 10 s".to_string()),
    };
    let refusal = match hello {
        Ok(ClientMsg::Hello { min_version, max_version, token, .. }) => {
            match cairn_proto::negotiate(min_version, max_version) {
                None => Some(ServerMsg::error(
                    ErrorCode::Version,
                    format!(
                        "server speaks protocol {}, client {min_version}..={max_version}",
                        cairn_proto::PROTOCOL_VERSION
                    ),
                )),
                Some(_) if needs_token && shared.config.access_for(token.as_deref().unwrap_or("")).is_none() => {
                    Some(ServerMsg::error(ErrorCode::Unauthorized, "missing or wrong token"))
                }
                Some(v) => {
                    if needs_token && let Some(a) = shared.config.access_for(token.as_deref().unwrap_or("")) {
                        access = a;
                    }
                    let welcome = ServerMsg::Welcome {
                        version: v,
                        server: format!("cairn {}", env!("CARGO_PKG_VERSION")),
                        max_payload: max,
                    };
                    send_now(&out_tx, 0, welcome).await;
                    None
                }
            }
        }
        Ok(_) => Some(ServerMsg::error(ErrorCode::BadRequest, "the first message must be Hello")),
        Err(e) => Some(ServerMsg::error(ErrorCode::BadRequest, e)),
    };
    if let Some(r) = refusal {
        send_now(&out_tx, 0, r).await;
        drop(out_tx);
        let _ = writer.await;
        return;
    }

    // Frames are read by their own task so the loop below can also watch shutdown and
    // finished requests (reading is not cancel-safe).
    let (ev_tx, mut ev_rx) = mpsc::channel::<Event>(1);
    let reader = tokio::spawn(async move {
        loop {
            match read_frame(&mut rd, max).await {
                Ok(Some(f)) => {
                    if ev_tx.send(Event::Frame(f)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    let _ = ev_tx.send(Event::Closed(None)).await;
                    return;
                }
                Err(e) => {
                    let _ = ev_tx.send(Event::Closed(Some(e))).await;
                    return;
                }
            }
        }
    });
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u32>();
    let mut in_flight: HashMap<u32, InFlight> = HashMap::new();
    let mut closing = false;
    loop {
        if closing && in_flight.is_empty() {
            break;
        }
        tokio::select! {
            Some(id) = done_rx.recv() => {
                in_flight.remove(&id);
            }
            _ = shared.shutdown.cancelled(), if !closing => {
                closing = true;
            }
            ev = ev_rx.recv(), if !closing || !in_flight.is_empty() => {
                let Some(ev) = ev else { break };
                match ev {
                    Event::Closed(err) => {
                        if let Some(e) = err {
                            send_now(&out_tx, 0, ServerMsg::error(ErrorCode::BadRequest, e)).await;
                        }
                        // The client is gone (or broke the framing): cancel what it asked.
                        for f in in_flight.values() {
                            f.cancel.store(true, Ordering::Relaxed);
                        }
                        break;
                    }
                    Event::Frame(f) => {
                        let msg = match ClientMsg::decode(&f.payload) {
                            Ok(m) => m,
                            Err(e) => {
                                send_now(&out_tx, f.stream, ServerMsg::error(ErrorCode::BadRequest, e.to_string())).await;
                                continue;
                            }
                        };
                        match msg {
                            ClientMsg::Request(req) => {
                                if closing || shared.shutdown.is_cancelled() {
                                    send_now(&out_tx, f.stream, ServerMsg::error(ErrorCode::ShuttingDown, "the server is shutting down")).await;
                                } else if in_flight.contains_key(&f.stream) {
                                    send_now(&out_tx, f.stream, ServerMsg::error(ErrorCode::BadRequest, "stream id already in use")).await;
                                } else if in_flight.len() >= shared.config.max_in_flight {
                                    send_now(&out_tx, f.stream, ServerMsg::error(ErrorCode::BadRequest, "too many requests in flight on this connection")).await;
                                } else {
                                    let cancel = Arc::new(AtomicBool::new(false));
                                    let sink = Sink { tx: out_tx.clone(), stream: f.stream, cancel: cancel.clone() };
                                    let (input, input_rx) = if matches!(req, Request::Call { input: true, .. }) {
                                        let (t, r) = mpsc::channel(IN_QUEUE);
                                        (Some(t), Some(r))
                                    } else {
                                        (None, None)
                                    };
                                    in_flight.insert(f.stream, InFlight { cancel, input });
                                    let sh = shared.clone();
                                    let done = done_tx.clone();
                                    let stream = f.stream;
                                    let access = access.clone();
                                    let task = tokio::task::spawn_blocking(move || {
                                        api::handle(&sh, &access, req, &sink, input_rx);
                                        let _ = done.send(stream);
                                    });
                                    shared.tasks.spawn(async move {
                                        let _ = task.await;
                                    });
                                }
                            }
                            ClientMsg::Input(chunk) => {
                                if let Some(fl) = in_flight.get_mut(&f.stream) {
                                    if let Some(tx) = &fl.input
                                        && !chunk.is_empty()
                                        && tx.send(chunk).await.is_err()
                                    {
                                        fl.input = None;
                                    }
                                    if f.is_end() {
                                        fl.input = None;
                                    }
                                }
                            }
                            ClientMsg::Cancel => {
                                if let Some(fl) = in_flight.get_mut(&f.stream) {
                                    fl.cancel.store(true, Ordering::Relaxed);
                                    fl.input = None;
                                }
                            }
                            ClientMsg::Hello { .. } => {
                                send_now(&out_tx, f.stream, ServerMsg::error(ErrorCode::BadRequest, "hello twice")).await;
                            }
                        }
                    }
                }
            }
        }
    }
    reader.abort();
    drop(out_tx);
    drop(done_tx);
    let _ = writer.await;
}
