//! `POST /api/v1/write`: the remote_write v1 receiver. Bodies are checked
//! against the limits before anything is decompressed; samples go into the
//! live store as explicit samples with their labels as sent. Bad input is a
//! 400 with a plain-text reason (as Prometheus answers); the gateway keeps
//! serving.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::RemoteWriteError;
use super::sender::Tap;
use super::tracker::TapEvent;
use super::wire::{self, WireLimits};
use crate::store::{Op, Sample, SharedStore};

/// What the receiver needs.
#[derive(Clone, Debug)]
pub struct ReceiverState {
    /// Where samples go.
    pub store: SharedStore,
    /// Forwards accepted samples to remote_write senders, if any.
    pub tap: Option<Tap>,
    /// Body size limits.
    pub limits: WireLimits,
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

/// Decodes and stores one remote_write body (blocking: it may write the
/// journal); `Err` is the HTTP status and reason to answer. Public for the
/// ingest benchmark (`examples/ingest_bench.rs`).
pub fn ingest(st: &ReceiverState, body: &[u8]) -> Result<(), (StatusCode, String)> {
    let bad_data = |e: RemoteWriteError| (StatusCode::BAD_REQUEST, e.to_string());
    let req = wire::decode(body, &st.limits).map_err(bad_data)?;
    // Validate every series before storing any, so a bad request stores
    // nothing. One op per series: its labels are resolved once, not per sample.
    let mut ops: Vec<Op> = Vec::with_capacity(req.timeseries.len());
    for ts in &req.timeseries {
        let labels = wire::labels_of(ts).map_err(bad_data)?;
        if labels.name().is_empty() {
            return Err(bad_data(RemoteWriteError::BadLabels(format!(
                "series {labels} has no metric name (__name__)"
            ))));
        }
        if ts.samples.is_empty() {
            continue;
        }
        let samples = ts
            .samples
            .iter()
            .map(|s| Sample {
                ts_ms: s.timestamp,
                value: s.value,
            })
            .collect();
        ops.push(Op::Samples { labels, samples });
    }
    drop(req);
    let (mut refused, mut total, mut first) = (0usize, 0usize, None::<String>);
    let mut apply = |batch: &[Op]| -> Result<(), (StatusCode, String)> {
        st.store
            .apply_each(batch, |i, k, r| match r {
                Err(e) => {
                    refused += 1;
                    first.get_or_insert_with(|| e.to_string());
                }
                Ok(()) => {
                    if let (Some(tap), Some(Op::Samples { labels, samples })) =
                        (&st.tap, batch.get(i))
                        && let Some(smp) = samples.get(k)
                    {
                        tap.send(TapEvent::Explicit {
                            labels: labels.clone(),
                            ts_ms: smp.ts_ms,
                            value: smp.value,
                        });
                    }
                }
            })
            .map_err(|e| {
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
            apply(&ops[from..=i])?;
            (from, held) = (i + 1, 0);
        }
    }
    if from < ops.len() {
        apply(&ops[from..])?;
    }
    match first {
        None => Ok(()),
        Some(e) => Err((
            StatusCode::BAD_REQUEST,
            format!("{refused} of {total} samples refused (the others were stored); first: {e}"),
        )),
    }
}
