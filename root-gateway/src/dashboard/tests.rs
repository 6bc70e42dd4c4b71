use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use tower::ServiceExt;

use super::{ASSETS, asset, router};

async fn get(uri: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut req = Request::get(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = router()
        .oneshot(req.body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let status = resp.status();
    let h = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 22)
        .await
        .expect("body");
    (status, h, body.to_vec())
}

fn header(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .expect("header present")
}

#[tokio::test]
async fn root_serves_the_page_as_html_with_a_strict_policy() {
    let (st, h, body) = get("/", &[]).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(header(&h, header::CONTENT_TYPE), "text/html; charset=utf-8");
    assert_eq!(header(&h, header::CACHE_CONTROL), "no-cache");
    assert_eq!(header(&h, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
    let csp = header(&h, header::CONTENT_SECURITY_POLICY);
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    let html = String::from_utf8(body).expect("UTF-8");
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("assets/app.js"));
}

#[tokio::test]
async fn every_asset_is_served_with_its_content_type() {
    let expect = |p: &str| match p.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        _ => "text/plain; charset=utf-8",
    };
    for a in ASSETS.iter().filter(|a| a.path != "index.html") {
        let (st, h, body) = get(&format!("/assets/{}", a.path), &[]).await;
        assert_eq!(st, StatusCode::OK, "{}", a.path);
        assert_eq!(
            header(&h, header::CONTENT_TYPE),
            expect(a.path),
            "{}",
            a.path
        );
        assert_eq!(header(&h, header::CACHE_CONTROL), "no-cache", "{}", a.path);
        assert_eq!(body, a.body, "{}", a.path);
        assert!(!body.is_empty(), "{}", a.path);
    }
}

#[tokio::test]
async fn the_page_references_only_embedded_files() {
    // Every `assets/...` URL in the page and every relative module import
    // resolves to an embedded file: nothing is fetched from elsewhere.
    let html = std::str::from_utf8(asset("index.html").expect("page").body).expect("UTF-8");
    let mut refs: Vec<String> = html
        .split("\"assets/")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_string)
        .collect();
    for a in ASSETS
        .iter()
        .filter(|a| a.path.ends_with(".js") && !a.path.contains('/'))
    {
        let js = std::str::from_utf8(a.body).expect("UTF-8");
        refs.extend(
            js.split("from './")
                .skip(1)
                .filter_map(|s| s.split('\'').next())
                .map(str::to_string),
        );
        assert!(
            !js.contains("http://") && !js.contains("https://"),
            "{}",
            a.path
        );
    }
    assert!(refs.len() > 10, "{refs:?}");
    for r in &refs {
        assert!(asset(r).is_some(), "{r} is referenced but not embedded");
    }
}

#[tokio::test]
async fn etag_revalidation_answers_not_modified() {
    let (st, h, _) = get("/assets/app.js", &[]).await;
    assert_eq!(st, StatusCode::OK);
    let tag = header(&h, header::ETAG).to_string();
    assert_eq!(tag.len(), 18, "{tag}");
    let (st, h, body) = get("/assets/app.js", &[("if-none-match", tag.as_str())]).await;
    assert_eq!(st, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(header(&h, header::ETAG), tag);
    let (st, _, _) = get(
        "/assets/app.js",
        &[("if-none-match", "\"0000000000000000\"")],
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    // Different files, different tags.
    let (_, h2, _) = get("/assets/api.js", &[]).await;
    assert_ne!(header(&h2, header::ETAG), tag);
}

#[tokio::test]
async fn unknown_paths_are_not_found() {
    for p in [
        "/assets/nope.js",
        "/assets/../Cargo.toml",
        "/assets/%2e%2e/src/lib.rs",
        "/assets/vendor/uplot/../../app.js",
        "/assets/index.html",
    ] {
        let (st, h, _) = get(p, &[]).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{p}");
        assert_eq!(
            header(&h, header::CONTENT_TYPE),
            "text/plain; charset=utf-8",
            "{p}"
        );
    }
    // Outside the dashboard's routes: the app's own fallback.
    for p in ["/assets/", "/index.htm", "/favicon.ico"] {
        let (st, _, _) = get(p, &[]).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{p}");
    }
}

#[test]
fn promql_lives_only_in_queries_json() {
    // The tests evaluate queries.json; a selector written straight into a
    // view would escape them.
    for a in ASSETS
        .iter()
        .filter(|a| a.path.ends_with(".js") && !a.path.contains('/'))
    {
        let js = std::str::from_utf8(a.body).expect("UTF-8");
        for needle in ["canopy_", "[1m]", "sum by", "{job_id="] {
            assert!(!js.contains(needle), "{} holds PromQL ({needle})", a.path);
        }
    }
}
