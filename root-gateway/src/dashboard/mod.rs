//! The built-in live dashboard: `/` and `/assets/*`.
//!
//! Every file is compiled into the binary (clusters are often air-gapped, so
//! no CDN). The page is plain ES modules with no build step; it reads the
//! gateway's own Prometheus HTTP API every 5 s. All of its PromQL lives in
//! `assets/queries.json`, which the page fetches and the tests evaluate on
//! the engine, so the two cannot drift.
//!
//! Caching: assets are not fingerprinted, so every response carries a strong
//! `ETag` (FNV-1a of the bytes, computed at compile time) and `no-cache`: the
//! browser revalidates and gets a bodiless 304 until the binary changes.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Path under `/assets/`.
    pub path: &'static str,
    /// The bytes served.
    pub body: &'static [u8],
    /// The `Content-Type` header.
    pub content_type: &'static str,
    /// Quoted strong entity tag.
    etag: &'static str,
}

const fn fnv1a(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

/// Renders `"` + 16 hex digits + `"` at compile time.
const fn etag_bytes(b: &[u8]) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let h = fnv1a(b);
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((h >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($path:literal, $ct:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!("assets/", $path));
        const TAG: [u8; 18] = etag_bytes(BODY);
        Asset {
            path: $path,
            body: BODY,
            content_type: $ct,
            etag: match std::str::from_utf8(&TAG) {
                Ok(s) => s,
                Err(_) => panic!("hex digits are ASCII"),
            },
        }
    }};
}

/// Every file the dashboard serves, `index.html` first.
pub static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "text/javascript; charset=utf-8"),
    asset!("queries.js", "text/javascript; charset=utf-8"),
    asset!("queries.json", "application/json"),
    asset!("ui.js", "text/javascript; charset=utf-8"),
    asset!("verdict.js", "text/javascript; charset=utf-8"),
    asset!("chart.js", "text/javascript; charset=utf-8"),
    asset!("overview.js", "text/javascript; charset=utf-8"),
    asset!("job.js", "text/javascript; charset=utf-8"),
    asset!("node.js", "text/javascript; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!(
        "vendor/uplot/uPlot.iife.min.js",
        "text/javascript; charset=utf-8"
    ),
    asset!("vendor/uplot/uPlot.min.css", "text/css; charset=utf-8"),
    asset!("vendor/uplot/LICENSE", "text/plain; charset=utf-8"),
    asset!("vendor/uplot/VERSION", "text/plain; charset=utf-8"),
];

/// The embedded file at `path` (relative to `/assets/`), if any.
pub fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.path == path)
}

/// The page may load only its own files and talk only to its own origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The dashboard router: `/` and `/assets/{*path}`. Merge it into the app.
pub fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{*path}", get(file))
}

async fn index(req: HeaderMap) -> Response {
    match asset("index.html") {
        Some(a) => serve(a, &req),
        None => not_found(),
    }
}

async fn file(Path(path): Path<String>, req: HeaderMap) -> Response {
    match asset(&path) {
        // The page itself only at `/`, so relative URLs resolve one way.
        Some(a) if a.path != "index.html" => serve(a, &req),
        _ => not_found(),
    }
}

fn serve(a: &'static Asset, req: &HeaderMap) -> Response {
    let fresh = req
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == a.etag
        });
    let mut h = HeaderMap::new();
    h.insert(header::ETAG, HeaderValue::from_static(a.etag));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if fresh {
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    if a.content_type.starts_with("text/html") {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    (StatusCode::OK, h, a.body).into_response()
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        "not found\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests;
