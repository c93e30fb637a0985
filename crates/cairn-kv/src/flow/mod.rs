//! Flow control: when writers go, wait or are slowed, and how fast compactions may write. One
//! policy in one place, in the manner of RocksDB's `WriteController` and fjall's
//! backpressure: pure functions from a snapshot of what they depend on (level 0's tables and
//! bytes, the memtables waiting for flush, the running level-0 merge and how far it got, the
//! device's latency) to a decision. The write path (`crate::db::write`) and compactions
//! (`crate::compaction::output`) take the snapshot and obey.
//!
//! - [`writers`]: a write group's next step ([`writers::WriterView::step`]: go, switch the
//!   memtable, slow down, stop), the rate a slowed writer is held to, and the delay it owes.
//! - [`pacer`]: how long a compaction or flush waits after writing a chunk
//!   ([`pacer::PaceView::decide`] says whether it waits and on which latency;
//!   [`pacer::Control`] turns that latency into a rate).
//!
//! It imports nothing of the engine but [`crate::Options`]; the reasoning and runs behind
//! its rules are in `docs/design/2026-12-07-flow-control.md`.

pub mod pacer;
pub mod writers;
