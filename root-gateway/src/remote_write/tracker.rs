//! Sans-I/O: turns the store's append path (change points, heartbeats,
//! retirements, explicit samples) into the samples a Prometheus scraping
//! every node each tick would have stored, in time order per series.
//!
//! It mirrors what the live store answers queries with: a change point,
//! then the same value at each tick of its source on the change point's
//! grid (`since + k * tick`) while the source's heartbeats cover that time,
//! until the next change or a retirement (a staleness marker). Like the
//! store, a grid point within half a tick of the next change is that change
//! (not sent), and one within half a tick after the last heartbeat is that
//! heartbeat's tick (sent). `up{node=..}`
//! is 1 on the grid of the source's alive period. A source silent past its
//! deadline (or back after such a gap) gets a staleness marker on each
//! series at the first grid point after its last heartbeat, and `up 0` at
//! each tick after it, as a failed scrape does in Prometheus.
//!
//! A heartbeat's tick is flushed when the source's next heartbeat arrives or
//! `flush_delay_ms` after it (the changes of a tick arrive right after its
//! heartbeat). Nothing here reads a clock.

use std::collections::HashMap;
use std::sync::Arc;

use canopy_proto::model::{Labels, METRIC_NAME, is_stale_nan, stale_nan};

/// What the store's append path reports (see `server::StoreSink`).
#[derive(Clone, Debug)]
pub enum TapEvent {
    /// A change point of a fabric series of `source`.
    Sample {
        /// The node that produced it.
        source: String,
        /// The series.
        labels: Labels,
        /// Timestamp, ms.
        ts_ms: i64,
        /// The new value.
        value: f64,
    },
    /// `source` ticked at `ts_ms`.
    Heartbeat {
        /// The node.
        source: String,
        /// Timestamp, ms.
        ts_ms: i64,
        /// Its tick, ms.
        tick_ms: u32,
    },
    /// The series ended at `ts_ms`.
    Retire {
        /// The node.
        source: String,
        /// The series.
        labels: Labels,
        /// Timestamp, ms.
        ts_ms: i64,
    },
    /// An explicit sample (received through remote_write): sent as is.
    Explicit {
        /// The series.
        labels: Labels,
        /// Timestamp, ms.
        ts_ms: i64,
        /// The value.
        value: f64,
    },
}

/// One sample to send.
#[derive(Clone, Debug, PartialEq)]
pub struct OutSample {
    /// The series (shared between the samples of one series).
    pub labels: Arc<Labels>,
    /// Timestamp, ms.
    pub ts_ms: i64,
    /// Value (a staleness marker is the stale NaN).
    pub value: f64,
}

/// Settings of a [`Tracker`]; the deadline mirrors the live store's.
#[derive(Clone, Debug)]
pub struct TrackerConfig {
    /// A source is dead after this many ticks without a heartbeat...
    pub deadline_ticks: u32,
    /// ...or after this many ms, whichever is larger.
    pub min_deadline_ms: i64,
    /// A tick is flushed this long after its heartbeat at the latest.
    pub flush_delay_ms: i64,
    /// Most series tracked; new series beyond it are not sent (counted).
    pub max_series: usize,
    /// An ended series is forgotten this long after its last sample, ms.
    pub keep_stale_ms: i64,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            deadline_ticks: 3,
            min_deadline_ms: 5_000,
            flush_delay_ms: 500,
            max_series: 1_000_000,
            keep_stale_ms: 10 * 60 * 1000,
        }
    }
}

/// Counters of a [`Tracker`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Samples produced.
    pub samples_out: u64,
    /// Samples that arrived too late to be sent in order (not sent).
    pub late: u64,
    /// New series not tracked because of `max_series`.
    pub over_limit: u64,
    /// Series currently tracked.
    pub series: usize,
}

/// Most grid points one series writes per call (bounds a call's work when
/// clocks jump).
const MAX_FILL: i64 = 10_000;

#[derive(Debug)]
struct SeriesState {
    labels: Arc<Labels>,
    value: f64,
    /// The change point: the grid is `since + k * tick`.
    since: i64,
    last_sent: i64,
    /// Ended by a retirement (a stored marker), not only by a silence.
    retired: bool,
}

impl SeriesState {
    /// Writes the current value at its grid points in `(last_sent, upto]`.
    fn fill(&mut self, upto: i64, tick: i64, out: &mut Vec<OutSample>, st: &mut TrackerStats) {
        if is_stale_nan(self.value) || upto < self.since {
            return;
        }
        let mut t = if self.last_sent < self.since {
            self.since
        } else {
            self.since + ((self.last_sent - self.since) / tick + 1) * tick
        };
        if (upto - t) / tick > MAX_FILL {
            t += ((upto - t) / tick - MAX_FILL) * tick;
        }
        while t <= upto {
            emit(out, st, &self.labels, t, self.value);
            self.last_sent = t;
            t += tick;
        }
    }

    /// The first grid point after `t`.
    fn grid_after(&self, t: i64, tick: i64) -> i64 {
        if t < self.since {
            self.since
        } else {
            self.since + ((t - self.since) / tick + 1) * tick
        }
    }
}

#[derive(Debug)]
struct SourceState {
    tick_ms: i64,
    last_hb: i64,
    /// A heartbeat whose tick is not flushed yet.
    pending: Option<i64>,
    /// Silent past its deadline (staleness markers written).
    dead: bool,
    /// Start of the current alive period (the grid of `up`).
    period_start: i64,
    up: Arc<Labels>,
    up_sent: i64,
    series: HashMap<Labels, SeriesState>,
}

impl SourceState {
    /// Writes every series and `up 1` up to tick `p`.
    fn flush(&mut self, p: i64, out: &mut Vec<OutSample>, st: &mut TrackerStats) {
        let tick = self.tick_ms;
        for e in self.series.values_mut() {
            e.fill(p + tick / 2, tick, out, st);
        }
        let mut t = if self.up_sent < self.period_start {
            self.period_start
        } else {
            self.period_start + ((self.up_sent - self.period_start) / tick + 1) * tick
        };
        if (p - t) / tick > MAX_FILL {
            t += ((p - t) / tick - MAX_FILL) * tick;
        }
        while t <= p {
            emit(out, st, &self.up, t, 1.0);
            self.up_sent = t;
            t += tick;
        }
    }

    /// The alive period ended at `last_hb`: a staleness marker per series.
    fn die(&mut self, out: &mut Vec<OutSample>, st: &mut TrackerStats) {
        self.dead = true;
        let (tick, end) = (self.tick_ms, self.last_hb);
        for e in self.series.values_mut() {
            if is_stale_nan(e.value) {
                continue;
            }
            let t = e.grid_after(end + tick / 2, tick);
            if t > e.last_sent {
                emit(out, st, &e.labels, t, stale_nan());
                e.last_sent = t;
            }
            e.value = stale_nan();
        }
    }

    /// `up 0` at each tick after the dead period, up to `upto`.
    fn zeros(&mut self, upto: i64, out: &mut Vec<OutSample>, st: &mut TrackerStats) {
        let tick = self.tick_ms;
        let mut t = self.up_sent.max(self.last_hb) + tick;
        if (upto - t) / tick > MAX_FILL {
            t += ((upto - t) / tick - MAX_FILL) * tick;
        }
        while t <= upto {
            emit(out, st, &self.up, t, 0.0);
            self.up_sent = t;
            t += tick;
        }
    }
}

/// The state machine; feed it with [`Tracker::on_event`] and
/// [`Tracker::poll`], collect samples from the `out` vectors.
#[derive(Debug, Default)]
pub struct Tracker {
    cfg: TrackerConfig,
    sources: HashMap<String, SourceState>,
    explicit: HashMap<Labels, (Arc<Labels>, i64)>,
    n_series: usize,
    stats: TrackerStats,
}

fn emit(out: &mut Vec<OutSample>, stats: &mut TrackerStats, l: &Arc<Labels>, ts: i64, v: f64) {
    stats.samples_out += 1;
    out.push(OutSample {
        labels: Arc::clone(l),
        ts_ms: ts,
        value: v,
    });
}

/// The state of source `name`, created on first sight.
fn source_of<'a>(m: &'a mut HashMap<String, SourceState>, name: &str) -> &'a mut SourceState {
    m.entry(name.to_string()).or_insert_with(|| SourceState {
        tick_ms: 1000,
        last_hb: i64::MIN,
        pending: None,
        dead: false,
        period_start: i64::MIN,
        up: Arc::new(Labels::from_pairs([(METRIC_NAME, "up"), ("node", name)])),
        up_sent: i64::MIN,
        series: HashMap::new(),
    })
}

impl Tracker {
    /// An empty tracker.
    pub fn new(cfg: TrackerConfig) -> Self {
        Tracker {
            cfg,
            ..Default::default()
        }
    }

    /// Counters.
    pub fn stats(&self) -> TrackerStats {
        TrackerStats {
            series: self.n_series,
            ..self.stats
        }
    }

    fn deadline(&self, tick_ms: i64) -> i64 {
        (tick_ms * i64::from(self.cfg.deadline_ticks)).max(self.cfg.min_deadline_ms)
    }

    /// Applies one event; samples ready to send are appended to `out`.
    pub fn on_event(&mut self, ev: TapEvent, out: &mut Vec<OutSample>) {
        match ev {
            TapEvent::Heartbeat {
                source,
                ts_ms,
                tick_ms,
            } => self.heartbeat(&source, ts_ms, tick_ms, out),
            TapEvent::Sample {
                source,
                labels,
                ts_ms,
                value,
            } if is_stale_nan(value) => self.retire(&source, &labels, ts_ms, out),
            TapEvent::Sample {
                source,
                labels,
                ts_ms,
                value,
            } => self.sample(&source, labels, ts_ms, value, out),
            TapEvent::Retire {
                source,
                labels,
                ts_ms,
            } => self.retire(&source, &labels, ts_ms, out),
            TapEvent::Explicit {
                labels,
                ts_ms,
                value,
            } => self.explicit(labels, ts_ms, value, out),
        }
    }

    fn heartbeat(&mut self, source: &str, ts: i64, tick_ms: u32, out: &mut Vec<OutSample>) {
        let tick = i64::from(tick_ms.max(1));
        let deadline = self.deadline(tick);
        let st = &mut self.stats;
        let s = source_of(&mut self.sources, source);
        if ts <= s.last_hb {
            return;
        }
        if let Some(p) = s.pending.take() {
            s.flush(p, out, st);
        }
        s.tick_ms = tick;
        if s.last_hb == i64::MIN {
            s.period_start = ts;
        } else if s.dead || ts - s.last_hb > deadline {
            // Back after a gap: the old period ended at the last heartbeat.
            if !s.dead {
                s.die(out, st);
            }
            s.zeros(ts - 1, out, st);
            s.period_start = ts;
        }
        s.dead = false;
        s.last_hb = ts;
        s.pending = Some(ts);
    }

    fn retire(&mut self, source: &str, labels: &Labels, ts: i64, out: &mut Vec<OutSample>) {
        let st = &mut self.stats;
        let s = source_of(&mut self.sources, source);
        let (tick, last_hb) = (s.tick_ms, s.last_hb);
        // The entry stays (stale) for `keep_stale_ms`, so that a late
        // sample cannot be sent behind the marker.
        if let Some(e) = s.series.get_mut(labels) {
            e.fill((ts - tick / 2 - 1).min(last_hb + tick / 2), tick, out, st);
            // As the store: a silence's implied marker does not stand in
            // for the retirement's own.
            if ts > e.last_sent && !e.retired {
                emit(out, st, &e.labels, ts, stale_nan());
                e.last_sent = ts;
            }
            e.retired = true;
            e.value = stale_nan();
            e.since = e.since.max(ts);
        }
    }

    fn sample(&mut self, source: &str, labels: Labels, ts: i64, v: f64, out: &mut Vec<OutSample>) {
        let full = self.n_series >= self.cfg.max_series;
        let st = &mut self.stats;
        let s = source_of(&mut self.sources, source);
        // A change newer than the pending tick starts a tick of its own.
        if s.pending.is_none_or(|p| ts > p) {
            if let Some(p) = s.pending.take() {
                s.flush(p, out, st);
            }
            s.pending = Some(ts);
            if s.last_hb == i64::MIN {
                s.period_start = ts;
            }
            s.last_hb = s.last_hb.max(ts);
        }
        let (tick, period_start) = (s.tick_ms, s.period_start);
        let Some(e) = s.series.get_mut(&labels) else {
            if full {
                st.over_limit += 1;
                return;
            }
            self.n_series += 1;
            s.series.insert(
                labels.clone(),
                SeriesState {
                    labels: Arc::new(labels),
                    value: v,
                    since: ts,
                    last_sent: i64::MIN,
                    retired: false,
                },
            );
            return;
        };
        if ts < e.since {
            // Older than the newest change (or the end) already known.
            st.late += 1;
            return;
        }
        let same = e.value.to_bits() == v.to_bits();
        if same && e.since >= period_start {
            return; // implied, as the store sees it: the grid stays
        }
        // The old value holds on its grid until half a tick before the change.
        e.fill(ts - tick / 2 - 1, tick, out, st);
        if ts <= e.last_sent {
            st.late += 1;
        }
        e.value = v;
        e.since = ts;
        e.retired = false;
    }

    fn explicit(&mut self, labels: Labels, ts: i64, v: f64, out: &mut Vec<OutSample>) {
        if !self.explicit.contains_key(&labels) {
            if self.n_series >= self.cfg.max_series {
                self.stats.over_limit += 1;
                return;
            }
            self.n_series += 1;
        }
        let e = self
            .explicit
            .entry(labels)
            .or_insert_with_key(|l| (Arc::new(l.clone()), i64::MIN));
        if ts > e.1 {
            e.1 = ts;
            emit(out, &mut self.stats, &e.0, ts, v);
        } else {
            self.stats.late += 1;
        }
    }

    /// Flushes ticks older than the flush delay, handles sources silent
    /// past their deadline and forgets long-ended series, as of `now_ms`.
    pub fn poll(&mut self, now_ms: i64, out: &mut Vec<OutSample>) {
        let cfg = self.cfg.clone();
        let st = &mut self.stats;
        let n_series = &mut self.n_series;
        let before = self.explicit.len();
        self.explicit
            .retain(|_, (_, last)| now_ms - *last <= cfg.keep_stale_ms);
        *n_series -= before - self.explicit.len();
        for s in self.sources.values_mut() {
            if let Some(p) = s.pending
                && now_ms - p >= cfg.flush_delay_ms
            {
                s.pending = None;
                s.flush(p, out, st);
            }
            let deadline = (s.tick_ms * i64::from(cfg.deadline_ticks)).max(cfg.min_deadline_ms);
            if !s.dead
                && s.pending.is_none()
                && s.last_hb != i64::MIN
                && now_ms - s.last_hb > deadline
            {
                s.die(out, st);
            }
            if s.dead {
                s.zeros(now_ms, out, st);
            }
            let before = s.series.len();
            s.series.retain(|_, e| {
                !(is_stale_nan(e.value) && now_ms - e.last_sent.max(e.since) > cfg.keep_stale_ms)
            });
            *n_series -= before - s.series.len();
        }
    }
}
