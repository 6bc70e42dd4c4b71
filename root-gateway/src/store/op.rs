//! Store mutations as values: what the write-ahead log records and replays.
//!
//! The [`LiveStore`](super::LiveStore) is deterministic: applying the same
//! [`Op`]s in the same order to the same state gives the same state. So a
//! snapshot plus the ops logged after it rebuild exactly what the store held,
//! retention and source deadlines included ([`Op::Maintain`] is logged too).

use super::{Appender, Labels, LiveStore, StoreError};

/// One mutation of the store.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// [`Appender::append`].
    Append {
        /// Producing node for change-only data; `None` for explicit samples.
        source: Option<String>,
        /// The series.
        labels: Labels,
        /// Sample time, ms.
        ts_ms: i64,
        /// Value.
        value: f64,
    },
    /// [`Appender::heartbeat`].
    Heartbeat {
        /// The node.
        source: String,
        /// Heartbeat time, ms.
        ts_ms: i64,
        /// The node's tick, ms.
        tick_ms: u32,
    },
    /// [`Appender::retire`].
    Retire {
        /// The series.
        labels: Labels,
        /// Retirement time, ms.
        ts_ms: i64,
    },
    /// [`LiveStore::maintain`].
    Maintain {
        /// The caller's clock, ms.
        now_ms: i64,
    },
}

impl Op {
    /// Applies the op to `store`.
    pub fn apply(&self, store: &mut LiveStore) -> Result<(), StoreError> {
        match self {
            Op::Append {
                source,
                labels,
                ts_ms,
                value,
            } => store.append(source.as_deref(), labels, *ts_ms, *value),
            Op::Heartbeat {
                source,
                ts_ms,
                tick_ms,
            } => {
                store.heartbeat(source, *ts_ms, *tick_ms);
                Ok(())
            }
            Op::Retire { labels, ts_ms } => {
                store.retire(labels, *ts_ms);
                Ok(())
            }
            Op::Maintain { now_ms } => {
                store.maintain(*now_ms);
                Ok(())
            }
        }
    }
}

/// Where a [`SharedStore`](super::SharedStore) records its ops before
/// applying them (the write-ahead log). Implementations do the I/O; the
/// store only calls them, always with its journal lock held, so the order
/// of logged ops is the order of applied ops.
pub trait Journal: Send {
    /// Records `ops`; they are applied only if this returns `Ok`. When it
    /// returns, a crash of the process (not of the machine) must not lose them.
    fn log(&mut self, ops: &[Op]) -> Result<(), StoreError>;

    /// Once per tick, with the store read-locked: sync to disk per the
    /// configured policy and checkpoint (snapshot `store`, drop old log) when due.
    fn tick(&mut self, store: &LiveStore) -> Result<(), StoreError>;
}
