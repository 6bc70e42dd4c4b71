//! Store mutations as values: what the write-ahead log records and replays.
//!
//! The [`LiveStore`](super::LiveStore) is deterministic: applying the same
//! [`Op`]s in the same order to the same state gives the same state. So a
//! snapshot plus the ops logged after it rebuild exactly what the store held,
//! retention and source deadlines included ([`Op::Maintain`] is logged too).

use super::{Appender, Labels, LiveStore, Sample, SeriesHint, StoreError};

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
    /// Explicit samples (remote_write) of one series, oldest first: the
    /// labels are resolved once for the whole batch, and the log writes
    /// them once per segment, then the samples by reference.
    Samples {
        /// The series.
        labels: Labels,
        /// The samples.
        samples: Vec<Sample>,
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
    /// Samples this op appends (0 for ops that append none).
    pub fn samples(&self) -> usize {
        match self {
            Op::Append { .. } => 1,
            Op::Samples { samples, .. } => samples.len(),
            _ => 0,
        }
    }

    /// Applies the op to `store`; the first refused sample is the error.
    pub fn apply(&self, store: &mut LiveStore) -> Result<(), StoreError> {
        let mut first = None;
        self.apply_each(store, &mut |_, r| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        });
        first.map_or(Ok(()), Err)
    }

    /// Applies the op to `store`, reporting each appended sample's result
    /// (by its index in the op) to `f`; other ops report once, as index 0.
    pub fn apply_each(
        &self,
        store: &mut LiveStore,
        f: &mut dyn FnMut(usize, Result<(), StoreError>),
    ) {
        if let Op::Samples { labels, samples } = self {
            store.append_samples(labels, samples, f);
            return;
        }
        f(0, self.apply_one(store));
    }

    fn apply_one(&self, store: &mut LiveStore) -> Result<(), StoreError> {
        match self {
            Op::Samples { .. } => Ok(()),
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

/// A checkpoint whose consistent cut of the store was taken under the
/// locks; running it writes the snapshot and drops the log it covers with
/// no lock held, so ingest goes on meanwhile.
pub type PendingCheckpoint = Box<dyn FnOnce() -> Result<(), StoreError> + Send>;

/// Where a [`SharedStore`](super::SharedStore) records its ops before
/// applying them (the write-ahead log). Implementations do the I/O; the
/// store only calls them, always with its journal lock held, so the order
/// of logged ops is the order of applied ops.
pub trait Journal: Send {
    /// Records `ops`; they are applied only if this returns `Ok`. When it
    /// returns, a crash of the process (not of the machine) must not lose them.
    fn log(&mut self, ops: &[Op]) -> Result<(), StoreError>;

    /// [`Journal::log`] with a [`SeriesHint`] per op (`hints[i]` for
    /// `ops[i]`, missing ones unknown), each filled by the store for that
    /// op's label set: a journal may use them to find its own reference to
    /// the series without looking at the labels. Same guarantees as `log`.
    fn log_hinted(&mut self, ops: &[Op], hints: &[SeriesHint]) -> Result<(), StoreError> {
        let _ = hints;
        self.log(ops)
    }

    /// Records the remote_write v1 `body` (snappy-compressed protobuf,
    /// already validated) as it came, as one record that replays as what
    /// the receiver's decoding makes of it, with no ops given: the receiver
    /// then needs no label set of a series the store holds. Returns false,
    /// recording nothing, when this journal does not record this body
    /// (the default): the caller logs ops instead. Same guarantees as `log`.
    fn log_raw_body(&mut self, body: &[u8]) -> Result<bool, StoreError> {
        let _ = body;
        Ok(false)
    }

    /// Once per tick, with the store read-locked: sync to disk per the
    /// configured policy and, when a checkpoint is due, start the next log
    /// segment and return the checkpoint of `store` to run off-lock.
    fn tick(&mut self, store: &LiveStore) -> Result<Option<PendingCheckpoint>, StoreError>;

    /// A checkpoint returned by [`Journal::tick`] failed: try again soon.
    fn checkpoint_failed(&mut self) {}
}
