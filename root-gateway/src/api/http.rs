//! The Prometheus-compatible HTTP API (axum). Thin: read parameters, run
//! the engine on a blocking thread with a deadline, write Prometheus' JSON.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value as Json_, json};

use super::federate::{federate as federate_text, metadata_of};
use super::params::{Params, parse_duration, parse_time};
use super::selfmetrics::{self, ApiMetrics, Exporter};
use super::{ApiError, HttpStatus};
use crate::auth::Auth;
use crate::auth::http::{Scoped, access, guard};
use crate::promql::{Engine, Matrix, PromqlError, Value, format_value, parse_selector};
use crate::store::{Labels, MatchOp, Matcher, Querier};
use crate::stress::Thresholds;
use canopy_proto::model::METRIC_NAME;

/// Shared state of the HTTP API.
#[derive(Clone)]
pub struct ApiState {
    /// Where queries read.
    pub querier: Arc<dyn Querier + Send + Sync>,
    /// The PromQL engine.
    pub engine: Arc<Engine>,
    /// Per-query time limit.
    pub query_timeout: Duration,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// Most series returned by the metadata endpoints.
    pub max_series: usize,
    /// Current time in ms, for queries without `time` (the shell's clock).
    pub now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    /// Request counters of this API (served at `/metrics`).
    pub api_metrics: Arc<ApiMetrics>,
    /// More of the gateway's own metrics for `/metrics` (store, WAL, ingest).
    pub exporters: Vec<Exporter>,
    /// Who may call what (open by default; see [`crate::auth`]).
    pub auth: Auth,
    /// Where the stress verdicts draw their lines (served at
    /// `/api/v1/status/stress_thresholds`, so `canopy jobs` and the
    /// dashboard judge as the gRPC API does).
    pub thresholds: Arc<Thresholds>,
}

impl ApiState {
    /// State with default limits (2 min timeout, 1 MiB bodies) and the system clock.
    pub fn new(querier: Arc<dyn Querier + Send + Sync>, engine: Arc<Engine>) -> Self {
        ApiState {
            querier,
            engine,
            query_timeout: Duration::from_secs(120),
            max_body_bytes: 1 << 20,
            max_series: 100_000,
            now_ms: Arc::new(canopy_proto::link::unix_now_ms),
            api_metrics: Arc::new(ApiMetrics::default()),
            exporters: Vec::new(),
            auth: Auth::open(),
            thresholds: Arc::new(Thresholds::default()),
        }
    }
}

/// The router: `/api/v1/*`, `/federate`, `/metrics` and the `/-/healthy`
/// and `/-/ready` probes, every route behind the access-control [`guard`]
/// (which lets the probes through without a token).
pub fn router(state: ApiState) -> Router {
    let limit = state.max_body_bytes;
    let m = Arc::clone(&state.api_metrics);
    let auth = state.auth.clone();
    Router::new()
        .route("/api/v1/query", get(query).post(query))
        .route("/api/v1/query_range", get(query_range).post(query_range))
        .route("/api/v1/series", get(series).post(series))
        .route("/api/v1/labels", get(labels).post(labels))
        .route(
            "/api/v1/label/{name}/values",
            get(label_values).post(label_values),
        )
        .route("/api/v1/metadata", get(metadata).post(metadata))
        .route("/api/v1/status/buildinfo", get(buildinfo).post(buildinfo))
        .route("/api/v1/status/access", get(access).post(access))
        .route(
            "/api/v1/status/stress_thresholds",
            get(thresholds).post(thresholds),
        )
        .route("/api/v1/query_exemplars", get(exemplars).post(exemplars))
        .route("/api/v1/status/tsdb", get(tsdb_status).post(tsdb_status))
        .route("/api/v1/rules", get(rules).post(rules))
        .route("/api/v1/alerts", get(alerts).post(alerts))
        .route("/-/healthy", get(healthy).head(healthy))
        .route("/-/ready", get(ready).head(ready))
        .route("/federate", get(federate).post(federate))
        .route("/metrics", get(self_metrics))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(auth, guard))
        .layer(axum::middleware::from_fn_with_state(m, selfmetrics::track))
        .with_state(state)
}

fn success(data: Json_) -> Json<Json_> {
    Json(json!({ "status": "success", "data": data }))
}

fn json_ts(ms: i64) -> Json_ {
    if ms % 1000 == 0 {
        json!(ms / 1000)
    } else {
        json!(ms as f64 / 1000.0)
    }
}

fn json_labels(l: &Labels) -> Json_ {
    let mut m = Map::new();
    for (k, v) in l.iter() {
        m.insert(k.to_string(), Json_::String(v.to_string()));
    }
    Json_::Object(m)
}

fn matrix_json(m: &Matrix) -> Json_ {
    Json_::Array(
        m.iter()
            .map(|s| {
                json!({
                    "metric": json_labels(&s.labels),
                    "values": s.points.iter().map(|p| json!([json_ts(p.t), format_value(p.v)])).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

fn value_json(v: &Value) -> Json_ {
    match v {
        Value::Scalar { t, v } => {
            json!({"resultType": "scalar", "result": [json_ts(*t), format_value(*v)]})
        }
        Value::String { t, s } => json!({"resultType": "string", "result": [json_ts(*t), s]}),
        Value::Vector(vec) => json!({
            "resultType": "vector",
            "result": vec.iter().map(|s| json!({
                "metric": json_labels(&s.labels),
                "value": [json_ts(s.t), format_value(s.v)],
            })).collect::<Vec<_>>(),
        }),
        Value::Matrix(m) => json!({"resultType": "matrix", "result": matrix_json(m)}),
    }
}

fn required<'a>(p: &'a Params, key: &str) -> Result<&'a str, ApiError> {
    p.get(key)
        .ok_or_else(|| ApiError::BadData(format!("invalid parameter \"{key}\": missing")))
}

fn time_param(p: &Params, key: &str, default: i64) -> Result<i64, ApiError> {
    match p.get(key) {
        None | Some("") => Ok(default),
        Some(s) => parse_time(s).ok_or_else(|| {
            ApiError::BadData(format!(
                "invalid parameter \"{key}\": cannot parse {s:?} to a valid timestamp"
            ))
        }),
    }
}

/// Runs a CPU-bound evaluation off the async threads, with a deadline.
async fn run_blocking<T: Send + 'static>(
    st: &ApiState,
    p: &Params,
    f: impl FnOnce(&dyn Querier, &Engine, &(dyn Fn() -> bool + Sync)) -> Result<T, PromqlError>
    + Send
    + 'static,
) -> Result<T, ApiError> {
    let q = Arc::clone(&st.querier);
    let e = Arc::clone(&st.engine);
    // A `timeout` parameter may shorten, never lengthen, the server's limit.
    let timeout = match p.get("timeout").filter(|t| !t.is_empty()) {
        None => st.query_timeout,
        Some(t) => {
            let ms = parse_duration(t).filter(|ms| *ms > 0).ok_or_else(|| {
                ApiError::BadData(format!(
                    "invalid parameter \"timeout\": cannot parse {t:?} to a valid duration"
                ))
            })?;
            st.query_timeout
                .min(Duration::from_millis(ms.unsigned_abs()))
        }
    };
    let deadline = Instant::now() + timeout;
    let run = move || {
        let cancel = move || Instant::now() >= deadline;
        f(q.as_ref(), &e, &cancel)
    };
    let res = if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        // On this thread: the worker's other tasks move to another thread
        // instead of the query waiting for a blocking-pool thread to wake
        // and the answer for this one to wake again (two cross-thread
        // wake-ups per query, most of a small query's latency on a busy
        // machine). A panic is caught as spawn_blocking would catch it.
        tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                .map_err(|_| ApiError::Internal("query evaluation panicked".into()))
        })?
    } else {
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?
    };
    res.map_err(|e| {
        if e.status().is_server_error() {
            tracing::warn!(error = %e, "query failed");
        }
        ApiError::Promql(e)
    })
}

async fn query(Scoped(st): Scoped, p: Params) -> Result<Response, ApiError> {
    let q = required(&p, "query")?.to_string();
    let t = time_param(&p, "time", (st.now_ms)())?;
    let (v, notes) =
        run_blocking(&st, &p, move |qr, e, c| e.instant_annotated(qr, &q, t, c)).await?;
    Ok(match &v {
        Value::Vector(vec) => {
            let mut out = Vec::with_capacity(64 + vec.len() * 160);
            write_vector_body(vec, &mut out);
            append_annotations(&mut out, &notes);
            (
                [(header::CONTENT_TYPE, "application/json")],
                axum::body::Bytes::from(out),
            )
                .into_response()
        }
        _ => {
            let Json(body) = success(value_json(&v));
            let mut out = serde_json::to_vec(&body).unwrap_or_default();
            append_annotations(&mut out, &notes);
            (
                [(header::CONTENT_TYPE, "application/json")],
                axum::body::Bytes::from(out),
            )
                .into_response()
        }
    })
}

/// Adds a query's annotations to a success body that ends with `}`, as
/// Prometheus 3 returns them: `"infos"` for those worded `PromQL info:`,
/// `"warnings"` for the rest (Grafana shows both); nothing when there are
/// none.
fn append_annotations(out: &mut Vec<u8>, notes: &[String]) {
    if notes.is_empty() || out.last() != Some(&b'}') {
        return;
    }
    out.pop();
    let (infos, warnings): (Vec<&String>, Vec<&String>) =
        notes.iter().partition(|n| n.starts_with("PromQL info:"));
    for (key, list) in [("infos", infos), ("warnings", warnings)] {
        if list.is_empty() {
            continue;
        }
        out.extend_from_slice(format!(",\"{key}\":").as_bytes());
        out.extend_from_slice(&serde_json::to_vec(&list).unwrap_or_else(|_| b"[]".to_vec()));
    }
    out.push(b'}');
}

async fn query_range(Scoped(st): Scoped, p: Params) -> Result<Response, ApiError> {
    let q = required(&p, "query")?.to_string();
    let start = parse_time(required(&p, "start")?).ok_or_else(|| {
        ApiError::BadData("invalid parameter \"start\": cannot parse to a valid timestamp".into())
    })?;
    let end = parse_time(required(&p, "end")?).ok_or_else(|| {
        ApiError::BadData("invalid parameter \"end\": cannot parse to a valid timestamp".into())
    })?;
    let step = parse_duration(required(&p, "step")?).ok_or_else(|| {
        ApiError::BadData("invalid parameter \"step\": cannot parse to a valid duration".into())
    })?;
    let (m, notes) = run_blocking(&st, &p, move |qr, e, c| {
        e.range_annotated(qr, &q, (start, end, step), c)
    })
    .await?;
    Ok(matrix_response(&m, &notes))
}

/// The success body of a range query (with its annotations), written straight to bytes: a
/// dashboard's matrix holds tens of thousands of points, and building a
/// `serde_json::Value` per point cost more than evaluating the query. The
/// bytes are what `success(json!({"resultType": "matrix", ...}))` would
/// give (serde_json's compact form, object keys in order).
fn matrix_response(m: &Matrix, notes: &[String]) -> Response {
    let points: usize = m.iter().map(|s| s.points.len()).sum();
    let mut out = Vec::with_capacity(64 + m.len() * 128 + points * 32);
    write_matrix_body(m, &mut out);
    append_annotations(&mut out, notes);
    (
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Bytes::from(out),
    )
        .into_response()
}

/// Writes `{"data":{"result":[...],"resultType":"matrix"},"status":"success"}`.
fn write_matrix_body(m: &Matrix, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"data\":{\"result\":[");
    for (i, s) in m.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_metric(out, &s.labels);
        out.extend_from_slice(b",\"values\":[");
        for (j, p) in s.points.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            write_pair(out, p.t, p.v);
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"],\"resultType\":\"matrix\"},\"status\":\"success\"}");
}

/// Writes `{"data":{"result":[...],"resultType":"vector"},"status":"success"}`,
/// the bytes `success(value_json(..))` gives for a vector, without a
/// `serde_json::Value` (several allocations) per sample.
fn write_vector_body(v: &[crate::promql::VectorSample], out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"data\":{\"result\":[");
    for (i, s) in v.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_metric(out, &s.labels);
        out.extend_from_slice(b",\"value\":");
        write_pair(out, s.t, s.v);
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"resultType\":\"vector\"},\"status\":\"success\"}");
}

/// Writes `{"metric":{"name":"value",...}` (the object left open).
fn write_metric(out: &mut Vec<u8>, labels: &Labels) {
    out.extend_from_slice(b"{\"metric\":{");
    for (j, (k, v)) in labels.iter().enumerate() {
        if j > 0 {
            out.push(b',');
        }
        write_json_str(out, k);
        out.push(b':');
        write_json_str(out, v);
    }
    out.push(b'}');
}

/// Writes `[t,"v"]`: the time in seconds as [`json_ts`] gives it, the
/// value as [`format_value`]'s text.
fn write_pair(out: &mut Vec<u8>, t: i64, v: f64) {
    out.push(b'[');
    if t % 1000 == 0 {
        super::number::write_int(out, t / 1000);
    } else {
        let _ = serde_json::to_writer(&mut *out, &(t as f64 / 1000.0));
    }
    out.extend_from_slice(b",\"");
    // format_value's text (digits, signs, '.', 'e', "NaN", "+Inf", "-Inf"),
    // without its allocation for finite values.
    if v.is_finite() {
        super::number::write_finite(out, v);
    } else {
        out.extend_from_slice(format_value(v).as_bytes());
    }
    out.extend_from_slice(b"\"]");
}

/// Writes `s` as a JSON string, escaped as serde_json escapes it.
fn write_json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f)
    {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

fn selectors(st: &ApiState, p: &Params, required: bool) -> Result<Vec<Vec<Matcher>>, ApiError> {
    let raw = p.all("match[]");
    if raw.is_empty() {
        if required {
            return Err(ApiError::BadData("no match[] parameter provided".into()));
        }
        return Ok(vec![vec![Matcher {
            name: METRIC_NAME.into(),
            op: MatchOp::NotEqual(String::new()),
        }]]);
    }
    raw.iter()
        .map(|s| parse_selector(s, st.engine.opts()).map_err(|e| ApiError::BadData(e.to_string())))
        .collect()
}

/// A `limit` parameter (0 or absent: no limit).
fn limit_param(p: &Params) -> Result<usize, ApiError> {
    match p.get("limit") {
        None | Some("") => Ok(0),
        Some(s) => s.parse::<usize>().map_err(|_| {
            ApiError::BadData(format!(
                "invalid parameter \"limit\": {s:?} is not a number"
            ))
        }),
    }
}

/// `data` truncated to `limit` items, with Prometheus' warning when cut.
fn limited(mut items: Vec<Json_>, limit: usize) -> Json<Json_> {
    if limit > 0 && items.len() > limit {
        items.truncate(limit);
        return Json(json!({
            "status": "success",
            "data": items,
            "warnings": ["results truncated due to limit"],
        }));
    }
    success(Json_::Array(items))
}

fn matching_series(
    st: &ApiState,
    p: &Params,
    required: bool,
) -> Result<BTreeSet<Labels>, ApiError> {
    let sets = selectors(st, p, required)?;
    let start = time_param(p, "start", i64::MIN / 2)?;
    let end = time_param(p, "end", i64::MAX / 2)?;
    if end < start {
        return Err(ApiError::BadData(
            "invalid parameter \"end\": end timestamp must not be before start time".into(),
        ));
    }
    let mut out = BTreeSet::new();
    for m in sets {
        out.extend(st.querier.series(&m, start, end, st.max_series)?);
    }
    Ok(out)
}

async fn series(Scoped(st): Scoped, p: Params) -> Result<Json<Json_>, ApiError> {
    let limit = limit_param(&p)?;
    let s = matching_series(&st, &p, true)?;
    Ok(limited(s.iter().map(json_labels).collect(), limit))
}

async fn labels(Scoped(st): Scoped, p: Params) -> Result<Json<Json_>, ApiError> {
    let limit = limit_param(&p)?;
    let s = matching_series(&st, &p, false)?;
    let names: BTreeSet<&str> = s.iter().flat_map(|l| l.iter().map(|(k, _)| k)).collect();
    Ok(limited(
        names.into_iter().map(|n| json!(n)).collect(),
        limit,
    ))
}

fn valid_label_name(n: &str) -> bool {
    let mut b = n.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

async fn label_values(
    Scoped(st): Scoped,
    Path(name): Path<String>,
    p: Params,
) -> Result<Json<Json_>, ApiError> {
    if !valid_label_name(&name) {
        return Err(ApiError::BadData(format!("invalid label name: {name:?}")));
    }
    let limit = limit_param(&p)?;
    let s = matching_series(&st, &p, false)?;
    let vals: BTreeSet<&str> = s.iter().filter_map(|l| l.get(&name)).collect();
    Ok(limited(vals.into_iter().map(|v| json!(v)).collect(), limit))
}

/// Metric metadata from the naming contract, for every metric name held.
async fn metadata(Scoped(st): Scoped, p: Params) -> Result<Json<Json_>, ApiError> {
    let limit = limit_param(&p)?;
    let only = p.get("metric").filter(|m| !m.is_empty());
    let sel = vec![Matcher {
        name: METRIC_NAME.into(),
        op: match only {
            Some(m) => MatchOp::Equal(m.to_string()),
            None => MatchOp::NotEqual(String::new()),
        },
    }];
    let names: BTreeSet<String> = st
        .querier
        .series(&sel, i64::MIN / 2, i64::MAX / 2, st.max_series)?
        .iter()
        .map(|l| l.name().to_string())
        .collect();
    let mut data = Map::new();
    for n in names {
        if limit > 0 && data.len() >= limit {
            break;
        }
        let (kind, help, unit) = metadata_of(&n);
        data.insert(n, json!([{"type": kind, "help": help, "unit": unit}]));
    }
    Ok(success(Json_::Object(data)))
}

/// `/federate?match[]=...`: the newest sample of each matched series.
async fn federate(Scoped(st): Scoped, p: Params) -> Result<Response, ApiError> {
    let sets = selectors(&st, &p, true)?;
    let now = (st.now_ms)();
    let body = federate_text(
        st.querier.as_ref(),
        &sets,
        now,
        st.engine.opts().lookback_ms,
        st.max_series,
    )?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response())
}

/// `/metrics`: the gateway's own metrics.
async fn self_metrics(State(st): State<ApiState>) -> Response {
    selfmetrics::render(&st.api_metrics, &st.exporters)
}

async fn exemplars(State(_st): State<ApiState>, p: Params) -> Result<Json<Json_>, ApiError> {
    required(&p, "query")?;
    Ok(success(json!([])))
}

/// The stress verdicts' lines this gateway uses (`[thresholds]`), in the
/// shape of its config file.
async fn thresholds(State(st): State<ApiState>) -> Json<Json_> {
    success(serde_json::to_value(&*st.thresholds).unwrap_or(Json_::Null))
}

/// `/api/v1/status/tsdb?limit=N` (admin): the live store's cardinality in
/// Prometheus's shape (`headStats` and the four top-N lists, N 10 by
/// default, at most 10,000): which metric names, labels and pairs hold the
/// most series.
async fn tsdb_status(Scoped(st): Scoped, p: Params) -> Result<Json<Json_>, ApiError> {
    let limit = match limit_param(&p)? {
        0 if p.get("limit").is_none_or(str::is_empty) => 10,
        n @ 1..=10_000 => n,
        n => {
            return Err(ApiError::BadData(format!(
                "invalid parameter \"limit\": {n} is not a number from 1 to 10000"
            )));
        }
    };
    let q = Arc::clone(&st.querier);
    let c = tokio::task::spawn_blocking(move || q.cardinality(limit))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .ok_or_else(|| ApiError::Internal("this store keeps no cardinality statistics".into()))?;
    let list = |v: &[(String, usize)]| {
        v.iter()
            .map(|(name, value)| json!({ "name": name, "value": value }))
            .collect::<Vec<_>>()
    };
    let (min, max) = c.time_range.unwrap_or((i64::MAX, i64::MIN));
    Ok(success(json!({
        "headStats": {
            "numSeries": c.num_series,
            "numLabelPairs": c.num_label_pairs,
            "chunkCount": c.chunk_count,
            "minTime": min,
            "maxTime": max,
        },
        "seriesCountByMetricName": list(&c.series_by_metric),
        "labelValueCountByLabelName": list(&c.values_by_label),
        "memoryInBytesByLabelName": list(&c.bytes_by_label),
        "seriesCountByLabelValuePair": list(&c.series_by_pair),
    })))
}

/// `/api/v1/rules`: Canopy evaluates no recording or alerting rules, so
/// the answer is Prometheus's for a server without any (Grafana's rule
/// and alert views ask it of every Prometheus data source).
async fn rules() -> Json<Json_> {
    success(json!({ "groups": [] }))
}

/// `/api/v1/alerts`: none (no alerting rules), in Prometheus's shape.
async fn alerts() -> Json<Json_> {
    success(json!({ "alerts": [] }))
}

/// `/-/healthy`: the process answers (a liveness probe).
async fn healthy() -> &'static str {
    "Canopy gateway is Healthy.\n"
}

/// `/-/ready`: ready to serve queries. The listener opens only once the
/// store is recovered from its snapshot and write-ahead log, so answering
/// at all means ready, as Prometheus's `/-/ready` does after its TSDB
/// loaded.
async fn ready() -> &'static str {
    "Canopy gateway is Ready.\n"
}

async fn buildinfo() -> Json<Json_> {
    success(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "revision": "",
        "branch": "",
        "buildUser": "canopy",
        "buildDate": "",
        "goVersion": "n/a (canopy, Rust)",
    }))
}

#[cfg(test)]
mod tests;
