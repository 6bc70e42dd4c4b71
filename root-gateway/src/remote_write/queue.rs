//! Sans-I/O send queue of one remote_write endpoint: a bounded FIFO that
//! drops its oldest samples when full (counted), batches of at most
//! `max_batch` samples cut when full or after `batch_wait_ms`, and
//! exponential backoff for retryable failures (5xx, 429, network errors).
//! A permanent refusal (other 4xx) drops the batch (counted): resending the
//! same body would be refused again. The caller passes `now`.

use std::collections::VecDeque;

use bytes::Bytes;

use super::RemoteWriteError;
use super::tracker::OutSample;
use super::wire;

/// Settings of a [`SendQueue`].
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Most samples waiting (the oldest are dropped beyond it).
    pub capacity: usize,
    /// Most samples per request.
    pub max_batch: usize,
    /// A partial batch is sent after waiting this long, ms.
    pub batch_wait_ms: i64,
    /// First retry delay, ms (doubles per attempt).
    pub min_backoff_ms: i64,
    /// Longest retry delay, ms.
    pub max_backoff_ms: i64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            capacity: 500_000,
            max_batch: 2_000,
            batch_wait_ms: 1_000,
            min_backoff_ms: 50,
            max_backoff_ms: 5_000,
        }
    }
}

/// Counters of a [`SendQueue`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Samples accepted by the endpoint.
    pub samples_sent: u64,
    /// Requests accepted by the endpoint.
    pub batches_sent: u64,
    /// Samples dropped because the queue was full (oldest first).
    pub dropped_overflow: u64,
    /// Samples dropped because the endpoint refused their batch (4xx).
    pub dropped_refused: u64,
    /// Retries after retryable failures.
    pub retries: u64,
    /// Samples waiting now (in flight excluded).
    pub queued: usize,
}

/// How a send attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx.
    Accepted,
    /// 5xx, 429 or a network error: send the same batch again later.
    Retry(String),
    /// Any other 4xx: drop the batch.
    Refused(String),
}

/// One encoded request.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The snappy-compressed protobuf body.
    pub body: Bytes,
    /// Samples it carries.
    pub samples: usize,
    /// Attempts so far (0 on the first send).
    pub attempt: u32,
}

/// What the shell should do next.
#[derive(Clone, Debug)]
pub enum Next {
    /// Send this batch now, then report with [`SendQueue::on_outcome`].
    Send(Batch),
    /// Nothing to do before this time (ms) unless samples arrive.
    WaitUntil(i64),
    /// Nothing queued.
    Idle,
}

#[derive(Debug)]
enum State {
    Idle,
    InFlight(Batch),
    Backoff { batch: Batch, until: i64 },
}

/// The queue; see the module docs.
#[derive(Debug)]
pub struct SendQueue {
    cfg: QueueConfig,
    buf: VecDeque<OutSample>,
    oldest_at: i64,
    state: State,
    stats: QueueStats,
}

impl SendQueue {
    /// An empty queue.
    pub fn new(cfg: QueueConfig) -> Self {
        SendQueue {
            cfg,
            buf: VecDeque::new(),
            oldest_at: 0,
            state: State::Idle,
            stats: QueueStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> QueueStats {
        QueueStats {
            queued: self.buf.len(),
            ..self.stats
        }
    }

    /// Queues samples, dropping the oldest beyond capacity.
    pub fn push(&mut self, samples: impl IntoIterator<Item = OutSample>, now_ms: i64) {
        for s in samples {
            if self.buf.is_empty() {
                self.oldest_at = now_ms;
            }
            if self.buf.len() >= self.cfg.capacity.max(1) {
                self.buf.pop_front();
                self.stats.dropped_overflow += 1;
            }
            self.buf.push_back(s);
        }
    }

    /// The next step at `now_ms`.
    pub fn next(&mut self, now_ms: i64) -> Result<Next, RemoteWriteError> {
        match &self.state {
            State::InFlight(b) => return Ok(Next::Send(b.clone())),
            State::Backoff { batch, until } => {
                if now_ms < *until {
                    return Ok(Next::WaitUntil(*until));
                }
                let b = batch.clone();
                self.state = State::InFlight(b.clone());
                return Ok(Next::Send(b));
            }
            State::Idle => {}
        }
        if self.buf.is_empty() {
            return Ok(Next::Idle);
        }
        let due = self.oldest_at.saturating_add(self.cfg.batch_wait_ms);
        if self.buf.len() < self.cfg.max_batch && now_ms < due {
            return Ok(Next::WaitUntil(due));
        }
        let n = self.buf.len().min(self.cfg.max_batch.max(1));
        let req = wire::request_of(
            self.buf
                .range(..n)
                .map(|s| (s.labels.as_ref(), s.ts_ms, s.value)),
        );
        self.buf.drain(..n);
        let body = match wire::encode(&req) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                // Never loop on a batch that cannot be encoded: drop it.
                self.stats.dropped_refused += n as u64;
                return Err(e);
            }
        };
        // What remains waited since now at most: keep the batch clock honest.
        self.oldest_at = now_ms;
        let b = Batch {
            body,
            samples: n,
            attempt: 0,
        };
        self.state = State::InFlight(b.clone());
        Ok(Next::Send(b))
    }

    /// Reports how sending the in-flight batch ended at `now_ms`; returns
    /// the retry delay (ms) when it will be retried.
    pub fn on_outcome(&mut self, outcome: &Outcome, now_ms: i64) -> Option<i64> {
        let State::InFlight(mut b) = std::mem::replace(&mut self.state, State::Idle) else {
            return None;
        };
        match outcome {
            Outcome::Accepted => {
                self.stats.samples_sent += b.samples as u64;
                self.stats.batches_sent += 1;
                None
            }
            Outcome::Refused(_) => {
                self.stats.dropped_refused += b.samples as u64;
                None
            }
            Outcome::Retry(_) => {
                let shift = b.attempt.min(30);
                let delay = self
                    .cfg
                    .min_backoff_ms
                    .max(1)
                    .saturating_mul(1_i64 << shift)
                    .min(self.cfg.max_backoff_ms.max(1));
                b.attempt += 1;
                self.stats.retries += 1;
                self.state = State::Backoff {
                    batch: b,
                    until: now_ms + delay,
                };
                Some(delay)
            }
        }
    }
}

/// Classifies an HTTP status of a remote_write response.
pub fn classify(status: u16, body: &str) -> Outcome {
    match status {
        200..=299 => Outcome::Accepted,
        429 | 500..=599 => Outcome::Retry(format!("HTTP {status}: {body}")),
        _ => Outcome::Refused(format!("HTTP {status}: {body}")),
    }
}
