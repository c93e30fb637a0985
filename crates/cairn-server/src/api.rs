//! Requests executed on the blocking pool.

use std::io::{self, Read, Write};
use std::path::PathBuf;

use cairn_docs::{AddOptions, AddStatus, DocRecord, NewDoc, QueryMode, SearchOptions};
use cairn_proto::{DocInfo, ErrorCode, Request, ServerMsg};
use tokio::sync::mpsc;

use crate::ipc::Sink;
use crate::{CliIo, Shared};

/// Bytes per `Data`/`Stdout` frame.
pub const CHUNK: usize = 64 << 10;

pub fn handle(shared: &Shared, req: Request, sink: &Sink, input: Option<mpsc::Receiver<Vec<u8>>>) {
    let r = match req {
        Request::Cli { args, cwd, tty, .. } => {
            let reader: Box<dyn Read + Send> = match input {
                Some(rx) => Box::new(InputReader { rx, buf: Vec::new(), pos: 0 }),
                None => Box::new(io::empty()),
            };
            let io = CliIo {
                cwd: PathBuf::from(cwd),
                input: reader,
                out: Box::new(ChunkWriter::new(sink.clone(), false)),
                err: Box::new(ChunkWriter::new(sink.clone(), true)),
                tty,
            };
            let code = shared.cli.run(args, io);
            if sink.cancelled() {
                Err(io::Error::new(io::ErrorKind::Interrupted, "cancelled").into())
            } else {
                sink.send(&ServerMsg::Exit(code), true).map_err(Into::into)
            }
        }
        other => typed(shared, other, sink),
    };
    if let Err(e) = r {
        let code = match e.downcast_ref::<cairn_docs::Error>() {
            Some(cairn_docs::Error::NotFound(_) | cairn_docs::Error::NoVersion(..)) => ErrorCode::NotFound,
            Some(cairn_docs::Error::InvalidArgument(_) | cairn_docs::Error::Query(_)) => ErrorCode::BadRequest,
            _ => ErrorCode::Internal,
        };
        sink.fail(code, format!("{e:#}"));
    }
}

/// The wire form of a document.
pub fn doc_info(d: &DocRecord) -> DocInfo {
    DocInfo {
        id: d.id,
        path: d.path.clone(),
        version: d.version,
        size: d.size,
        mime: d.mime.clone(),
        title: d.title.clone(),
        updated: d.updated,
        tags: d.tags.iter().cloned().collect(),
        meta: d.meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    }
}

/// The library form of a wire filter.
pub fn filter(f: cairn_proto::Filter) -> cairn_docs::Filter {
    cairn_docs::Filter { tags: f.tags, meta: f.meta, path_glob: f.path_glob, since: f.since, until: f.until }
}

/// Status word of an add.
pub fn status_word(s: AddStatus) -> &'static str {
    match s {
        AddStatus::Added => "added",
        AddStatus::NewVersion => "new-version",
        AddStatus::Unchanged => "unchanged",
    }
}

fn typed(shared: &Shared, req: Request, sink: &Sink) -> anyhow::Result<()> {
    let m = &shared.services.memory;
    match req {
        Request::Ping => sink.send(&ServerMsg::Pong, true)?,
        Request::Echo { chunks, chunk_len } => {
            let len = (chunk_len as usize).min(shared.config.max_payload as usize - 16);
            let data = vec![0x5a; len];
            let n = chunks.clamp(1, 1 << 20);
            for i in 0..n {
                sink.send(&ServerMsg::Data(data.clone()), i + 1 == n)?;
            }
        }
        Request::Add { path, content, tags, meta } => {
            let added = m.add(vec![NewDoc { path, content }], &AddOptions { tags, meta })?;
            let a = added.into_iter().next().ok_or_else(|| anyhow::anyhow!("add returned nothing"))?;
            sink.send(&ServerMsg::Added { doc: doc_info(&a.doc), status: status_word(a.status).into() }, true)?;
        }
        Request::Search { query, limit, offset, words, snippets, filter: f } => {
            let opts = SearchOptions {
                limit: limit as usize,
                offset: offset as usize,
                filter: filter(f),
                mode: if words { QueryMode::Words } else { QueryMode::Syntax },
                snippets,
            };
            let res = m.search(&query, &opts)?;
            for h in &res.hits {
                let (snippet, highlights) = match &h.snippet {
                    Some(s) => {
                        (Some(s.text.clone()), s.highlights.iter().map(|r| (r.start as u32, r.end as u32)).collect())
                    }
                    None => (None, Vec::new()),
                };
                sink.send(&ServerMsg::Hit { score: h.score, doc: doc_info(&h.doc), snippet, highlights }, false)?;
            }
            sink.send(&ServerMsg::Done { total: res.total as u64 }, true)?;
        }
        Request::Ls { filter: f } => {
            let docs = m.list(&filter(f))?;
            for d in &docs {
                sink.send(&ServerMsg::Doc(doc_info(d)), false)?;
            }
            sink.send(&ServerMsg::Done { total: docs.len() as u64 }, true)?;
        }
        Request::Get { path, version } => {
            let mut r = m.reader(&path, version)?;
            loop {
                // A short chunk is the end; content of a whole number of chunks ends with an
                // empty END frame.
                let mut chunk = Vec::with_capacity(CHUNK);
                (&mut r).take(CHUNK as u64).read_to_end(&mut chunk)?;
                let end = chunk.len() < CHUNK;
                sink.send(&ServerMsg::Data(chunk), end)?;
                if end {
                    break;
                }
            }
        }
        Request::Cli { .. } => unreachable!("handled by the caller"),
    }
    Ok(())
}

/// Standard input of a daemon-run command: chunks the client streams.
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

/// Standard output or error of a daemon-run command, sent in chunks.
struct ChunkWriter {
    sink: Sink,
    err: bool,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn new(sink: Sink, err: bool) -> ChunkWriter {
        ChunkWriter { sink, err, buf: Vec::new() }
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.sink.cancelled() {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "client cancelled or disconnected"));
        }
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK || self.err {
            self.flush()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let b = std::mem::take(&mut self.buf);
        let msg = if self.err { ServerMsg::Stderr(b) } else { ServerMsg::Stdout(b) };
        self.sink.send(&msg, false).map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e))
    }
}

impl Drop for ChunkWriter {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}
