//! `POST /api/v1/write`: the remote_write v1 receiver. Bodies are checked
//! against the limits before anything is decompressed; samples go into the
//! live store as explicit samples with their labels as sent. Bad input is a
//! 400 with a plain-text reason (as Prometheus answers); the gateway keeps
//! serving.

use std::cell::RefCell;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::RemoteWriteError;
use super::pb::WriteBatch;
use super::resolve::{Resolved, SeriesCache};
use super::sender::Tap;
use super::tracker::TapEvent;
use super::wire::{self, WireLimits};
use crate::store::{Op, Sample, SeriesHint, SharedStore};

/// What the receiver needs.
#[derive(Clone, Debug)]
pub struct ReceiverState {
    /// Where samples go.
    pub store: SharedStore,
    /// Forwards accepted samples to remote_write senders, if any.
    pub tap: Option<Tap>,
    /// Body size limits.
    pub limits: WireLimits,
    /// Series already seen, by their label bytes (shared by all requests).
    pub series: Arc<SeriesCache>,
}

impl ReceiverState {
    /// A receiver storing into `store`, forwarding to `tap`, within `limits`.
    pub fn new(store: SharedStore, tap: Option<Tap>, limits: WireLimits) -> Self {
        ReceiverState {
            store,
            tap,
            limits,
            series: Arc::default(),
        }
    }
}

/// The router holding `POST /api/v1/write`; merge it into the API.
pub fn router(state: ReceiverState) -> Router {
    Router::new()
        .route("/api/v1/write", post(write))
        // The handler enforces its own limit with a clear message.
        .layer(DefaultBodyLimit::disable())
        .with_state(Arc::new(state))
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
    match tokio::task::spawn_blocking(move || ingest(&st2, &bytes)).await {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err((status, msg))) => bad(status, msg),
        Err(e) => bad(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("remote_write ingest failed: {e}"),
        ),
    }
}

/// Samples applied to the store per lock and journal record (bounds how
/// long one request holds the write lock).
const SAMPLES_PER_APPLY: usize = 64 * 1024;

/// Per-thread scratch space is kept between requests only while its
/// decompression buffer is at most this many bytes...
const KEEP_BUFFER_BYTES: usize = 4 << 20;
/// ...and the last request held at most this many samples.
const KEEP_SAMPLES: usize = 256 << 10;

/// Per-thread scratch space of [`ingest`], reused across requests: the
/// decompressed body, the decoded request, and the ops handed to the store
/// (their sample vectors are refilled, not reallocated).
#[derive(Default)]
struct Scratch {
    raw: Vec<u8>,
    batch: WriteBatch,
    resolved: Vec<Resolved>,
    ops: Vec<Op>,
    /// Per op: the store hint its series had, then (after the apply) has.
    hints: Vec<SeriesHint>,
    /// Per op: its cache key and the hint it came with.
    keys: Vec<(Option<u64>, SeriesHint)>,
    /// Sample vectors of the previous request's ops, to refill.
    spare: Vec<Vec<Sample>>,
}

/// Sample vectors kept for reuse: at most this many...
const SPARE_VECS: usize = 16 << 10;
/// ...of at most this capacity (a per-thread bound of 4 MiB).
const SPARE_CAPACITY: usize = 16;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Decodes and stores one remote_write body (blocking: it may write the
/// journal); `Err` is the HTTP status and reason to answer. Public for the
/// ingest benchmark (`examples/ingest_bench.rs`).
pub fn ingest(st: &ReceiverState, body: &[u8]) -> Result<(), (StatusCode, String)> {
    SCRATCH.with(|cell| {
        // A fresh scratch if re-entered (never, but not a panic either).
        let mut fresh = Scratch::default();
        let mut guard = cell.try_borrow_mut();
        let sc = match guard.as_deref_mut() {
            Ok(sc) => sc,
            Err(_) => &mut fresh,
        };
        let res = match decode_ops(st, body, sc) {
            Ok(()) => store_ops(st, body, &sc.ops, &mut sc.hints),
            Err(e) => Err((StatusCode::BAD_REQUEST, e.to_string())),
        };
        remember_hints(st, sc);
        if sc.raw.capacity() > KEEP_BUFFER_BYTES || sc.batch.sample_count() > KEEP_SAMPLES {
            *sc = Scratch::default();
        }
        res
    })
}

/// Hands the store hints that changed during the apply to the cache.
fn remember_hints(st: &ReceiverState, sc: &Scratch) {
    let changed = sc.ops.iter().zip(sc.hints.iter().zip(&sc.keys)).filter_map(
        |(op, (now, (key, was)))| match (op, key) {
            (Op::Samples { labels, .. }, Some(k)) if now != was => Some((*k, labels, *now)),
            _ => None,
        },
    );
    let mut changed = changed.peekable();
    if changed.peek().is_some() {
        st.series.remember(changed);
    }
}

/// Applies `ops` (decoded from `body`) to the store in slices of about
/// [`SAMPLES_PER_APPLY`] samples, each with its store hint in `hints`
/// (refreshed by the apply); refused samples make a 400 naming the first
/// reason. A body that fits one slice is handed to the journal as it came
/// (logged as is, not encoded again: see [`crate::wal::record`]).
fn store_ops(
    st: &ReceiverState,
    body: &[u8],
    ops: &[Op],
    hints: &mut [SeriesHint],
) -> Result<(), (StatusCode, String)> {
    let (mut refused, mut total, mut first) = (0usize, 0usize, None::<String>);
    let whole = ops.iter().map(Op::samples).sum::<usize>() < SAMPLES_PER_APPLY;
    let mut apply = |batch: &[Op], hints: &mut [SeriesHint]| -> Result<(), (StatusCode, String)> {
        let each = |i: usize, k: usize, r: Result<(), crate::store::StoreError>| match r {
            Err(e) => {
                refused += 1;
                first.get_or_insert_with(|| e.to_string());
            }
            Ok(()) => {
                if let (Some(tap), Some(Op::Samples { labels, samples })) = (&st.tap, batch.get(i))
                    && let Some(smp) = samples.get(k)
                {
                    tap.send(TapEvent::Explicit {
                        labels: labels.clone(),
                        ts_ms: smp.ts_ms,
                        value: smp.value,
                    });
                }
            }
        };
        let res = if whole {
            st.store.apply_body_hinted(body, batch, hints, each)
        } else {
            st.store.apply_each_hinted(batch, hints, each)
        };
        res.map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("storing samples: {e}"),
            )
        })?;
        total += batch.iter().map(Op::samples).sum::<usize>();
        Ok(())
    };
    let (mut from, mut held) = (0, 0);
    for (i, op) in ops.iter().enumerate() {
        held += op.samples();
        if held >= SAMPLES_PER_APPLY {
            apply(&ops[from..=i], hints.get_mut(from..=i).unwrap_or_default())?;
            (from, held) = (i + 1, 0);
        }
    }
    if from < ops.len() {
        apply(&ops[from..], hints.get_mut(from..).unwrap_or_default())?;
    }
    match first {
        None => Ok(()),
        Some(e) => Err((
            StatusCode::BAD_REQUEST,
            format!("{refused} of {total} samples refused (the others were stored); first: {e}"),
        )),
    }
}

/// Decodes `body` into `sc.ops`, one op per series with samples. Every
/// series is validated before any op is made, so a bad request stores nothing.
fn decode_ops(st: &ReceiverState, body: &[u8], sc: &mut Scratch) -> Result<(), RemoteWriteError> {
    for op in sc.ops.drain(..) {
        if let Op::Samples { samples, .. } = op
            && samples.capacity() <= SPARE_CAPACITY
            && sc.spare.len() < SPARE_VECS
        {
            sc.spare.push(samples);
        }
    }
    let n = wire::decompress_into(body, &st.limits, &mut sc.raw)?;
    let raw = sc.raw.get(..n).unwrap_or_default();
    sc.batch
        .decode(raw)
        .map_err(|e| RemoteWriteError::Protobuf(e.to_string()))?;
    sc.hints.clear();
    sc.keys.clear();
    st.series.resolve_hinted(raw, &sc.batch, &mut sc.resolved)?;
    let views = sc.batch.series_views();
    for (s, r) in views.iter().zip(sc.resolved.drain(..)) {
        let samples = sc.batch.samples(s);
        if samples.is_empty() {
            continue;
        }
        // Reuse the sample vector of a previous request's op when there is one.
        let mut v = sc.spare.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(samples);
        sc.ops.push(Op::Samples {
            labels: r.labels,
            samples: v,
        });
        sc.hints.push(r.hint);
        sc.keys.push((r.key, r.hint));
    }
    Ok(())
}

/// The ops [`ingest`] makes of `body` (with no store hints), appended to
/// `out`: how the write-ahead log replays a body it recorded as it came.
/// `cache` spares re-parsing label sets seen before.
pub fn body_ops(
    body: &[u8],
    limits: &WireLimits,
    cache: &SeriesCache,
    out: &mut Vec<Op>,
) -> Result<(), RemoteWriteError> {
    let mut raw = Vec::new();
    let n = wire::decompress_into(body, limits, &mut raw)?;
    let raw = raw.get(..n).unwrap_or_default();
    let mut batch = WriteBatch::default();
    batch
        .decode(raw)
        .map_err(|e| RemoteWriteError::Protobuf(e.to_string()))?;
    let mut resolved = Vec::new();
    cache.resolve_hinted(raw, &batch, &mut resolved)?;
    for (s, r) in batch.series_views().iter().zip(resolved) {
        let samples = batch.samples(s);
        if !samples.is_empty() {
            out.push(Op::Samples {
                labels: r.labels,
                samples: samples.to_vec(),
            });
        }
    }
    Ok(())
}
