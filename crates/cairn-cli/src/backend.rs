//! Where a command runs: embedded on the data directory (the application layer in this
//! process), or in the daemon serving it (`--remote`, `--addr`, or automatically when the data
//! directory's socket answers). Either way a command is one [`cairn::Request`] and its answer
//! one [`cairn::Response`].

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cairn::{Access, Cairn, Call, Error, Progress, Request, Response};
use cairn_server::client::{self, Client};

/// An embedded application layer or a daemon connection.
pub enum Backend {
    /// In this process.
    Local(Cairn),
    /// In a daemon.
    Remote(Box<Client>),
}

impl Backend {
    /// The daemon to use, if any: `--addr`, else the data directory's socket (required with
    /// `--remote`; used when it answers otherwise); else the data directory embedded.
    pub fn connect(data: &Path, remote: bool, addr: Option<&str>) -> cairn::Result<Backend> {
        if let Some(a) = addr {
            // Only TCP daemons check the token; the socket's file mode guards the Unix socket.
            let token = std::env::var("CAIRN_TOKEN").ok().filter(|t| !t.is_empty());
            let c = client::connect(a, token.as_deref()).map_err(|e| Error::new(kind_of(&e), format!("{e:#}")))?;
            return Ok(Backend::Remote(Box::new(c)));
        }
        let sock = cairn::Layout::new(data).socket();
        if remote && !sock.exists() {
            return Err(Error::not_found(format!(
                "no daemon serves {} (start one with `cairn serve`)",
                data.display()
            )));
        }
        if sock.exists() {
            match client::connect_unix(&sock, None) {
                Ok(c) => return Ok(Backend::Remote(Box::new(c))),
                // A socket left by a daemon that was killed: nobody listens.
                Err(e) if !remote && is_gone(&e) => {}
                Err(e) => return Err(Error::internal(format!("{e:#}"))),
            }
        }
        Ok(Backend::Local(Cairn::open(data)?))
    }

    /// Runs one request. `input`: its standard input, if it reads one; `progress`: where
    /// progress goes (embedded only).
    pub fn execute<'a>(
        &mut self,
        req: Request,
        input: Option<&'a mut (dyn Read + Send)>,
        progress: Option<&'a (dyn Fn(Progress) + Sync)>,
    ) -> cairn::Result<Response> {
        let cwd = std::env::current_dir().ok();
        match self {
            Backend::Local(c) => c.execute(req, &mut Call { access: Access::full(), cwd, input, progress }),
            Backend::Remote(client) => client.execute(&req, cwd.as_deref(), input.map(|r| r as &mut dyn Read)),
        }
    }

    /// Copies a version of a document's content to `out`.
    pub fn content(&mut self, doc: &str, version: Option<u32>, out: &mut dyn Write) -> cairn::Result<u64> {
        let cwd = std::env::current_dir().ok();
        match self {
            Backend::Local(c) => {
                let call = Call { access: Access::full(), cwd, input: None, progress: None };
                let (_, _, mut r) = c.content_reader(doc, version, &call)?;
                copy(&mut r, out, doc)
            }
            Backend::Remote(client) => client.content(doc, version, cwd.as_deref(), out),
        }
    }

    /// Warnings the embedded layers left (a discarded log tail, a rebuilt index).
    pub fn warnings(&self) -> Vec<String> {
        match self {
            Backend::Local(c) => c.take_warnings(),
            Backend::Remote(_) => Vec::new(),
        }
    }

    /// Ends an embedded command: commits, uploads, closes the engine.
    pub fn finish(self) -> cairn::Result<()> {
        match self {
            Backend::Local(c) => c.close(),
            Backend::Remote(_) => Ok(()),
        }
    }
}

/// Copies `r` to `out`; read errors keep the blob store's kind (a damaged chunk is `corrupt`).
fn copy(r: &mut dyn Read, out: &mut dyn Write, what: &str) -> cairn::Result<u64> {
    let mut buf = vec![0u8; 256 << 10];
    let mut n = 0;
    loop {
        let k = r.read(&mut buf).map_err(|e| Error::from_io_chain(what, e))?;
        if k == 0 {
            return Ok(n);
        }
        out.write_all(&buf[..k]).map_err(|e| Error::io(Path::new("<stdout>"), e))?;
        n += k as u64;
    }
}

fn is_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| matches!(io.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound))
    })
}

fn kind_of(e: &anyhow::Error) -> cairn::ErrorKind {
    let text = format!("{e:#}");
    if text.contains("Unauthorized") { cairn::ErrorKind::Unauthorized } else { cairn::ErrorKind::Internal }
}

/// The data directory argument's absolute form, for messages.
pub fn shown(data: &Path) -> PathBuf {
    cairn::absolute(&std::env::current_dir().unwrap_or_default(), data)
}
