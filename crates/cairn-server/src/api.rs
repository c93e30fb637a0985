//! Requests, run on the blocking pool: each one operation of the application layer.

use std::io::{self, Read};
use std::path::PathBuf;

use cairn::{Access, Call, Error};
use cairn_proto::{Request, ServerMsg};
use tokio::sync::mpsc;

use crate::Shared;
use crate::ipc::Sink;

/// Bytes per `Data` frame.
pub const CHUNK: usize = 64 << 10;

pub fn handle(shared: &Shared, access: &Access, req: Request, sink: &Sink, input: Option<mpsc::Receiver<Vec<u8>>>) {
    if let Err(e) = run(shared, access, req, sink, input) {
        sink.fail(crate::error_code(e.kind()), e.to_string());
    }
}

fn send_err(e: io::Error) -> Error {
    Error::internal(format!("sending the answer: {e}"))
}

fn run(
    shared: &Shared,
    access: &Access,
    req: Request,
    sink: &Sink,
    input: Option<mpsc::Receiver<Vec<u8>>>,
) -> cairn::Result<()> {
    match req {
        Request::Ping => sink.send(&ServerMsg::Pong, true).map_err(send_err),
        Request::Echo { chunks, chunk_len } => {
            let len = (chunk_len as usize).min(shared.config.max_payload as usize - 16);
            let data = vec![0x5a; len];
            let n = chunks.clamp(1, 1 << 20);
            for i in 0..n {
                sink.send(&ServerMsg::Data(data.clone()), i + 1 == n).map_err(send_err)?;
            }
            Ok(())
        }
        Request::Call { request, cwd, input: _ } => {
            let req: cairn::Request =
                serde_json::from_slice(&request).map_err(|e| Error::bad_request(format!("malformed request: {e}")))?;
            let mut reader = input.map(|rx| InputReader { rx, buf: Vec::new(), pos: 0 });
            let mut call = Call {
                access: access.clone(),
                cwd: cwd.map(PathBuf::from),
                input: reader.as_mut().map(|r| r as &mut (dyn Read + Send)),
                progress: None,
            };
            let res = shared.cairn.execute(req, &mut call)?;
            // On the wire the response keeps its variant name, so it decodes into its type.
            let bytes = serde_json::to_vec(&res).map_err(|e| Error::internal(e.to_string()))?;
            send_chunks(sink, &bytes)
        }
        Request::Content { doc, version, cwd } => {
            let call = Call { access: access.clone(), cwd: cwd.map(PathBuf::from), input: None, progress: None };
            let (_, _, mut r) = shared.cairn.content_reader(&doc, version, &call)?;
            loop {
                // A short chunk is the end; content of a whole number of chunks ends with an
                // empty END frame.
                let mut chunk = Vec::with_capacity(CHUNK);
                (&mut r).take(CHUNK as u64).read_to_end(&mut chunk).map_err(|e| Error::from_io_chain(&doc, e))?;
                let end = chunk.len() < CHUNK;
                sink.send(&ServerMsg::Data(chunk), end).map_err(send_err)?;
                if end {
                    return Ok(());
                }
            }
        }
    }
}

/// Sends `bytes` as `Data` frames, the last flagged END.
fn send_chunks(sink: &Sink, bytes: &[u8]) -> cairn::Result<()> {
    let mut parts = bytes.chunks(CHUNK).peekable();
    if parts.peek().is_none() {
        return sink.send(&ServerMsg::Data(Vec::new()), true).map_err(send_err);
    }
    while let Some(p) = parts.next() {
        sink.send(&ServerMsg::Data(p.to_vec()), parts.peek().is_none()).map_err(send_err)?;
    }
    Ok(())
}

/// Standard input of a request: chunks the client streams.
struct InputReader {
    rx: mpsc::Receiver<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for InputReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            match self.rx.blocking_recv() {
                Some(b) => {
                    self.buf = b;
                    self.pos = 0;
                }
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
