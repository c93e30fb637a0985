//! What a write is made of before the engine takes it: the [`batch::WriteBatch`], the queue
//! that forms groups of concurrent writes and elects each group's leader ([`queue`]), the
//! sequence numbers groups take and publish in order ([`sequences`]), and the state the lead
//! step holds one group at a time ([`lead`]). The two steps that write a group into the log
//! and the memtable run on the engine's state and live with it, in `crate::db::write`.

pub mod batch;
pub mod lead;
pub mod queue;
pub mod sequences;
