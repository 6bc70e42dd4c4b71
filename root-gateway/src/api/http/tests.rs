#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value as J;
use tower::ServiceExt;

use super::{ApiState, append_annotations, router};
use crate::promql::{Engine, EngineOpts};
use crate::store::{Appender, Labels, LiveStore, LiveStoreConfig, SharedStore};

fn app() -> axum::Router {
    app_with(std::time::Duration::from_secs(120))
}

fn app_with(query_timeout: std::time::Duration) -> axum::Router {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    for i in 0..=60 {
        let t = i * 10_000;
        s.append(
            None,
            &Labels::metric("req_total", [("job", "a")]),
            t,
            i as f64 * 10.0,
        )
        .unwrap();
        s.append(None, &Labels::metric("temp", [("job", "b")]), t, 1.5)
            .unwrap();
    }
    let mut st = ApiState::new(
        Arc::new(SharedStore::new(s)),
        Arc::new(Engine::new(EngineOpts::default())),
    );
    st.now_ms = Arc::new(|| 600_000);
    st.query_timeout = query_timeout;
    router(st)
}

async fn call(req: Request<Body>) -> (StatusCode, J) {
    call_on(app(), req).await
}

/// `req` on `app`: the status and the JSON body.
async fn call_on(app: axum::Router, req: Request<Body>) -> (StatusCode, J) {
    let resp = app.oneshot(req).await.unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

async fn get(uri: &str) -> (StatusCode, J) {
    call(Request::get(uri).body(Body::empty()).unwrap()).await
}

#[tokio::test]
async fn instant_query_vector_shape() {
    let (st, j) = get("/api/v1/query?query=temp&time=300").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(j["status"], "success");
    assert_eq!(j["data"]["resultType"], "vector");
    assert_eq!(j["data"]["result"][0]["metric"]["job"], "b");
    assert_eq!(j["data"]["result"][0]["value"][0], 300);
    assert_eq!(j["data"]["result"][0]["value"][1], "1.5");
}

/// On a multi-thread runtime queries run in place (`block_in_place`):
/// the same answers, and the deadline still applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_run_in_place_on_a_multi_thread_runtime() {
    let (st, j) =
        get("/api/v1/query?query=sum%20by%20(job)%20(rate(req_total%5B1m%5D))&time=300").await;
    assert_eq!(st, StatusCode::OK, "{j}");
    assert_eq!(j["data"]["result"][0]["metric"]["job"], "a");
    assert_eq!(j["data"]["result"][0]["value"][1], "1");
    let (st, j) = get("/api/v1/query_range?query=temp&start=0&end=600&step=60").await;
    assert_eq!(st, StatusCode::OK, "{j}");
    assert_eq!(j["data"]["result"][0]["values"][10][1], "1.5");
    // A deadline already passed: the evaluation stops with a timeout.
    let req = Request::get("/api/v1/query?query=sum_over_time(temp%5B10m%3A1s%5D)&time=600")
        .body(Body::empty())
        .unwrap();
    let resp = app_with(std::time::Duration::ZERO)
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn post_form_and_rfc3339() {
    let req = Request::post("/api/v1/query")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(
            "query=rate(req_total%5B1m%5D)&time=1970-01-01T00:05:00Z",
        ))
        .unwrap();
    let (st, j) = call(req).await;
    assert_eq!(st, StatusCode::OK, "{j}");
    assert_eq!(j["data"]["result"][0]["value"][1], "1");
    assert!(j["data"]["result"][0]["metric"].get("__name__").is_none());
}

#[tokio::test]
async fn range_query_matrix() {
    let (st, j) = get("/api/v1/query_range?query=temp&start=0&end=60&step=15s").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(j["data"]["resultType"], "matrix");
    assert_eq!(
        j["data"]["result"][0]["values"].as_array().map(Vec::len),
        Some(5)
    );
}

/// Warnings reach the response as Prometheus 3 returns them (`"warnings"`
/// beside `"data"`), on the range, vector and scalar paths alike, and a
/// query without any has no such key.
#[tokio::test]
async fn query_warnings_reach_the_response() {
    let sorted = "PromQL warning: sort is ineffective for range queries since results are always ordered by labels (1:1)";
    let (st, j) = get("/api/v1/query_range?query=sort(temp)&start=0&end=60&step=15s").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(j["status"], "success");
    assert_eq!(j["warnings"], serde_json::json!([sorted]));
    assert!(j.get("infos").is_none(), "{j}");
    assert_eq!(
        j["data"]["result"][0]["values"].as_array().map(Vec::len),
        Some(5)
    );

    let (_, j) = get("/api/v1/query?query=sort(temp)&time=300").await;
    assert!(j.get("warnings").is_none(), "{j}");
    assert_eq!(j["data"]["result"][0]["value"][1], "1.5");

    let (_, j) = get("/api/v1/query?query=quantile(2,temp)&time=300").await;
    assert_eq!(
        j["warnings"],
        serde_json::json!([
            "PromQL warning: quantile value should be between 0 and 1, got 2 (1:10)"
        ])
    );
    assert_eq!(j["data"]["result"][0]["value"][1], "+Inf");

    let (_, j) = get("/api/v1/query?query=scalar(quantile(-1,temp))&time=300").await;
    assert_eq!(j["data"]["resultType"], "scalar");
    assert_eq!(j["warnings"].as_array().map(Vec::len), Some(1), "{j}");
}

/// Infos and warnings go to their own keys; no annotation leaves the body
/// as it was.
#[test]
fn annotations_split_into_infos_and_warnings() {
    let body = br#"{"data":{},"status":"success"}"#.to_vec();
    let mut out = body.clone();
    append_annotations(&mut out, &[]);
    assert_eq!(out, body);
    append_annotations(
        &mut out,
        &[
            "PromQL warning: w (1:1)".into(),
            "PromQL info: i \"x\" (1:2)".into(),
        ],
    );
    let j: J = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        j["warnings"],
        serde_json::json!(["PromQL warning: w (1:1)"])
    );
    assert_eq!(
        j["infos"],
        serde_json::json!(["PromQL info: i \"x\" (1:2)"])
    );
    assert_eq!(j["status"], "success");
}

/// The store's cardinality in Prometheus's `/api/v1/status/tsdb` shape,
/// the lists cut to `limit` and ordered by count, then name.
#[tokio::test]
async fn tsdb_status_reports_cardinality() {
    let (st, j) = get("/api/v1/status/tsdb").await;
    assert_eq!(st, StatusCode::OK);
    let d = &j["data"];
    assert_eq!(
        d["headStats"],
        serde_json::json!({"numSeries": 2, "numLabelPairs": 4, "chunkCount": 2,
                           "minTime": 0, "maxTime": 600_000})
    );
    assert_eq!(
        d["seriesCountByMetricName"],
        serde_json::json!([{"name": "req_total", "value": 1}, {"name": "temp", "value": 1}])
    );
    assert_eq!(
        d["memoryInBytesByLabelName"],
        serde_json::json!([{"name": "__name__", "value": 13}, {"name": "job", "value": 2}])
    );
    assert_eq!(
        d["seriesCountByLabelValuePair"][3],
        serde_json::json!({"name": "job=b", "value": 1})
    );
    let (_, j) = get("/api/v1/status/tsdb?limit=1").await;
    assert_eq!(
        j["data"]["labelValueCountByLabelName"],
        serde_json::json!([{"name": "__name__", "value": 2}])
    );
    let (st, j) = get("/api/v1/status/tsdb?limit=0").await;
    assert_eq!(
        (st, &j["errorType"]),
        (StatusCode::BAD_REQUEST, &serde_json::json!("bad_data"))
    );
}

/// Larger counts come first; ties go by name.
#[test]
fn cardinality_lists_are_ordered_by_count() {
    let postings = [
        ("__name__", "a", 1),
        ("__name__", "b", 5),
        ("job", "x", 5),
        ("job", "y", 1),
        ("job", "z", 1),
        ("node", "n1", 3),
    ];
    let c = crate::store::Cardinality::from_postings(postings.iter().copied(), 2);
    assert_eq!(c.num_label_pairs, 6);
    assert_eq!(
        c.series_by_metric,
        vec![("b".to_string(), 5), ("a".to_string(), 1)]
    );
    assert_eq!(
        c.values_by_label,
        vec![("job".to_string(), 3), ("__name__".to_string(), 2)]
    );
    assert_eq!(
        c.series_by_pair,
        vec![("__name__=b".to_string(), 5), ("job=x".to_string(), 5)]
    );
    assert_eq!(c.bytes_by_label[0], ("job".to_string(), 7));
}

/// The probes answer 200 with a plain line; rules and alerts answer
/// Prometheus's empty shapes.
#[tokio::test]
async fn probes_rules_and_alerts() {
    let (st, body) = text("/-/healthy").await;
    assert_eq!(
        (st, body.as_str()),
        (StatusCode::OK, "Canopy gateway is Healthy.\n")
    );
    let (st, body) = text("/-/ready").await;
    assert_eq!(
        (st, body.as_str()),
        (StatusCode::OK, "Canopy gateway is Ready.\n")
    );
    let (st, j) = get("/api/v1/rules").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(j["data"]["groups"], serde_json::json!([]));
    let (_, j) = get("/api/v1/alerts").await;
    assert_eq!(j["data"]["alerts"], serde_json::json!([]));
}

#[tokio::test]
async fn scalar_and_special_values() {
    let (_, j) = get("/api/v1/query?query=1%2F0&time=1").await;
    assert_eq!(j["data"]["resultType"], "scalar");
    assert_eq!(j["data"]["result"][1], "+Inf");
    let (_, j) = get("/api/v1/query?query=0%2F0&time=1.5").await;
    assert_eq!(j["data"]["result"][0], 1.5);
    assert_eq!(j["data"]["result"][1], "NaN");
}

#[tokio::test]
async fn errors_map_to_prometheus_types() {
    let (st, j) = get("/api/v1/query?query=sum(").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(j["errorType"], "bad_data");
    let (st, j) = get("/api/v1/query_range?query=up&start=10&end=0&step=1").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert_eq!(j["errorType"], "bad_data");
    let (st, j) = get("/api/v1/query?query=temp%20%2B%20on()%20group_left%20req_total%20or%20(temp%20*%20on()%20req_total)&time=300").await;
    assert_eq!(st, StatusCode::OK, "{j}");
    let (st, j) =
        get("/api/v1/query?query=label_replace(temp,%22x%22,%22y%22,%22job%22,%22(%22)&time=300")
            .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(j["errorType"], "execution");
    let deep = format!(
        "/api/v1/query?query={}1{}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    let (st, _) = get(&deep).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, _) = get("/api/v1/query_range?query=temp&start=0&end=100000000&step=1").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn series_labels_values() {
    let (st, j) = get("/api/v1/series?match[]=temp&match[]=%7Bjob%3D~%22a%7Cz%22%7D").await;
    assert_eq!(st, StatusCode::OK, "{j}");
    assert_eq!(j["data"].as_array().map(Vec::len), Some(2));
    let (st, _) = get("/api/v1/series").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (_, j) = get("/api/v1/labels").await;
    assert_eq!(j["data"], serde_json::json!(["__name__", "job"]));
    let (_, j) = get("/api/v1/label/__name__/values").await;
    assert_eq!(j["data"], serde_json::json!(["req_total", "temp"]));
    let (_, j) = get("/api/v1/label/job/values?match[]=temp").await;
    assert_eq!(j["data"], serde_json::json!(["b"]));
}

#[tokio::test]
async fn misc_endpoints() {
    for uri in [
        "/api/v1/metadata",
        "/api/v1/status/buildinfo",
        "/api/v1/query_exemplars?query=up",
    ] {
        let (st, j) = get(uri).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(j["status"], "success");
    }
}

#[tokio::test]
async fn body_limit_enforced() {
    let big = format!("query={}", "a".repeat(2 << 20));
    let req = Request::post("/api/v1/query")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(big))
        .unwrap();
    let (st, j) = call(req).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{j}");
    assert_eq!(j["errorType"], "bad_data");
}

async fn text(uri: &str) -> (StatusCode, String) {
    let resp = app()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn metadata_follows_the_naming_contract() {
    let (st, j) = get("/api/v1/metadata").await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(j["data"]["req_total"][0]["type"], "counter");
    assert_eq!(j["data"]["temp"][0]["type"], "gauge");
    assert!(j["data"]["req_total"][0]["help"].is_string());
    assert_eq!(j["data"]["req_total"][0]["unit"], "");
    let (_, j) = get("/api/v1/metadata?metric=temp").await;
    assert_eq!(j["data"].as_object().map(|o| o.len()), Some(1));
    let (kind, _, unit) = crate::api::federate::metadata_of("canopy_node_cpu_seconds_total");
    assert_eq!((kind, unit), ("counter", "seconds"));
    let (kind, _, unit) = crate::api::federate::metadata_of("canopy_job_memory_bytes");
    assert_eq!((kind, unit), ("gauge", "bytes"));
}

#[tokio::test]
async fn federate_answers_text_exposition() {
    let (st, body) = text("/federate?match[]=req_total&match[]=%7Bjob%3D%22b%22%7D").await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(body.contains("# TYPE req_total untyped\n"), "{body}");
    // Newest sample at or before now (600 s): t=600 s, value 600.
    assert!(body.contains("req_total{job=\"a\"} 600 600000\n"), "{body}");
    assert!(body.contains("temp{job=\"b\"} 1.5 600000\n"), "{body}");
    let (st, _) = text("/federate").await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn self_metrics_count_requests() {
    let a = app();
    for uri in ["/api/v1/query?query=temp", "/api/v1/query?query=sum("] {
        let r = a
            .clone()
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert!(r.status() == StatusCode::OK || r.status() == StatusCode::BAD_REQUEST);
    }
    let resp = a
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        body.contains("canopy_gateway_http_requests_total{handler=\"/api/v1/query\"} 2\n"),
        "{body}"
    );
    assert!(
        body.contains(
            "canopy_gateway_http_request_errors_total{handler=\"/api/v1/query\",class=\"4xx\"} 1\n"
        ),
        "{body}"
    );
    assert!(body.contains("# TYPE canopy_gateway_http_request_duration_seconds histogram"));
}

#[tokio::test]
async fn post_forms_limits_and_bad_params() {
    let req = Request::post("/api/v1/label/job/values")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("match[]=temp&start=0&end=1970-01-01T00:10:00Z"))
        .unwrap();
    let (st, j) = call(req).await;
    assert_eq!(st, StatusCode::OK, "{j}");
    assert_eq!(j["data"], serde_json::json!(["b"]));
    let req = Request::post("/api/v1/series")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from("match[]=%7Bjob%3D~%22.%2B%22%7D&limit=1"))
        .unwrap();
    let (st, j) = call(req).await;
    assert_eq!(st, StatusCode::OK, "{j}");
    assert_eq!(j["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(j["warnings"][0], "results truncated due to limit");
    // Series with data only inside [start, end].
    let (_, j) = get("/api/v1/series?match[]=temp&start=700&end=800").await;
    assert_eq!(j["data"].as_array().map(Vec::len), Some(0));
    for uri in [
        "/api/v1/series?match[]=temp&start=10&end=5",
        "/api/v1/labels?start=yesterday",
        "/api/v1/label/bad-name/values",
        "/api/v1/labels?limit=x",
        "/api/v1/query?query=temp&timeout=never",
        "/api/v1/query_exemplars",
        "/api/v1/query_range?query=temp&start=0&end=12000&step=1",
    ] {
        let (st, j) = get(uri).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{uri}: {j}");
        assert_eq!(j["errorType"], "bad_data", "{uri}");
    }
    let (st, _) = get("/api/v1/query?query=temp&timeout=5s&time=300").await;
    assert_eq!(st, StatusCode::OK);
}

#[test]
fn matrix_body_is_what_serde_json_writes() {
    use crate::promql::{Point, RangeSeries};
    let pts = |v: &[(i64, f64)]| v.iter().map(|&(t, v)| Point { t, v }).collect();
    let m = vec![
        RangeSeries {
            labels: Labels::default(),
            points: pts(&[(0, 0.0), (1_500, -2.5e-300), (-1_000, 1e21)]),
            drop_name: false,
            start_ms: Vec::new(),
        },
        RangeSeries {
            labels: Labels::metric(
                "a_total",
                [
                    ("quote", "say \"hi\"\\ \u{1}\u{7f}"),
                    ("unicode", "zürich ✓"),
                    ("zz", "1"),
                ],
            ),
            points: pts(&[
                (1_700_000_000_123, f64::NAN),
                (1_700_000_015_000, f64::INFINITY),
                (1_700_000_030_001, f64::NEG_INFINITY),
                (1_700_000_045_000, 0.1 + 0.2),
                (1_700_000_060_000, 123_456_789.0),
            ]),
            drop_name: false,
            start_ms: Vec::new(),
        },
    ];
    let mut got = Vec::new();
    super::write_matrix_body(&m, &mut got);
    let want = serde_json::to_vec(
        &super::success(serde_json::json!({
            "resultType": "matrix",
            "result": super::matrix_json(&m),
        }))
        .0,
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(got).unwrap(),
        String::from_utf8(want).unwrap()
    );
}

#[test]
fn vector_body_is_what_serde_json_writes() {
    use crate::promql::VectorSample;
    let tricky = Labels::metric(
        "a_total",
        [
            ("quote", "say \"hi\"\\ \u{1}\u{7f}"),
            ("unicode", "zürich ✓"),
            ("zz", "1"),
        ],
    );
    let sample = |labels: Labels, t: i64, v: f64| VectorSample {
        labels,
        t,
        v,
        drop_name: false,
    };
    let cases = [
        Vec::new(),
        vec![sample(Labels::default(), 0, 0.0)],
        vec![
            sample(tricky.clone(), 1_700_000_000_123, f64::NAN),
            sample(
                Labels::metric("b", [("x", "1")]),
                1_700_000_015_000,
                f64::INFINITY,
            ),
            sample(tricky, -1_000, f64::NEG_INFINITY),
            sample(Labels::from_pairs([("job", "j")]), 1_500, 0.1 + 0.2),
            sample(Labels::from_pairs([("job", "k")]), 15_000, -2.5e-300),
            sample(Labels::from_pairs([("job", "l")]), 15_000, 1e21),
        ],
    ];
    for v in cases {
        let mut got = Vec::new();
        super::write_vector_body(&v, &mut got);
        let want = serde_json::to_vec(
            &super::success(super::value_json(&crate::promql::Value::Vector(v))).0,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }
}

#[tokio::test]
async fn the_stress_thresholds_are_served_as_configured() {
    let mut st = ApiState::new(
        Arc::new(SharedStore::new(LiveStore::new(LiveStoreConfig::default()))),
        Arc::new(Engine::new(EngineOpts::default())),
    );
    let t = crate::stress::Thresholds {
        cpu_under: 0.25,
        io_min_bytes_per_sec: 1e6,
        ..Default::default()
    };
    st.thresholds = Arc::new(t.clone());
    let (status, j) = call_on(
        router(st),
        Request::get("/api/v1/status/stress_thresholds")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(j["status"], "success");
    assert_eq!(j["data"]["cpu_under"], 0.25);
    // The same shape as the config file's [thresholds]: it reads back.
    let back: crate::stress::Thresholds = serde_json::from_value(j["data"].clone()).unwrap();
    assert_eq!(back, t);
}
