//! `cairn kv ...`: keys and values in the user keyspace (`--raw`: the whole engine, for
//! experts), engine statistics, compaction and checksums.

use std::path::PathBuf;

use cairn::Request;
use cairn::kv;
use cairn::text::Blob;
use clap::{Args, Subcommand};

/// Subcommands of `cairn kv`.
#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Set a key to a value.
    Put {
        /// The key.
        key: String,
        /// The value; `-` reads it from standard input.
        value: String,
        /// Do not wait for the write to reach the disk.
        #[arg(long)]
        no_sync: bool,
        #[command(flatten)]
        raw: Raw,
    },
    /// Print the value of a key (its bytes unchanged when stdout is not a terminal).
    Get {
        /// The key.
        key: String,
        #[command(flatten)]
        raw: Raw,
    },
    /// Delete a key.
    Delete {
        /// The key.
        key: String,
        #[command(flatten)]
        raw: Raw,
    },
    /// Delete every key in [START, END) of the user keyspace.
    DeleteRange {
        /// First key deleted.
        start: String,
        /// First key kept after the range.
        end: String,
        #[command(flatten)]
        raw: Raw,
    },
    /// List keys and values in order (escaped like `\xff` on the terminal).
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
        /// Last key first.
        #[arg(long)]
        reverse: bool,
        /// At most this many entries (default 1,000; 0: all).
        #[arg(long)]
        limit: Option<usize>,
        /// Print keys only.
        #[arg(long)]
        keys_only: bool,
        #[command(flatten)]
        raw: Raw,
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
    },
    /// Engine statistics.
    Stats,
    /// Compact everything to the bottom level.
    Compact,
    /// Reread every table and check every checksum.
    Verify,
}

/// `--raw`: the whole engine instead of the user keyspace.
#[derive(Args, Debug, Default)]
pub struct Raw {
    /// Work on the whole engine, not the user keyspace: the rows of the blob store, the
    /// documents, the trees and the tables are there too, and changing them can destroy them.
    /// For experts repairing a data directory by hand.
    #[arg(long)]
    raw: bool,
}

fn b(s: &str) -> Blob {
    Blob::of(s.as_bytes())
}

impl KvCommand {
    /// The request this command makes, and whether it reads standard input.
    pub fn plan(self) -> (Request, bool) {
        match self {
            KvCommand::Put { key, value, no_sync, raw } => {
                let stdin = value == "-";
                let value = (!stdin).then(|| b(&value));
                (Request::KvPut(kv::PutRequest { key: b(&key), value, no_sync, raw: raw.raw }), stdin)
            }
            KvCommand::Get { key, raw } => (Request::KvGet(kv::KeyRequest { key: b(&key), raw: raw.raw }), false),
            KvCommand::Delete { key, raw } => (Request::KvDelete(kv::KeyRequest { key: b(&key), raw: raw.raw }), false),
            KvCommand::DeleteRange { start, end, raw } => {
                (Request::KvDeleteRange(kv::DeleteRangeRequest { start: b(&start), end: b(&end), raw: raw.raw }), false)
            }
            KvCommand::Scan { prefix, start, end, reverse, limit, keys_only, raw } => (
                Request::KvScan(kv::ScanRequest {
                    prefix: prefix.as_deref().map(b),
                    start: start.as_deref().map(b),
                    end: end.as_deref().map(b),
                    reverse,
                    limit,
                    keys_only,
                    raw: raw.raw,
                }),
                false,
            ),
            KvCommand::Load { file, key_field, key_prefix, batch } => {
                (Request::KvLoad(kv::LoadRequest { file, key_field, key_prefix, batch }), false)
            }
            KvCommand::Stats => (Request::KvStats(Default::default()), false),
            KvCommand::Compact => (Request::KvCompact(Default::default()), false),
            KvCommand::Verify => (Request::KvVerify(Default::default()), false),
        }
    }
}
