//! [`Lead`]: what the lead step of a write group holds, one group at a time.

use crate::flow::writers::SlowdownDebt;
use crate::wal::Wal;

/// What a group's lead step holds while it runs (one group at a time, under
/// `DbInner::lead`): the write-ahead log in use, and the delay writes owe while level 0 holds
/// them to a rate.
pub(crate) struct Lead {
    /// The write-ahead log in use and the logs on either side of it.
    pub wal: Wal,
    /// Delay owed by writes made while level 0 is over its slowdown trigger, not yet slept.
    pub slowdown: SlowdownDebt,
}

impl Lead {
    /// The lead state of a database writing into `wal`.
    pub fn new(wal: Wal) -> Lead {
        Lead { wal, slowdown: SlowdownDebt::default() }
    }
}
