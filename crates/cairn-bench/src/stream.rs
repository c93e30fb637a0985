//! The YCSB workloads and the op stream file: generated once per (workload, records, ops, value
//! size, seed) and replayed, unchanged, by every engine (the Rust ones and the Go peers).
//!
//! # Stream file format (version 1, little-endian)
//!
//! ```text
//! offset  size  field
//!      0     8  magic "CAIRNYCS"
//!      8     4  u32 format version (1)
//!     12     1  u8 workload letter, ASCII 'a'..='g'
//!     13     3  reserved, zero
//!     16     8  u64 seed
//!     24     8  u64 records: number of load-phase ops
//!     32     8  u64 ops: number of run-phase ops
//!     40     4  u32 value size in bytes
//!     44     4  u32 pool length P in bytes
//!     48    16  reserved, zero
//!     64     P  value pool: every written value is pool[off .. off + value size]
//!   64+P  16*n  op records, n = records + ops: the load phase, then the run phase
//!    end     4  u32 CRC32C (Castagnoli) of every byte before it
//!
//! op record (16 bytes):
//!      0     1  u8 kind: 1 insert, 2 read, 3 update, 4 scan, 5 read-modify-write
//!      1     1  u8 scan length (1..=100) for a scan, else 0
//!      2     2  reserved, zero
//!      4     4  u32 value offset into the pool for insert, update and read-modify-write, else 0
//!      8     8  u64 key number: the key is the ASCII bytes "user" followed by this number in
//!               decimal (YCSB's hashed insert order: the number is FNV-64 of the record ordinal)
//! ```
//!
//! The pool is built like db_bench's value generator: 100-byte pieces, each 50 random printable
//! bytes followed by the same 50 bytes again, so values compress to about half.
//!
//! With `T` threads, op `i` of a phase goes to thread `i % T` (round-robin).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};

use crate::generator::{Rng, ScrambledZipfian, SkewedLatest, key_number};

/// File magic.
pub const MAGIC: &[u8; 8] = b"CAIRNYCS";
/// File format version.
pub const VERSION: u32 = 1;
/// Header length in bytes.
pub const HEADER_LEN: u64 = 64;
/// Length of one op record in bytes.
pub const OP_LEN: usize = 16;
/// Longest scan YCSB workload E asks for.
pub const MAX_SCAN_LEN: u64 = 100;
/// Span of value offsets in the pool; the pool is this plus the value size.
pub const POOL_SPAN: u32 = 1 << 20;

/// A YCSB core workload (A–F) or G (insert only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workload {
    /// 50% read, 50% update, zipfian.
    A,
    /// 95% read, 5% update, zipfian.
    B,
    /// 100% read, zipfian.
    C,
    /// 95% read, 5% insert, latest.
    D,
    /// 95% scan of 1–100 keys, 5% insert, zipfian start keys.
    E,
    /// 50% read, 50% read-modify-write, zipfian.
    F,
    /// 100% insert.
    G,
}

/// Proportions of each op kind in a workload's run phase.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mix {
    /// Point reads.
    pub read: f64,
    /// Overwrites of existing keys.
    pub update: f64,
    /// New keys.
    pub insert: f64,
    /// Short forward scans.
    pub scan: f64,
    /// Read then overwrite of the same key.
    pub rmw: f64,
}

impl Workload {
    /// Every workload, in order.
    pub const ALL: [Workload; 7] =
        [Workload::A, Workload::B, Workload::C, Workload::D, Workload::E, Workload::F, Workload::G];

    /// The lower-case letter naming the workload.
    pub fn letter(self) -> char {
        match self {
            Workload::A => 'a',
            Workload::B => 'b',
            Workload::C => 'c',
            Workload::D => 'd',
            Workload::E => 'e',
            Workload::F => 'f',
            Workload::G => 'g',
        }
    }

    /// Parses a letter (either case).
    pub fn from_letter(c: char) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.letter() == c.to_ascii_lowercase())
    }

    /// The run-phase mix.
    pub fn mix(self) -> Mix {
        let m = Mix::default();
        match self {
            Workload::A => Mix { read: 0.5, update: 0.5, ..m },
            Workload::B => Mix { read: 0.95, update: 0.05, ..m },
            Workload::C => Mix { read: 1.0, ..m },
            Workload::D => Mix { read: 0.95, insert: 0.05, ..m },
            Workload::E => Mix { scan: 0.95, insert: 0.05, ..m },
            Workload::F => Mix { read: 0.5, rmw: 0.5, ..m },
            Workload::G => Mix { insert: 1.0, ..m },
        }
    }

    /// Whether requests follow the "latest" distribution (D) rather than scrambled zipfian.
    pub fn latest(self) -> bool {
        self == Workload::D
    }

    /// One line saying what the workload does.
    pub fn describe(self) -> &'static str {
        match self {
            Workload::A => "50% read / 50% update, zipfian",
            Workload::B => "95% read / 5% update, zipfian",
            Workload::C => "100% read, zipfian",
            Workload::D => "95% read / 5% insert, latest",
            Workload::E => "95% scan (1-100 keys) / 5% insert, zipfian",
            Workload::F => "50% read / 50% read-modify-write, zipfian",
            Workload::G => "100% insert",
        }
    }
}

/// What one op does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OpKind {
    /// Write a new key.
    Insert = 1,
    /// Point read.
    Read = 2,
    /// Overwrite an existing key.
    Update = 3,
    /// Forward scan of `scan_len` keys from the key.
    Scan = 4,
    /// Read the key, then overwrite it.
    ReadModifyWrite = 5,
}

impl OpKind {
    fn from_u8(b: u8) -> Option<OpKind> {
        Some(match b {
            1 => OpKind::Insert,
            2 => OpKind::Read,
            3 => OpKind::Update,
            4 => OpKind::Scan,
            5 => OpKind::ReadModifyWrite,
            _ => return None,
        })
    }
}

/// One op of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// What to do.
    pub kind: OpKind,
    /// Keys to scan (scans only).
    pub scan_len: u8,
    /// Offset of the value in the pool (writes only).
    pub value_off: u32,
    /// Key number; the key is `user<number>`.
    pub key: u64,
}

impl Op {
    /// The 16-byte record.
    pub fn encode(&self) -> [u8; OP_LEN] {
        let mut b = [0u8; OP_LEN];
        b[0] = self.kind as u8;
        b[1] = self.scan_len;
        b[4..8].copy_from_slice(&self.value_off.to_le_bytes());
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b
    }

    /// Parses a 16-byte record.
    pub fn decode(b: &[u8; OP_LEN]) -> Result<Op> {
        let kind = OpKind::from_u8(b[0]).with_context(|| format!("bad op kind {}", b[0]))?;
        let mut off = [0u8; 4];
        off.copy_from_slice(&b[4..8]);
        let mut key = [0u8; 8];
        key.copy_from_slice(&b[8..16]);
        Ok(Op { kind, scan_len: b[1], value_off: u32::from_le_bytes(off), key: u64::from_le_bytes(key) })
    }

    /// Whether the op writes a value.
    pub fn writes(&self) -> bool {
        matches!(self.kind, OpKind::Insert | OpKind::Update | OpKind::ReadModifyWrite)
    }
}

/// What a stream is generated from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The workload.
    pub workload: Workload,
    /// Records loaded before the run.
    pub records: u64,
    /// Ops in the run phase.
    pub ops: u64,
    /// Bytes per value.
    pub value_size: u32,
    /// PRNG seed.
    pub seed: u64,
}

impl Spec {
    /// The file name a stream of this spec is cached under.
    pub fn file_name(&self) -> String {
        format!(
            "ycsb-{}-r{}-o{}-v{}-s{}.stream",
            self.workload.letter(),
            self.records,
            self.ops,
            self.value_size,
            self.seed
        )
    }

    /// Pool length in bytes.
    pub fn pool_len(&self) -> u32 {
        POOL_SPAN + self.value_size
    }
}

/// Builds the value pool (db_bench style: half of every 100-byte piece repeats the other half).
pub fn build_pool(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ 0x706f_6f6c); // "pool"
    let mut pool = Vec::with_capacity(len + 100);
    while pool.len() < len {
        let start = pool.len();
        for _ in 0..50 {
            pool.push(b' ' + (rng.next_u64() % 95) as u8);
        }
        pool.extend_from_within(start..start + 50);
    }
    pool.truncate(len);
    pool
}

/// A `Write` that keeps a running CRC32C.
struct CrcWriter<W: Write> {
    inner: W,
    crc: u32,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Generates the stream for `spec` into `path` (written to a temporary name, then renamed).
pub fn generate(spec: &Spec, path: &Path) -> Result<()> {
    ensure!(spec.records > 0, "--records must be at least 1");
    ensure!(spec.value_size > 0, "--value-size must be at least 1");
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    let mut w = CrcWriter { inner: BufWriter::with_capacity(1 << 20, file), crc: 0 };

    let mut header = [0u8; HEADER_LEN as usize];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12] = spec.workload.letter() as u8;
    header[16..24].copy_from_slice(&spec.seed.to_le_bytes());
    header[24..32].copy_from_slice(&spec.records.to_le_bytes());
    header[32..40].copy_from_slice(&spec.ops.to_le_bytes());
    header[40..44].copy_from_slice(&spec.value_size.to_le_bytes());
    header[44..48].copy_from_slice(&spec.pool_len().to_le_bytes());
    w.write_all(&header)?;
    w.write_all(&build_pool(spec.pool_len() as usize, spec.seed))?;

    let mut value_rng = Rng::new(spec.seed ^ 0x7661_6c75_6573); // "values"
    let mut value_off = || value_rng.range_inclusive(0, POOL_SPAN as u64) as u32;

    // Load phase: records 0..records in order; their keys are hashed, so the key order is random.
    for i in 0..spec.records {
        let op = Op { kind: OpKind::Insert, scan_len: 0, value_off: value_off(), key: key_number(i) };
        w.write_all(&op.encode())?;
    }

    // Run phase, following YCSB's CoreWorkload.
    let mix = spec.workload.mix();
    let mut rng = Rng::new(spec.seed);
    // YCSB sizes the scrambled zipfian's item space for the inserts it expects (twice the
    // insert share of the ops), so the hot set does not move as the table grows; a choice past
    // the last inserted record is drawn again.
    let expected_new = (spec.ops as f64 * mix.insert * 2.0) as u64;
    let mut zipf = ScrambledZipfian::new(0, spec.records + expected_new);
    let mut latest = SkewedLatest::new(spec.records - 1);
    let mut next_insert = spec.records;
    let cumulative = [
        (OpKind::Read, mix.read),
        (OpKind::Update, mix.update),
        (OpKind::Insert, mix.insert),
        (OpKind::Scan, mix.scan),
        (OpKind::ReadModifyWrite, mix.rmw),
    ];
    for _ in 0..spec.ops {
        let mut u = rng.next_f64();
        let mut kind = OpKind::Read;
        for (k, p) in cumulative {
            if p <= 0.0 {
                continue;
            }
            kind = k;
            if u < p {
                break;
            }
            u -= p;
        }
        let op = if kind == OpKind::Insert {
            let ordinal = next_insert;
            next_insert += 1;
            Op { kind, scan_len: 0, value_off: value_off(), key: key_number(ordinal) }
        } else {
            let last = next_insert - 1;
            let ordinal = if spec.workload.latest() {
                latest.next(last, &mut rng)
            } else {
                loop {
                    let k = zipf.next(&mut rng);
                    if k <= last {
                        break k;
                    }
                }
            };
            let scan_len = if kind == OpKind::Scan { rng.range_inclusive(1, MAX_SCAN_LEN) as u8 } else { 0 };
            let off = if matches!(kind, OpKind::Update | OpKind::ReadModifyWrite) { value_off() } else { 0 };
            Op { kind, scan_len, value_off: off, key: key_number(ordinal) }
        };
        w.write_all(&op.encode())?;
    }
    let crc = w.crc;
    let mut inner = w.inner;
    inner.write_all(&crc.to_le_bytes())?;
    let file = inner.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Returns the stream of `spec` under `dir`, generating it if it is not there yet.
pub fn ensure_stream(spec: &Spec, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let path = dir.join(spec.file_name());
    if let Ok(s) = Stream::open(&path)
        && s.spec == *spec
    {
        return Ok(path);
    }
    generate(spec, &path)?;
    Ok(path)
}

/// An opened, checked stream file.
#[derive(Debug)]
pub struct Stream {
    /// Where it is.
    pub path: PathBuf,
    /// What it was generated from.
    pub spec: Spec,
    /// The value pool.
    pub pool: Vec<u8>,
}

/// A phase of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Initial inserts.
    Load,
    /// The workload's ops.
    Run,
}

impl Stream {
    /// Opens `path`, checks magic, version, sizes and the whole-file checksum, and reads the pool.
    pub fn open(path: &Path) -> Result<Stream> {
        let mut f = File::open(path).with_context(|| format!("open {}", path.display()))?;
        let len = f.metadata()?.len();
        ensure!(len >= HEADER_LEN + 4, "{}: too short for a stream", path.display());
        let mut header = [0u8; HEADER_LEN as usize];
        f.read_exact(&mut header)?;
        ensure!(&header[..8] == MAGIC, "{}: not a cairn-bench stream", path.display());
        let u32_at = |o: usize| u32::from_le_bytes([header[o], header[o + 1], header[o + 2], header[o + 3]]);
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&header[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(8);
        ensure!(version == VERSION, "{}: stream format version {version}, expected {VERSION}", path.display());
        let Some(workload) = Workload::from_letter(header[12] as char) else {
            bail!("{}: unknown workload byte {}", path.display(), header[12]);
        };
        let spec = Spec { workload, seed: u64_at(16), records: u64_at(24), ops: u64_at(32), value_size: u32_at(40) };
        let pool_len = u32_at(44);
        ensure!(pool_len == spec.pool_len(), "{}: pool length {pool_len} does not match", path.display());
        let expect = HEADER_LEN + pool_len as u64 + (spec.records + spec.ops) * OP_LEN as u64 + 4;
        ensure!(len == expect, "{}: {len} bytes, expected {expect}", path.display());

        // Whole-file checksum.
        f.seek(SeekFrom::Start(0))?;
        let mut r = BufReader::with_capacity(1 << 20, f);
        let mut crc = 0u32;
        let mut left = len - 4;
        let mut buf = vec![0u8; 1 << 20];
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            r.read_exact(&mut buf[..n])?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            left -= n as u64;
        }
        let mut stored = [0u8; 4];
        r.read_exact(&mut stored)?;
        ensure!(u32::from_le_bytes(stored) == crc, "{}: checksum mismatch", path.display());

        let mut f = r.into_inner();
        f.seek(SeekFrom::Start(HEADER_LEN))?;
        let mut pool = vec![0u8; pool_len as usize];
        f.read_exact(&mut pool)?;
        Ok(Stream { path: path.to_path_buf(), spec, pool })
    }

    /// The value written by `op`.
    pub fn value(&self, op: &Op) -> &[u8] {
        let off = op.value_off as usize;
        &self.pool[off..off + self.spec.value_size as usize]
    }

    /// Number of ops in `phase`.
    pub fn len(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Load => self.spec.records,
            Phase::Run => self.spec.ops,
        }
    }

    /// Reads thread `thread`'s share (ops `i` with `i % threads == thread`) of `phase`.
    pub fn reader(&self, phase: Phase, thread: usize, threads: usize) -> Result<OpReader> {
        let mut f = File::open(&self.path)?;
        let start = HEADER_LEN
            + self.pool.len() as u64
            + match phase {
                Phase::Load => 0,
                Phase::Run => self.spec.records * OP_LEN as u64,
            };
        f.seek(SeekFrom::Start(start))?;
        Ok(OpReader {
            r: BufReader::with_capacity(1 << 20, f),
            next: 0,
            end: self.len(phase),
            thread: thread as u64,
            threads: threads.max(1) as u64,
            pool_span: POOL_SPAN,
        })
    }
}

/// Iterates one thread's share of a phase.
pub struct OpReader {
    r: BufReader<File>,
    next: u64,
    end: u64,
    thread: u64,
    threads: u64,
    pool_span: u32,
}

impl Iterator for OpReader {
    type Item = Result<Op>;

    fn next(&mut self) -> Option<Result<Op>> {
        let mut b = [0u8; OP_LEN];
        while self.next < self.end {
            let i = self.next;
            self.next += 1;
            if let Err(e) = self.r.read_exact(&mut b) {
                return Some(Err(e.into()));
            }
            if i % self.threads == self.thread {
                return Some(Op::decode(&b).and_then(|op| {
                    ensure!(op.value_off <= self.pool_span, "value offset {} out of range", op.value_off);
                    Ok(op)
                }));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn spec(workload: Workload) -> Spec {
        Spec { workload, records: 2_000, ops: 5_000, value_size: 100, seed: 9 }
    }

    #[test]
    fn op_record_round_trip() {
        let op = Op { kind: OpKind::Scan, scan_len: 77, value_off: 0, key: u64::MAX - 3 };
        assert_eq!(Op::decode(&op.encode()).unwrap(), op);
        let mut bad = op.encode();
        bad[0] = 9;
        assert!(Op::decode(&bad).is_err());
    }

    #[test]
    fn stream_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        for w in Workload::ALL {
            let s = spec(w);
            let path = ensure_stream(&s, dir.path()).unwrap();
            let st = Stream::open(&path).unwrap();
            assert_eq!(st.spec, s);
            // Deterministic: a second generation is byte-identical.
            let again = dir.path().join("again");
            generate(&s, &again).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&again).unwrap());

            let load: Vec<Op> = st.reader(Phase::Load, 0, 1).unwrap().map(Result::unwrap).collect();
            assert_eq!(load.len() as u64, s.records);
            assert!(load.iter().all(|o| o.kind == OpKind::Insert));
            let loaded: HashSet<u64> = load.iter().map(|o| o.key).collect();
            assert_eq!(loaded.len() as u64, s.records, "load keys are distinct");

            let run: Vec<Op> = st.reader(Phase::Run, 0, 1).unwrap().map(Result::unwrap).collect();
            assert_eq!(run.len() as u64, s.ops);
            // Thread split: round-robin shares that together are the whole run.
            let t0: Vec<Op> = st.reader(Phase::Run, 0, 2).unwrap().map(Result::unwrap).collect();
            let t1: Vec<Op> = st.reader(Phase::Run, 1, 2).unwrap().map(Result::unwrap).collect();
            assert_eq!(t0.len() + t1.len(), run.len());
            assert_eq!(t0[1], run[2]);
            assert_eq!(t1[0], run[1]);

            // The mix is close to the workload's proportions, and non-inserts target existing keys.
            let mix = w.mix();
            let share = |k: OpKind| run.iter().filter(|o| o.kind == k).count() as f64 / run.len() as f64;
            assert!((share(OpKind::Read) - mix.read).abs() < 0.03, "{w:?} read share");
            assert!((share(OpKind::Insert) - mix.insert).abs() < 0.03, "{w:?} insert share");
            assert!((share(OpKind::Scan) - mix.scan).abs() < 0.03, "{w:?} scan share");
            assert!((share(OpKind::ReadModifyWrite) - mix.rmw).abs() < 0.03, "{w:?} rmw share");
            let mut known = loaded.clone();
            for o in &run {
                match o.kind {
                    OpKind::Insert => assert!(known.insert(o.key), "insert of an existing key"),
                    OpKind::Scan => assert!((1..=100).contains(&o.scan_len) && known.contains(&o.key)),
                    _ => assert!(known.contains(&o.key), "{w:?} op on a key never inserted"),
                }
                if o.writes() {
                    assert_eq!(st.value(o).len(), 100);
                }
            }
        }
    }

    #[test]
    fn corrupt_stream_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = ensure_stream(&spec(Workload::A), dir.path()).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 100] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Stream::open(&path).unwrap_err().to_string().contains("checksum"));
        std::fs::write(&path, &bytes[..n - 1]).unwrap();
        assert!(Stream::open(&path).is_err());
    }

    #[test]
    fn pool_is_half_compressible() {
        let pool = build_pool(10_000, 1);
        assert_eq!(pool.len(), 10_000);
        assert_eq!(pool[..50], pool[50..100]);
        assert!(pool.iter().all(|b| (b' '..=b'~').contains(b)));
    }
}
