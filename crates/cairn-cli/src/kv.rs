//! `cairn kv ...`: direct access to the key-value engine.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_kv::{Db, WriteBatch, WriteOptions};

use crate::ctx::Ctx;
use clap::Subcommand;
use serde_json::json;

/// Subcommands of `cairn kv`.
#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Set a key to a value.
    Put {
        /// The key (UTF-8).
        key: String,
        /// The value (UTF-8); `-` reads it from standard input.
        value: String,
        /// Do not wait for the write to reach the disk.
        #[arg(long)]
        no_sync: bool,
    },
    /// Print the value of a key.
    Get {
        /// The key.
        key: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a key.
    Delete {
        /// The key.
        key: String,
    },
    /// Delete every key in [START, END).
    DeleteRange {
        /// First key deleted.
        start: String,
        /// First key kept after the range.
        end: String,
    },
    /// List keys and values in order.
    Scan {
        /// Only keys with this prefix.
        #[arg(long)]
        prefix: Option<String>,
        /// Start at this key (inclusive).
        #[arg(long)]
        start: Option<String>,
        /// Stop before this key.
        #[arg(long)]
        end: Option<String>,
        /// Newest key first.
        #[arg(long)]
        reverse: bool,
        /// At most this many entries.
        #[arg(long)]
        limit: Option<usize>,
        /// Print keys only.
        #[arg(long)]
        keys_only: bool,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Load a JSON-lines file (optionally .gz), one record per line keyed by a field, then read
    /// every record back and scan them, printing what was done.
    Load {
        /// The file, e.g. ../shared/data/ir/corpus.jsonl.gz.
        file: PathBuf,
        /// Field holding each record's key.
        #[arg(long, default_value = "_id")]
        key_field: String,
        /// Prefix added to every key.
        #[arg(long, default_value = "")]
        key_prefix: String,
        /// Records per write batch.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Engine statistics.
    Stats {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Compact everything to the bottom level.
    Compact,
    /// Reread every table and check every checksum.
    Verify,
}

fn printable(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs one `kv` subcommand.
pub fn run(ctx: &mut Ctx, cmd: KvCommand, out: &mut dyn Write) -> Result<()> {
    let db = ctx.db()?;
    match cmd {
        KvCommand::Put { key, value, no_sync } => {
            let value = if value == "-" {
                let mut v = Vec::new();
                ctx.input.read_to_end(&mut v)?;
                v
            } else {
                value.into_bytes()
            };
            let mut b = WriteBatch::new();
            b.put(key.as_bytes(), &value)?;
            db.write_opt(b, WriteOptions { sync: !no_sync })?;
        }
        KvCommand::Get { key, json } => match db.get(key.as_bytes())? {
            Some(v) if json => writeln!(out, "{}", json!({ "key": key, "value": printable(&v) }))?,
            Some(v) => {
                out.write_all(&v)?;
                writeln!(out)?;
            }
            None => bail!("key {key:?} not found"),
        },
        KvCommand::Delete { key } => db.delete(key.as_bytes())?,
        KvCommand::DeleteRange { start, end } => db.delete_range(start.as_bytes(), end.as_bytes())?,
        KvCommand::Scan { prefix, start, end, reverse, limit, keys_only, json } => {
            let it = match (&prefix, &start, &end) {
                (Some(p), None, None) => db.prefix(p.as_bytes()),
                (None, s, e) => {
                    let lo = s.as_ref().map(|s| s.as_bytes().to_vec());
                    let hi = e.as_ref().map(|e| e.as_bytes().to_vec());
                    let lo = lo.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Included);
                    let hi = hi.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
                    db.range::<Vec<u8>, _>((lo, hi))
                }
                _ => bail!("--prefix cannot be combined with --start/--end"),
            };
            let it: Box<dyn Iterator<Item = cairn_kv::Result<cairn_kv::KvPair>>> =
                if reverse { Box::new(it.rev()) } else { Box::new(it) };
            for item in it.take(limit.unwrap_or(usize::MAX)) {
                let (k, v) = item?;
                match (json, keys_only) {
                    (true, true) => writeln!(out, "{}", json!({ "key": printable(&k) }))?,
                    (true, false) => writeln!(out, "{}", json!({ "key": printable(&k), "value": printable(&v) }))?,
                    (false, true) => writeln!(out, "{}", printable(&k))?,
                    (false, false) => writeln!(out, "{}\t{}", printable(&k), printable(&v))?,
                }
            }
        }
        KvCommand::Load { file, key_field, key_prefix, batch, json } => {
            load(&db, &ctx.abs(&file), &key_field, &key_prefix, batch.max(1), json, out)?
        }
        KvCommand::Stats { json } => print_stats(&db, json, out)?,
        KvCommand::Compact => db.compact_all()?,
        KvCommand::Verify => {
            let n = db.verify()?;
            writeln!(out, "verified {n} table entries: every block checksum matches")?;
        }
    }
    Ok(())
}

fn reader(file: &Path) -> Result<Box<dyn BufRead>> {
    let f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    Ok(if file.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::GzDecoder::new(f)))
    } else {
        Box::new(BufReader::new(f))
    })
}

fn load(
    db: &Db,
    file: &Path,
    key_field: &str,
    key_prefix: &str,
    batch_size: usize,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let t0 = Instant::now();
    let mut keys = Vec::new();
    let mut bytes = 0u64;
    let mut batch = WriteBatch::new();
    for (n, line) in reader(file)?.lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", file.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{}:{}: not JSON", file.display(), n + 1))?;
        let id = match rec.get(key_field) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) if !v.is_null() => v.to_string(),
            _ => bail!("{}:{}: no field {key_field:?}", file.display(), n + 1),
        };
        let key = format!("{key_prefix}{id}");
        batch.put(key.as_bytes(), line.as_bytes())?;
        bytes += (key.len() + line.len()) as u64;
        keys.push(key);
        if batch.len() >= batch_size {
            db.write(std::mem::take(&mut batch))?;
        }
    }
    db.write(batch)?;
    let load_time = t0.elapsed();

    let t1 = Instant::now();
    let mut found = 0usize;
    for k in &keys {
        if db.get(k.as_bytes())?.is_some() {
            found += 1;
        }
    }
    let get_time = t1.elapsed();
    let t2 = Instant::now();
    let scanned = db.prefix(key_prefix.as_bytes()).try_fold(0usize, |n, r| r.map(|_| n + 1))?;
    let scan_time = t2.elapsed();
    if found != keys.len() {
        bail!("read back {found} of {} records", keys.len());
    }
    let s = db.stats();
    let rate = |n: usize, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-9);
    if json {
        writeln!(
            out,
            "{}",
            json!({
                "file": file.display().to_string(), "records": keys.len(), "bytes": bytes,
                "load_secs": load_time.as_secs_f64(), "get_secs": get_time.as_secs_f64(),
                "scan_secs": scan_time.as_secs_f64(), "scanned": scanned,
                "wal_bytes": s.wal_bytes_written, "table_bytes": s.table_bytes(),
            })
        )?;
    } else {
        writeln!(
            out,
            "loaded {} records ({:.1} MiB) from {} in {:.2?} ({:.0} records/s, durable batches of {batch_size})",
            keys.len(),
            bytes as f64 / (1 << 20) as f64,
            file.display(),
            load_time,
            rate(keys.len(), load_time)
        )?;
        writeln!(out, "read back all {found} records by key in {get_time:.2?} ({:.0} gets/s)", rate(found, get_time))?;
        writeln!(
            out,
            "scanned {scanned} keys under prefix {key_prefix:?} in {scan_time:.2?} ({:.0} keys/s)",
            rate(scanned, scan_time)
        )?;
        writeln!(
            out,
            "engine: last sequence {}, memtable {} KiB, {} tables",
            s.last_seq,
            s.memtable_bytes >> 10,
            s.levels.iter().map(|l| l.tables).sum::<usize>()
        )?;
    }
    Ok(())
}

fn print_stats(db: &Db, json: bool, out: &mut dyn Write) -> Result<()> {
    let s = db.stats();
    if json {
        let levels: Vec<_> = s.levels.iter().map(|l| json!({ "tables": l.tables, "bytes": l.bytes })).collect();
        writeln!(
            out,
            "{}",
            json!({
                "levels": levels, "memtable_bytes": s.memtable_bytes, "immutable_memtables": s.immutable_memtables,
                "last_seq": s.last_seq, "range_tombstones": s.range_tombstones,
                "block_cache_bytes": s.block_cache_bytes, "snapshots": s.snapshots,
            })
        )?;
        return Ok(());
    }
    writeln!(out, "level  tables  bytes")?;
    for (i, l) in s.levels.iter().enumerate() {
        writeln!(out, "L{i:<5} {:>6}  {}", l.tables, l.bytes)?;
    }
    writeln!(out, "memtable: {} bytes, {} frozen", s.memtable_bytes, s.immutable_memtables)?;
    writeln!(out, "last sequence: {}", s.last_seq)?;
    writeln!(out, "range tombstones: {}", s.range_tombstones)?;
    writeln!(out, "block cache: {} bytes", s.block_cache_bytes)?;
    Ok(())
}
