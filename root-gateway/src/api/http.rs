//! The Prometheus-compatible HTTP API (axum). Thin: read parameters, run
//! the engine on a blocking thread with a deadline, write Prometheus' JSON.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value as Json_, json};

use super::params::{Params, parse_duration, parse_time};
use super::{ApiError, HttpStatus};
use crate::promql::{Engine, Matrix, PromqlError, Value, format_value, parse_selector};
use crate::store::{Labels, MatchOp, Matcher, Querier};
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
        }
    }
}

/// The `/api/v1` router.
pub fn router(state: ApiState) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route("/api/v1/query", get(query).post(query))
        .route("/api/v1/query_range", get(query_range).post(query_range))
        .route("/api/v1/series", get(series).post(series))
        .route("/api/v1/labels", get(labels).post(labels))
        .route("/api/v1/label/{name}/values", get(label_values))
        .route("/api/v1/metadata", get(metadata))
        .route("/api/v1/status/buildinfo", get(buildinfo))
        .route("/api/v1/query_exemplars", get(exemplars).post(exemplars))
        .layer(DefaultBodyLimit::max(limit))
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
    f: impl FnOnce(&dyn Querier, &Engine, &(dyn Fn() -> bool + Sync)) -> Result<T, PromqlError>
    + Send
    + 'static,
) -> Result<T, ApiError> {
    let q = Arc::clone(&st.querier);
    let e = Arc::clone(&st.engine);
    let deadline = Instant::now() + st.query_timeout;
    let res = tokio::task::spawn_blocking(move || {
        let cancel = move || Instant::now() >= deadline;
        f(q.as_ref(), &e, &cancel)
    })
    .await
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    res.map_err(|e| {
        if e.status().is_server_error() {
            tracing::warn!(error = %e, "query failed");
        }
        ApiError::Promql(e)
    })
}

async fn query(State(st): State<ApiState>, p: Params) -> Result<Json<Json_>, ApiError> {
    let q = required(&p, "query")?.to_string();
    let t = time_param(&p, "time", (st.now_ms)())?;
    let v = run_blocking(&st, move |qr, e, c| e.instant_with_cancel(qr, &q, t, c)).await?;
    Ok(success(value_json(&v)))
}

async fn query_range(State(st): State<ApiState>, p: Params) -> Result<Json<Json_>, ApiError> {
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
    let m = run_blocking(&st, move |qr, e, c| {
        e.range_with_cancel(qr, &q, start, end, step, c)
    })
    .await?;
    Ok(success(
        json!({"resultType": "matrix", "result": matrix_json(&m)}),
    ))
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

fn matching_series(
    st: &ApiState,
    p: &Params,
    required: bool,
) -> Result<BTreeSet<Labels>, ApiError> {
    let sets = selectors(st, p, required)?;
    let start = time_param(p, "start", i64::MIN / 2)?;
    let end = time_param(p, "end", i64::MAX / 2)?;
    let mut out = BTreeSet::new();
    for m in sets {
        out.extend(st.querier.series(&m, start, end, st.max_series)?);
    }
    Ok(out)
}

async fn series(State(st): State<ApiState>, p: Params) -> Result<Json<Json_>, ApiError> {
    let s = matching_series(&st, &p, true)?;
    Ok(success(Json_::Array(s.iter().map(json_labels).collect())))
}

async fn labels(State(st): State<ApiState>, p: Params) -> Result<Json<Json_>, ApiError> {
    let s = matching_series(&st, &p, false)?;
    let names: BTreeSet<&str> = s.iter().flat_map(|l| l.iter().map(|(k, _)| k)).collect();
    Ok(success(json!(names)))
}

async fn label_values(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    p: Params,
) -> Result<Json<Json_>, ApiError> {
    let s = matching_series(&st, &p, false)?;
    let vals: BTreeSet<&str> = s.iter().filter_map(|l| l.get(&name)).collect();
    Ok(success(json!(vals)))
}

async fn metadata() -> Json<Json_> {
    success(json!({}))
}

async fn exemplars() -> Json<Json_> {
    success(json!([]))
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
