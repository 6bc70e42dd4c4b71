//! The gateway's own metrics, served at `/metrics` in the Prometheus text
//! exposition format: HTTP API requests and latencies (counted by a
//! middleware), plus whatever the shell registers as exporters (store,
//! write-ahead log, receive path).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Upper bounds (seconds) of the request-duration histogram.
const BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// Distinct endpoint paths tracked (a bound: unknown paths are `other`).
const MAX_ENDPOINTS: usize = 32;

#[derive(Debug, Default)]
struct Endpoint {
    path: String,
    requests: u64,
    errors_4xx: u64,
    errors_5xx: u64,
    sum_secs: f64,
    buckets: [u64; BUCKETS.len()],
}

/// Request counters of the HTTP API, per matched route.
#[derive(Debug, Default)]
pub struct ApiMetrics {
    endpoints: Mutex<Vec<Endpoint>>,
    in_flight: AtomicU64,
}

impl ApiMetrics {
    fn record(&self, path: &str, status: u16, secs: f64) {
        let mut eps = self
            .endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let i = match eps.iter().position(|e| e.path == path) {
            Some(i) => i,
            None if eps.len() < MAX_ENDPOINTS => {
                eps.push(Endpoint {
                    path: path.to_string(),
                    ..Endpoint::default()
                });
                eps.len() - 1
            }
            None => match eps.iter().position(|e| e.path == "other") {
                Some(i) => i,
                None => {
                    // Reuse the last slot for everything beyond the bound.
                    let last = eps.len() - 1;
                    eps[last] = Endpoint {
                        path: "other".into(),
                        ..Endpoint::default()
                    };
                    last
                }
            },
        };
        let e = &mut eps[i];
        e.requests += 1;
        if (400..500).contains(&status) {
            e.errors_4xx += 1;
        } else if status >= 500 {
            e.errors_5xx += 1;
        }
        e.sum_secs += secs;
        for (b, le) in e.buckets.iter_mut().zip(BUCKETS) {
            if secs <= le {
                *b += 1;
            }
        }
    }

    /// Writes the API's metrics.
    pub fn render(&self, out: &mut MetricsText) {
        let eps = self
            .endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        out.header(
            "canopy_gateway_http_requests_total",
            "counter",
            "HTTP API requests by route.",
        );
        for e in eps.iter() {
            out.sample(
                "canopy_gateway_http_requests_total",
                &[("handler", &e.path)],
                e.requests as f64,
            );
        }
        out.header(
            "canopy_gateway_http_request_errors_total",
            "counter",
            "HTTP API requests answered with an error, by route and class.",
        );
        for e in eps.iter() {
            out.sample(
                "canopy_gateway_http_request_errors_total",
                &[("handler", &e.path), ("class", "4xx")],
                e.errors_4xx as f64,
            );
            out.sample(
                "canopy_gateway_http_request_errors_total",
                &[("handler", &e.path), ("class", "5xx")],
                e.errors_5xx as f64,
            );
        }
        let h = "canopy_gateway_http_request_duration_seconds";
        out.header(h, "histogram", "HTTP API request latency by route.");
        for e in eps.iter() {
            for (b, le) in e.buckets.iter().zip(BUCKETS) {
                out.sample(
                    &format!("{h}_bucket"),
                    &[("handler", &e.path), ("le", &le.to_string())],
                    *b as f64,
                );
            }
            let n = e.requests as f64;
            out.sample(
                &format!("{h}_bucket"),
                &[("handler", &e.path), ("le", "+Inf")],
                n,
            );
            out.sample(&format!("{h}_sum"), &[("handler", &e.path)], e.sum_secs);
            out.sample(&format!("{h}_count"), &[("handler", &e.path)], n);
        }
        out.gauge(
            "canopy_gateway_http_requests_in_flight",
            "HTTP API requests being served.",
            self.in_flight.load(Ordering::Relaxed) as f64,
        );
    }
}

/// A Prometheus text exposition being written.
#[derive(Debug, Default)]
pub struct MetricsText(pub String);

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value in the text format.
pub fn text_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        v.to_string()
    }
}

impl MetricsText {
    /// `# HELP` and `# TYPE` lines.
    pub fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {}", help.replace('\n', " "));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(val));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {}", text_value(v));
    }

    /// A counter without labels.
    pub fn counter(&mut self, name: &str, help: &str, v: f64) {
        self.header(name, "counter", help);
        self.sample(name, &[], v);
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, v: f64) {
        self.header(name, "gauge", help);
        self.sample(name, &[], v);
    }
}

/// Something that adds metrics to `/metrics` (registered by the shell).
pub type Exporter = Arc<dyn Fn(&mut MetricsText) + Send + Sync>;

/// Middleware: counts every request and its latency under its route.
pub(crate) async fn track(State(m): State<Arc<ApiMetrics>>, req: Request, next: Next) -> Response {
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", MatchedPath::as_str)
        .to_string();
    m.in_flight.fetch_add(1, Ordering::Relaxed);
    let t0 = Instant::now();
    let resp = next.run(req).await;
    m.in_flight.fetch_sub(1, Ordering::Relaxed);
    m.record(&path, resp.status().as_u16(), t0.elapsed().as_secs_f64());
    resp
}

/// The `/metrics` body.
pub(crate) fn render(api: &ApiMetrics, exporters: &[Exporter]) -> Response {
    let mut out = MetricsText::default();
    api.render(&mut out);
    for e in exporters {
        e(&mut out);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out.0,
    )
        .into_response()
}
