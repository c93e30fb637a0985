//! `cairn-bench serve`: the daemon's framing cost against a plain length-prefixed exchange on a
//! Unix socket (the physical limit), and 1..64 clients adding documents, with failures counted
//! and the daemon's peak RSS. The mixed add/search/ls load is `cairn-bench mixed`
//! (`mixed_bench.rs`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, bail};

use cairn_server::client::{self, Client};

use crate::daemon::{Daemon, add};
use clap::Args;
use hdrhistogram::Histogram;

/// `cairn-bench serve` options.
#[derive(Args)]
pub struct ServeArgs {
    /// The `cairn` binary.
    #[arg(long, default_value = "target/release/cairn")]
    cairn: PathBuf,
    /// Seconds per framing measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Client counts for the add scaling run.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    clients: Vec<usize>,
    /// 1 KiB documents added by each client per scaling step.
    #[arg(long, default_value_t = 100)]
    per_client: usize,
    /// Repetitions of the framing measurements (medians are printed).
    #[arg(long, default_value_t = 3)]
    reps: usize,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// Runs `op` for `secs`; returns (ops/s, p50 us, p99 us).
fn timed(secs: f64, mut op: impl FnMut() -> Result<()>) -> Result<(f64, f64, f64)> {
    let mut h = hist();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        let t = Instant::now();
        op()?;
        h.record(t.elapsed().as_micros().max(1) as u64)?;
        n += 1;
    }
    Ok((n as f64 / start.elapsed().as_secs_f64(), h.value_at_quantile(0.5) as f64, h.value_at_quantile(0.99) as f64))
}

/// The physical limit: a thread answering a 4-byte request with `chunks` length-prefixed
/// buffers of `len` bytes over a Unix socket pair.
fn plain(secs: f64, chunks: u32, len: u32) -> Result<(f64, f64, f64)> {
    let (mut a, mut b) = UnixStream::pair()?;
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let mut req = [0u8; 8];
        let payload = vec![0x5au8; len as usize + 4];
        loop {
            if b.read_exact(&mut req).is_err() {
                return Ok(());
            }
            let chunks = u32::from_le_bytes(req[..4].try_into().expect("4"));
            let mut p = payload.clone();
            p[..4].copy_from_slice(&len.to_le_bytes());
            for _ in 0..chunks {
                b.write_all(&p)?;
            }
        }
    });
    let mut buf = vec![0u8; len as usize];
    let r = timed(secs, || {
        let mut req = [0u8; 8];
        req[..4].copy_from_slice(&chunks.to_le_bytes());
        a.write_all(&req)?;
        for _ in 0..chunks {
            let mut l = [0u8; 4];
            a.read_exact(&mut l)?;
            a.read_exact(&mut buf[..u32::from_le_bytes(l) as usize])?;
        }
        Ok(())
    });
    drop(a);
    let _ = server.join();
    r
}

fn echo(c: &mut Client, chunks: u32, len: u32) -> Result<()> {
    let mut got = 0;
    c.call_stream(cairn_proto::Request::Echo { chunks, chunk_len: len }, |m| {
        if let cairn_proto::ServerMsg::Data(d) = m {
            got += d.len();
        }
        Ok(())
    })?;
    if got != (chunks * len) as usize {
        bail!("echo returned {got} bytes");
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn doc(client: usize, i: usize) -> Vec<u8> {
    // 1 KiB of words, distinct per document.
    let mut s = format!("client {client} document {i} ");
    let words = ["alpha", "storage", "engine", "commit", "search", "memory", "vector", "index", "daemon", "frame"];
    let mut x = (client * 1_000_003 + i * 7919) as u64 | 1;
    while s.len() < 1024 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s += words[(x % words.len() as u64) as usize];
        s.push(' ');
    }
    s.truncate(1024);
    s.into_bytes()
}

/// Runs the benchmark.
pub fn run(a: ServeArgs) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let daemon = Daemon::start(&a.cairn, &tmp.path().join("data"))?;
    println!("framing (1 client, Unix socket, medians of {} x {:.0} s):", a.reps, a.seconds);
    println!("{:<38} {:>12} {:>10} {:>10} {:>12}", "exchange", "ops/s", "p50 us", "p99 us", "vs plain");
    let cases = [("unary 8 KiB response", 1u32, 8192u32), ("stream 10 chunks x 32 x 256 B", 10, 8192)];
    for (name, chunks, len) in cases {
        let mut c = daemon.client()?;
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        let (mut p50, mut p99) = (Vec::new(), Vec::new());
        for _ in 0..a.reps {
            let (o, q50, q99) = timed(a.seconds, || echo(&mut c, chunks, len))?;
            ours.push(o);
            p50.push(q50);
            p99.push(q99);
            base.push(plain(a.seconds, chunks, len)?.0);
        }
        let (o, b) = (median(ours), median(base));
        println!(
            "{:<38} {:>12.0} {:>10.0} {:>10.0} {:>11.2}x",
            format!("cairn {name}"),
            o,
            median(p50),
            median(p99),
            o / b
        );
        println!("{:<38} {:>12.0}", format!("plain length-prefixed {name}"), b);
    }

    println!("\nadds of 1 KiB documents, {} per client (each add durable):", a.per_client);
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11}",
        "clients", "docs/s", "p50 ms", "p95 ms", "p99 ms", "failures", "peak RSS"
    );
    let mut base = 0usize;
    for &n in &a.clients {
        // Every client connects first; the clock runs from when all of them may start adding.
        let ready = Arc::new(std::sync::Barrier::new(n + 1));
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let sock = daemon.sock.clone();
                let per = a.per_client;
                let id = base + k;
                let ready = ready.clone();
                std::thread::spawn(move || -> (Histogram<u64>, usize) {
                    let mut h = hist();
                    let mut failures = 0;
                    let c = client::connect_unix(&sock, None);
                    ready.wait();
                    let Ok(mut c) = c else { return (h, per) };
                    for i in 0..per {
                        let t = Instant::now();
                        match add(&mut c, vec![(format!("c{id}/d{i}"), doc(id, i))], vec![]) {
                            Ok(_) => {
                                let _ = h.record(t.elapsed().as_micros().max(1) as u64);
                            }
                            _ => failures += 1,
                        }
                    }
                    (h, failures)
                })
            })
            .collect();
        ready.wait();
        let start = Instant::now();
        let mut h = hist();
        let mut failures = 0;
        for j in handles {
            let (hh, f) = j.join().expect("client thread");
            h.add(hh)?;
            failures += f;
        }
        base += n;
        let secs = start.elapsed().as_secs_f64();
        let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
        println!(
            "{n:>8} {:>10.0} {:>10.2} {:>10.2} {:>10.2} {failures:>9} {:>8.0} MiB",
            h.len() as f64 / secs,
            q(0.5),
            q(0.95),
            q(0.99),
            daemon.peak_rss_mib()
        );
    }

    Ok(())
}
