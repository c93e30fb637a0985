//! A blocking client for the framed IPC (used by `cairn --remote`, tests and benchmarks).

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use cairn_proto::frame::{self, HEADER_LEN};
use cairn_proto::{ClientMsg, DEFAULT_MAX_PAYLOAD, FLAG_END, PROTOCOL_VERSION, Request, ServerMsg};

trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

/// A connection to a daemon. One request at a time per client (open more clients for
/// concurrency); stream ids increase per request.
pub struct Client {
    r: BufReader<Box<dyn Conn>>,
    w: BufWriter<Box<dyn Conn>>,
    next_stream: u32,
    max_payload: u32,
    /// The server's name and version.
    pub server: String,
}

/// Where a daemon listens: a Unix socket path or `tcp://host:port`.
pub fn connect(addr: &str, token: Option<&str>) -> Result<Client> {
    if let Some(hostport) = addr.strip_prefix("tcp://") {
        let s = TcpStream::connect(hostport).with_context(|| format!("connecting to {hostport}"))?;
        s.set_nodelay(true)?;
        let r: Box<dyn Conn> = Box::new(s.try_clone()?);
        Client::handshake(r, Box::new(s), token)
    } else {
        connect_unix(Path::new(addr), token)
    }
}

/// Connects to a Unix socket.
pub fn connect_unix(path: &Path, token: Option<&str>) -> Result<Client> {
    let s = UnixStream::connect(path).with_context(|| format!("connecting to {}", path.display()))?;
    let r: Box<dyn Conn> = Box::new(s.try_clone()?);
    Client::handshake(r, Box::new(s), token)
}

impl Client {
    fn handshake(r: Box<dyn Conn>, w: Box<dyn Conn>, token: Option<&str>) -> Result<Client> {
        let mut c = Client {
            r: BufReader::with_capacity(128 << 10, r),
            w: BufWriter::with_capacity(64 << 10, w),
            next_stream: 1,
            max_payload: DEFAULT_MAX_PAYLOAD,
            server: String::new(),
        };
        let hello = ClientMsg::Hello {
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            client: format!("cairn {}", env!("CARGO_PKG_VERSION")),
            token: token.map(str::to_string),
        };
        c.send(0, &hello, true)?;
        c.w.flush()?;
        match c.recv()?.1 {
            ServerMsg::Welcome { server, max_payload, .. } => {
                c.server = server;
                c.max_payload = max_payload;
                Ok(c)
            }
            ServerMsg::Error { code, message } => bail!("daemon refused the connection ({code:?}): {message}"),
            other => bail!("unexpected answer to hello: {other:?}"),
        }
    }

    fn send(&mut self, stream: u32, m: &ClientMsg, end: bool) -> Result<()> {
        self.w.write_all(&m.to_frame(stream, end))?;
        Ok(())
    }

    /// Reads one frame: (is END, message).
    pub fn recv(&mut self) -> Result<(bool, ServerMsg)> {
        let mut header = [0u8; HEADER_LEN];
        self.r.read_exact(&mut header).context("the daemon closed the connection")?;
        let h = frame::decode_header(&header, DEFAULT_MAX_PAYLOAD.max(self.max_payload))?
            .ok_or_else(|| anyhow!("short header"))?;
        let mut payload = vec![0u8; h.len as usize];
        self.r.read_exact(&mut payload).context("truncated frame from the daemon")?;
        frame::check_payload(&header, &h, &payload)?;
        Ok((h.flags & FLAG_END != 0, ServerMsg::decode(&payload)?))
    }

    /// Starts a request; read its answer with [`Client::recv`] until an END frame.
    pub fn start(&mut self, req: Request) -> Result<u32> {
        let stream = self.next_stream;
        self.next_stream = self.next_stream.wrapping_add(1).max(1);
        self.send(stream, &ClientMsg::Request(req), true)?;
        self.w.flush()?;
        Ok(stream)
    }

    /// Sends input for a request (`end`: the last chunk).
    pub fn input(&mut self, stream: u32, chunk: &[u8], end: bool) -> Result<()> {
        let max = self.max_payload as usize - 16;
        let mut parts: Vec<&[u8]> = chunk.chunks(max).collect();
        if parts.is_empty() {
            parts.push(&[]);
        }
        let last = parts.len() - 1;
        for (i, p) in parts.into_iter().enumerate() {
            self.send(stream, &ClientMsg::Input(p.to_vec()), end && i == last)?;
        }
        self.w.flush()?;
        Ok(())
    }

    /// Asks the daemon to stop a request (its answer still ends with an END frame).
    pub fn cancel(&mut self, stream: u32) -> Result<()> {
        self.send(stream, &ClientMsg::Cancel, true)?;
        self.w.flush()?;
        Ok(())
    }

    /// A unary request: its one answer (an `Error` answer becomes an error).
    pub fn call(&mut self, req: Request) -> Result<ServerMsg> {
        self.start(req)?;
        let (end, m) = self.recv()?;
        if let ServerMsg::Error { code, message } = m {
            bail!("{message} ({code:?})");
        }
        if !end {
            bail!("expected one answer frame");
        }
        Ok(m)
    }

    /// A streaming request: every answer up to and including the END frame (an `Error`
    /// answer becomes an error).
    pub fn call_stream(&mut self, req: Request, mut each: impl FnMut(ServerMsg) -> Result<()>) -> Result<()> {
        self.start(req)?;
        loop {
            let (end, m) = self.recv()?;
            if let ServerMsg::Error { code, message } = m {
                bail!("{message} ({code:?})");
            }
            each(m)?;
            if end {
                return Ok(());
            }
        }
    }

    /// Runs one operation of the application layer in the daemon, streaming `input` (if any)
    /// as its standard input. `cwd`: the working directory relative paths are resolved against.
    pub fn execute(
        &mut self,
        req: &cairn::Request,
        cwd: Option<&Path>,
        input: Option<&mut dyn Read>,
    ) -> cairn::Result<cairn::Response> {
        let lost = |e: anyhow::Error| cairn::Error::internal(format!("daemon: {e:#}"));
        let request = serde_json::to_vec(req).map_err(|e| cairn::Error::internal(e.to_string()))?;
        let cwd = cwd.map(|c| c.to_string_lossy().into_owned());
        let stream = self.start(Request::Call { request, cwd, input: input.is_some() }).map_err(lost)?;
        if let Some(inp) = input {
            // Input is sent whole before the answer is read; the daemon reads it as it arrives.
            let mut buf = vec![0u8; 256 << 10];
            loop {
                let n = inp.read(&mut buf).map_err(|e| cairn::Error::io(Path::new("<stdin>"), e))?;
                self.input(stream, &buf[..n], n == 0).map_err(lost)?;
                if n == 0 {
                    break;
                }
            }
        }
        let mut json = Vec::new();
        loop {
            let (end, m) = self.recv().map_err(lost)?;
            match m {
                ServerMsg::Data(b) => json.extend_from_slice(&b),
                ServerMsg::Error { code, message } => {
                    return Err(cairn::Error::new(crate::error_kind(code), message));
                }
                other => return Err(cairn::Error::internal(format!("unexpected answer {other:?}"))),
            }
            if end {
                break;
            }
        }
        serde_json::from_slice(&json)
            .map_err(|e| cairn::Error::internal(format!("malformed answer from the daemon: {e}")))
    }

    /// Copies a document's content to `out`; returns its length.
    pub fn content(
        &mut self,
        doc: &str,
        version: Option<u32>,
        cwd: Option<&Path>,
        out: &mut dyn Write,
    ) -> cairn::Result<u64> {
        let lost = |e: anyhow::Error| cairn::Error::internal(format!("daemon: {e:#}"));
        let cwd = cwd.map(|c| c.to_string_lossy().into_owned());
        let stream = self.start(Request::Content { doc: doc.to_string(), version, cwd }).map_err(lost)?;
        let mut n = 0;
        loop {
            let (end, m) = self.recv().map_err(lost)?;
            match m {
                ServerMsg::Data(b) => {
                    if let Err(e) = out.write_all(&b) {
                        if e.kind() == io::ErrorKind::BrokenPipe {
                            // Our reader left: stop the request, drain to its end.
                            let _ = self.cancel(stream).and_then(|()| self.drain());
                        }
                        return Err(cairn::Error::io(Path::new("<stdout>"), e));
                    }
                    n += b.len() as u64;
                }
                ServerMsg::Error { code, message } => {
                    return Err(cairn::Error::new(crate::error_kind(code), message));
                }
                other => return Err(cairn::Error::internal(format!("unexpected answer {other:?}"))),
            }
            if end {
                return Ok(n);
            }
        }
    }

    fn drain(&mut self) -> Result<()> {
        loop {
            if self.recv()?.0 {
                return Ok(());
            }
        }
    }
}
