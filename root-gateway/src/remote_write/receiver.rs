//! `POST /api/v1/write`: the remote_write v1 receiver. Bodies are checked
//! against the limits before anything is decompressed; samples go into the
//! live store as explicit samples with their labels as sent. Bad input is a
//! 400 with a plain-text reason (as Prometheus answers); the gateway keeps
//! serving.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::mpsc::{SendError, SyncSender, sync_channel};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;

use canopy_proto::model::Labels;

use super::RemoteWriteError;
use super::pb::{SeriesView, Span, WriteBatch};
use super::resolve::{Resolved, find_held, parse, resolve};
use super::sender::Tap;
use super::tracker::TapEvent;
use super::wire::{self, WireLimits};
use crate::store::{LiveStore, Op, SeriesHint, SharedStore, StoreError};

/// What the receiver needs.
#[derive(Clone, Debug)]
pub struct ReceiverState {
    /// Where samples go.
    pub store: SharedStore,
    /// Forwards accepted samples to remote_write senders, if any.
    pub tap: Option<Tap>,
    /// Body size limits.
    pub limits: WireLimits,
    /// The thread that stores decoded requests (see [`Applier`]); none:
    /// each request is stored on the thread that decoded it.
    applier: Option<Applier>,
}

impl ReceiverState {
    /// A receiver storing into `store`, forwarding to `tap`, within `limits`.
    pub fn new(store: SharedStore, tap: Option<Tap>, limits: WireLimits) -> Self {
        ReceiverState {
            store,
            tap,
            limits,
            applier: None,
        }
    }

    /// This receiver with its own [`Applier`] thread for
    /// [`ingest_bytes`] (unchanged if the thread cannot be started).
    pub fn with_applier(mut self) -> Self {
        if self.applier.is_none() {
            self.applier = Applier::spawn();
        }
        self
    }
}

/// Decoded requests waiting for the applier, at most (their senders block
/// beyond; each request waits for its own answer anyway).
const APPLIER_QUEUE: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

/// One thread that makes every store write of the receiver, while requests
/// are decompressed, decoded and looked up in parallel on the blocking pool.
/// Writes were one at a time already (the store's write lock); what this
/// changes is where the store's memory comes from: glibc gives each thread
/// an arena of its own, and a store grown from whichever pool thread held
/// the lock spread its chunks over every arena, each keeping its own free
/// space (~80 B a series of RSS at 100,000 series, 4 senders). Stops when
/// the last [`ReceiverState`] holding it is dropped.
#[derive(Clone, Debug)]
struct Applier {
    jobs: SyncSender<Job>,
}

impl Applier {
    fn spawn() -> Option<Applier> {
        let (jobs, rx) = sync_channel::<Job>(APPLIER_QUEUE);
        let spawned = std::thread::Builder::new()
            .name("canopy-rw-apply".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            });
        match spawned {
            Ok(_) => Some(Applier { jobs }),
            Err(e) => {
                tracing::warn!(error = %e, "no remote_write applier thread; requests store on their own threads");
                None
            }
        }
    }

    /// Runs `job` on the applier thread, or here if that thread is gone.
    fn run(&self, job: Job) {
        if let Err(SendError(job)) = self.jobs.send(job) {
            job();
        }
    }
}

/// The router holding `POST /api/v1/write`; merge it into the API. Requests
/// are stored through an [`Applier`] thread of its own.
pub fn router(state: ReceiverState) -> Router {
    Router::new()
        .route("/api/v1/write", post(write))
        // The handler enforces its own limit with a clear message.
        .layer(DefaultBodyLimit::disable())
        .with_state(Arc::new(state.with_applier()))
}

fn bad(status: StatusCode, msg: String) -> Response {
    tracing::debug!(%status, %msg, "remote_write request refused");
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg + "\n",
    )
        .into_response()
}

async fn write(State(st): State<Arc<ReceiverState>>, headers: HeaderMap, body: Body) -> Response {
    if let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        && ct.contains("io.prometheus.write.v2")
    {
        return bad(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("remote_write 2.0 ({ct}) is not supported; send remote_write 1.0"),
        );
    }
    let max = st.limits.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return bad(
            StatusCode::BAD_REQUEST,
            RemoteWriteError::BodyTooLarge { limit: max }.to_string(),
        );
    }
    let bytes = match axum::body::to_bytes(body, max).await {
        Ok(b) => b,
        Err(e) => {
            let too_big = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            let err = if too_big {
                RemoteWriteError::BodyTooLarge { limit: max }
            } else {
                RemoteWriteError::Read(e.to_string())
            };
            return bad(StatusCode::BAD_REQUEST, err.to_string());
        }
    };
    let st2 = Arc::clone(&st);
    // Storing may write the journal: blocking I/O, off the async threads.
    match tokio::task::spawn_blocking(move || ingest_bytes(&st2, bytes)).await {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err((status, msg))) => bad(status, msg),
        Err(e) => bad(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("remote_write ingest failed: {e}"),
        ),
    }
}

/// Samples applied to the store per write lock (bounds how long one
/// request holds it; queries run between the slices).
const SAMPLES_PER_APPLY: usize = 64 * 1024;

/// Per-thread scratch space is kept between requests only while its
/// decompression buffer is at most this many bytes...
const KEEP_BUFFER_BYTES: usize = 4 << 20;
/// ...and the last request held at most this many samples.
const KEEP_SAMPLES: usize = 256 << 10;

/// Per-thread scratch space of [`ingest`], reused across requests: the
/// decompressed body, the decoded request and what the store made of its
/// series. Nothing in it outlives a request but capacity: no label set is
/// kept between requests (the store holds each one, once).
#[derive(Default)]
struct Scratch {
    raw: Vec<u8>,
    /// Bytes of `raw` holding the current request.
    raw_len: usize,
    batch: WriteBatch,
    /// Label pairs of one series ([`find_held`]'s scratch).
    pairs: Vec<(Span, Span)>,
    /// Per series of the request: the store's hint, where it holds it.
    hints: Vec<Option<SeriesHint>>,
    /// The series with samples, in order: (index in the request, how the
    /// store knows it).
    series: Vec<(u32, Resolved)>,
    /// End (in `series`) of each apply slice.
    slices: Vec<usize>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Decodes and stores one remote_write body (blocking: it may write the
/// journal); `Err` is the HTTP status and reason to answer. Public for the
/// ingest benchmark (`examples/ingest_bench.rs`).
pub fn ingest(st: &ReceiverState, body: &[u8]) -> Result<(), (StatusCode, String)> {
    let mut sc = Scratch::take();
    let res = match decode(st, body, &mut sc) {
        Ok(()) => store(st, body, &mut sc),
        Err(e) => Err((StatusCode::BAD_REQUEST, e.to_string())),
    };
    sc.give_back();
    res
}

impl Scratch {
    /// This thread's scratch, taken out for one request (a fresh one if
    /// it is out already: never, but not a panic either).
    fn take() -> Scratch {
        SCRATCH.with(|cell| {
            cell.try_borrow_mut()
                .map(|mut g| std::mem::take(&mut *g))
                .unwrap_or_default()
        })
    }

    /// Hands the scratch back to this thread once its request is done.
    /// Parsed label sets are the store's now (or refused): not kept; nor is
    /// a scratch grown past [`KEEP_BUFFER_BYTES`] or [`KEEP_SAMPLES`].
    fn give_back(mut self) {
        self.series.clear();
        if self.raw.capacity() <= KEEP_BUFFER_BYTES && self.batch.sample_count() <= KEEP_SAMPLES {
            SCRATCH.with(|cell| {
                if let Ok(mut g) = cell.try_borrow_mut() {
                    *g = self;
                }
            });
        }
    }
}

/// [`ingest`], the request decoded on this thread and stored on the
/// receiver's [`Applier`] thread if it has one (this thread waits for it).
pub fn ingest_bytes(st: &Arc<ReceiverState>, body: Bytes) -> Result<(), (StatusCode, String)> {
    let Some(applier) = &st.applier else {
        return ingest(st, &body);
    };
    let mut sc = Scratch::take();
    let res = match decode(st, &body, &mut sc) {
        Err(e) => Err((StatusCode::BAD_REQUEST, e.to_string())),
        Ok(()) if sc.series.is_empty() => Ok(()),
        Ok(()) => {
            let (reply, answer) = sync_channel(1);
            let st2 = Arc::clone(st);
            applier.run(Box::new(move || {
                let r = store(&st2, &body, &mut sc);
                let _ = reply.send((sc, r));
            }));
            match answer.recv() {
                Ok((back, r)) => {
                    sc = back;
                    r
                }
                Err(_) => {
                    return Err((
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "remote_write ingest failed: the store's applier stopped".to_string(),
                    ));
                }
            }
        }
    };
    sc.give_back();
    res
}

/// Decodes `body` into `sc`: every series found in the store by its label
/// bytes (under the read lock: lookups of concurrent requests overlap) or
/// parsed. Every series is validated before anything is stored, so a bad
/// request stores nothing.
fn decode(st: &ReceiverState, body: &[u8], sc: &mut Scratch) -> Result<(), RemoteWriteError> {
    sc.series.clear();
    sc.raw_len = wire::decompress_into(body, &st.limits, &mut sc.raw)?;
    let raw = sc.raw.get(..sc.raw_len).unwrap_or_default();
    sc.batch
        .decode(raw)
        .map_err(|e| RemoteWriteError::Protobuf(e.to_string()))?;
    let views = sc.batch.series_views();
    if views.is_empty() {
        return Ok(());
    }
    st.store
        .read(|s| find_held(s, raw, &sc.batch, &mut sc.pairs, &mut sc.hints));
    for (i, (v, h)) in views.iter().zip(&sc.hints).enumerate() {
        let found = match h {
            Some(h) => Resolved::Held(*h),
            None => Resolved::New(parse(raw, &sc.batch, v)?),
        };
        if !sc.batch.samples(v).is_empty() {
            // Below the request's series count, which fits u32 (see pb).
            sc.series.push((i as u32, found));
        }
    }
    Ok(())
}

/// What an apply refused, over all its slices.
#[derive(Default)]
struct Tally {
    refused: usize,
    total: usize,
    first: Option<String>,
}

impl Tally {
    fn refuse(&mut self, why: impl FnOnce() -> String) {
        self.refused += 1;
        if self.first.is_none() {
            self.first = Some(why());
        }
    }

    fn answer(self) -> Result<(), (StatusCode, String)> {
        match self.first {
            None => Ok(()),
            Some(e) => Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "{} of {} samples refused (the others were stored); first: {e}",
                    self.refused, self.total
                ),
            )),
        }
    }
}

/// Stores the series of `sc` (decoded from `body`) in slices of about
/// [`SAMPLES_PER_APPLY`] samples; refused samples make a 400 naming the
/// first reason. The journal, if any, records the body as it came, once
/// (see [`crate::wal::record`]); one that does not take it gets ops.
fn store(st: &ReceiverState, body: &[u8], sc: &mut Scratch) -> Result<(), (StatusCode, String)> {
    if sc.series.is_empty() {
        return Ok(());
    }
    sc.slices.clear();
    let mut held = 0usize;
    for (k, (i, _)) in sc.series.iter().enumerate() {
        held += view_samples(&sc.batch, *i);
        if held >= SAMPLES_PER_APPLY {
            sc.slices.push(k + 1);
            held = 0;
        }
    }
    if sc.slices.last() != Some(&sc.series.len()) {
        sc.slices.push(sc.series.len());
    }
    let raw = sc.raw.get(..sc.raw_len).unwrap_or_default();
    let (batch, series, slices) = (&sc.batch, &sc.series, &sc.slices);
    let mut tally = Tally::default();
    let slice = |k: usize| {
        let from = k.checked_sub(1).and_then(|p| slices.get(p)).copied();
        let to = slices.get(k).copied().unwrap_or(0);
        series.get(from.unwrap_or(0)..to).unwrap_or_default()
    };
    let logged = st
        .store
        .apply_body_slices(body, slices.len(), |s, k| {
            for (i, r) in slice(k) {
                apply_series(s, st.tap.as_ref(), raw, batch, *i, r, &mut tally);
            }
        })
        .map_err(internal)?;
    if !logged {
        for k in 0..slices.len() {
            apply_ops(st, raw, batch, slice(k), &mut tally)?;
        }
    }
    tally.answer()
}

fn internal(e: StoreError) -> (StatusCode, String) {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("storing samples: {e}"),
    )
}

fn view_samples(batch: &WriteBatch, i: u32) -> usize {
    batch
        .series_views()
        .get(i as usize)
        .map_or(0, |v| batch.samples(v).len())
}

fn view(batch: &WriteBatch, i: u32) -> Option<&SeriesView> {
    batch.series_views().get(i as usize)
}

/// Appends the samples of series `i` of `batch` (decoded from `raw`),
/// which the store knows as `r`, reporting to `tally` and forwarding what
/// was accepted to `tap`. A series found before the lock and removed since
/// (retention ran in between) is made again by its labels.
fn apply_series(
    s: &mut LiveStore,
    tap: Option<&Tap>,
    raw: &[u8],
    batch: &WriteBatch,
    i: u32,
    r: &Resolved,
    tally: &mut Tally,
) {
    let Some(v) = view(batch, i) else { return };
    let samples = batch.samples(v);
    tally.total += samples.len();
    let labels = match r {
        Resolved::Held(h) => {
            let stored = match tap {
                // Nothing to forward: each sample only counted if refused.
                None => s.append_samples_at(h, samples, &mut |_, res: Result<(), StoreError>| {
                    if let Err(e) = res {
                        tally.refuse(|| e.to_string());
                    }
                }),
                Some(_) => {
                    // Forwarding needs the labels: built only then.
                    let fwd = tap.and_then(|_| s.hinted_labels(h));
                    let mut each =
                        |k: usize, res| record(tally, tap, fwd.as_ref(), samples, k, res);
                    s.append_samples_at(h, samples, &mut each)
                }
            };
            if stored {
                return;
            }
            match parse(raw, batch, v) {
                Ok(l) => l,
                Err(e) => {
                    for _ in samples {
                        tally.refuse(|| e.to_string());
                    }
                    return;
                }
            }
        }
        Resolved::New(l) => l.clone(),
    };
    let fwd = tap.map(|_| labels.clone());
    let mut each = |k: usize, res| record(tally, tap, fwd.as_ref(), samples, k, res);
    s.append_samples(&labels, samples, &mut each);
}

/// One sample's result: counted if refused, forwarded if stored.
fn record(
    tally: &mut Tally,
    tap: Option<&Tap>,
    labels: Option<&Labels>,
    samples: &[crate::store::Sample],
    k: usize,
    res: Result<(), StoreError>,
) {
    match res {
        Err(e) => tally.refuse(|| e.to_string()),
        Ok(()) => {
            if let (Some(tap), Some(labels), Some(smp)) = (tap, labels, samples.get(k)) {
                tap.send(TapEvent::Explicit {
                    labels: labels.clone(),
                    ts_ms: smp.ts_ms,
                    value: smp.value,
                });
            }
        }
    }
}

/// One slice as ops, logged and applied through
/// [`SharedStore::apply_each_hinted`]: for a journal that does not record
/// this body as it came (only bodies past what a replay decodes). Held
/// series get their labels parsed again; their hints spare the lookup.
fn apply_ops(
    st: &ReceiverState,
    raw: &[u8],
    batch: &WriteBatch,
    slice: &[(u32, Resolved)],
    tally: &mut Tally,
) -> Result<(), (StatusCode, String)> {
    let mut ops = Vec::with_capacity(slice.len());
    let mut hints = Vec::with_capacity(slice.len());
    for (i, r) in slice {
        let Some(v) = view(batch, *i) else { continue };
        let (labels, hint) = match r {
            Resolved::Held(h) => (
                parse(raw, batch, v).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()))?,
                *h,
            ),
            Resolved::New(l) => (l.clone(), SeriesHint::default()),
        };
        ops.push(Op::Samples {
            labels,
            samples: batch.samples(v).to_vec(),
        });
        hints.push(hint);
    }
    tally.total += ops.iter().map(Op::samples).sum::<usize>();
    st.store
        .apply_each_hinted(&ops, &mut hints, |i, k, res| {
            let labels = ops.get(i).and_then(|op| match op {
                Op::Samples { labels, .. } => Some(labels),
                _ => None,
            });
            let samples = match ops.get(i) {
                Some(Op::Samples { samples, .. }) => samples.as_slice(),
                _ => &[],
            };
            record(tally, st.tap.as_ref(), labels, samples, k, res);
        })
        .map_err(internal)?;
    Ok(())
}

/// Reused buffers of [`replay_body`].
#[derive(Debug, Default)]
pub struct ReplayScratch {
    raw: Vec<u8>,
    batch: WriteBatch,
    resolved: Vec<Resolved>,
}

/// Applies a remote_write v1 `body` that the write-ahead log recorded as it
/// came to `store`, as [`ingest`] applied it live: the same series (found
/// by their label bytes in the store's index, or by their parsed labels),
/// in the same order, with the same refusals. `limits` bound the decoding.
/// Returns the series with samples applied (the ops the body stood for).
pub fn replay_body(
    store: &mut LiveStore,
    body: &[u8],
    limits: &WireLimits,
    sc: &mut ReplayScratch,
) -> Result<usize, RemoteWriteError> {
    let n = wire::decompress_into(body, limits, &mut sc.raw)?;
    let raw = sc.raw.get(..n).unwrap_or_default();
    sc.batch
        .decode(raw)
        .map_err(|e| RemoteWriteError::Protobuf(e.to_string()))?;
    let res = resolve(store, raw, &sc.batch, &mut sc.resolved);
    let mut applied = 0;
    if res.is_ok() {
        let mut tally = Tally::default();
        for (i, r) in sc.resolved.iter().enumerate() {
            if view_samples(&sc.batch, i as u32) > 0 {
                apply_series(store, None, raw, &sc.batch, i as u32, r, &mut tally);
                applied += 1;
            }
        }
    }
    sc.resolved.clear();
    if n > KEEP_BUFFER_BYTES {
        *sc = ReplayScratch::default();
    }
    res.map(|()| applied)
}

/// The ops [`ingest`] makes of `body`, every label set parsed, appended to
/// `out`: what a body recorded as it came stands for, for tools and tests
/// that read the log as ops ([`crate::wal::record::Decoder::decode`]).
pub fn body_ops(
    body: &[u8],
    limits: &WireLimits,
    out: &mut Vec<Op>,
) -> Result<(), RemoteWriteError> {
    let mut raw = Vec::new();
    let n = wire::decompress_into(body, limits, &mut raw)?;
    let raw = raw.get(..n).unwrap_or_default();
    let mut batch = WriteBatch::default();
    batch
        .decode(raw)
        .map_err(|e| RemoteWriteError::Protobuf(e.to_string()))?;
    let labels = batch
        .series_views()
        .iter()
        .map(|s| parse(raw, &batch, s))
        .collect::<Result<Vec<_>, _>>()?;
    for (s, labels) in batch.series_views().iter().zip(labels) {
        let samples = batch.samples(s);
        if !samples.is_empty() {
            out.push(Op::Samples {
                labels,
                samples: samples.to_vec(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{LiveStoreConfig, Matcher, Querier, Sample};

    /// A series found before the write lock and removed by retention before
    /// its samples apply is made again from its labels: nothing is lost and
    /// nothing lands in the series that took its slot.
    #[test]
    fn a_series_removed_between_lookup_and_apply_is_made_again() {
        let mut s = LiveStore::new(LiveStoreConfig {
            retention_ms: 10_000,
            ..LiveStoreConfig::default()
        });
        let a = Labels::metric("stale_a", [("node", "n1")]);
        let b = Labels::metric("stale_b", [("node", "n2")]);
        let smp = |t: i64| {
            [Sample {
                ts_ms: t,
                value: t as f64,
            }]
        };
        let mut ok = |_: usize, r: Result<(), StoreError>| assert!(r.is_ok());
        s.append_samples(&a, &smp(100_000), &mut ok);
        let body = wire::encode(&wire::request_of([(&a, 200_500, 1.0)])).expect("encode");
        let mut raw = Vec::new();
        let n = wire::decompress_into(&body, &WireLimits::default(), &mut raw).expect("snappy");
        let raw = &raw[..n];
        let mut batch = WriteBatch::default();
        batch.decode(raw).expect("decode");
        let mut found = Vec::new();
        resolve(&s, raw, &batch, &mut found).expect("resolve");
        let [Resolved::Held(h)] = found[..] else {
            panic!("held: {found:?}")
        };
        // Retention drops a, and b takes its slot.
        s.maintain(200_000);
        assert_eq!(s.stats().series, 0);
        s.append_samples(&b, &smp(200_000), &mut ok);
        let mut tally = Tally::default();
        apply_series(&mut s, None, raw, &batch, 0, &Resolved::Held(h), &mut tally);
        assert_eq!((tally.refused, tally.total), (0, 1));
        let pts = |name: &str| -> Vec<i64> {
            s.select(&[Matcher::equal("__name__", name)], 0, i64::MAX, 10)
                .expect("select")
                .into_iter()
                .flat_map(|x| x.samples)
                .map(|p| p.ts_ms)
                .collect()
        };
        assert_eq!(pts("stale_b"), vec![200_000]);
        assert_eq!(pts("stale_a"), vec![200_500]);
    }
}
