//! The async shell against a real HTTP endpoint on loopback: retries on
//! 503 and network errors, no retry on 400, drop-oldest when the endpoint
//! is away.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use canopy_proto::model::Labels;
use tokio::sync::watch;

use super::endpoint::EndpointConfig;
use super::queue::QueueConfig;
use super::sender::{RemoteWrite, SenderConfig, spawn};
use super::tracker::TapEvent;
use super::wire::{self, WireLimits};

/// Answers the first `fail` requests with `status`, then 204; keeps the
/// timestamps of every sample of every accepted request.
#[derive(Clone, Default)]
struct Endpoint {
    fail: usize,
    status: u16,
    calls: Arc<Mutex<usize>>,
    got: Arc<Mutex<Vec<i64>>>,
}

async fn write(State(e): State<Endpoint>, body: Bytes) -> StatusCode {
    let n = {
        let mut c = e.calls.lock().expect("lock");
        *c += 1;
        *c
    };
    if n <= e.fail {
        return StatusCode::from_u16(e.status).expect("status");
    }
    let req = wire::decode(&body, &WireLimits::default()).expect("a valid body");
    let mut got = e.got.lock().expect("lock");
    for ts in &req.timeseries {
        got.extend(ts.samples.iter().map(|s| s.timestamp));
    }
    StatusCode::NO_CONTENT
}

async fn serve(e: Endpoint) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let app = Router::new()
        .route("/api/v1/write", post(write))
        .with_state(e);
    tokio::spawn(async move { axum::serve(l, app).await });
    format!("http://{addr}/api/v1/write")
}

fn cfg(url: String, capacity: usize) -> SenderConfig {
    SenderConfig {
        endpoints: vec![EndpointConfig::plain(&url)],
        poll_interval: Duration::from_millis(10),
        queue: QueueConfig {
            capacity,
            max_batch: 100,
            batch_wait_ms: 20,
            min_backoff_ms: 10,
            max_backoff_ms: 40,
        },
        ..SenderConfig::default()
    }
}

fn feed(rw: &RemoteWrite, from: i64, n: i64) {
    let l = Labels::from_pairs([("__name__", "m"), ("job", "t")]);
    for ts in from..from + n {
        rw.tap().send(TapEvent::Explicit {
            labels: l.clone(),
            ts_ms: ts,
            value: ts as f64,
        });
    }
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("gave up waiting for {what}");
}

#[tokio::test]
async fn server_errors_are_retried_until_accepted() {
    let e = Endpoint {
        fail: 2,
        status: 503,
        ..Endpoint::default()
    };
    let url = serve(e.clone()).await;
    let (_tx, rx) = watch::channel(false);
    let rw = spawn(cfg(url, 1000), rx).expect("spawned");
    feed(&rw, 1, 5);
    // The endpoint records the samples before the sender reads its answer:
    // wait for both, not only the first.
    until("the batch accepted", || {
        e.got.lock().expect("lock").len() == 5 && rw.stats().endpoints[0].1.samples_sent == 5
    })
    .await;
    assert_eq!(*e.got.lock().expect("lock"), vec![1, 2, 3, 4, 5]);
    assert_eq!(*e.calls.lock().expect("lock"), 3);
    let q = rw.stats().endpoints[0].1;
    assert_eq!((q.retries, q.samples_sent, q.dropped_refused), (2, 5, 0));
}

#[tokio::test]
async fn client_errors_drop_the_batch_without_retry() {
    let e = Endpoint {
        fail: usize::MAX,
        status: 400,
        ..Endpoint::default()
    };
    let url = serve(e.clone()).await;
    let (_tx, rx) = watch::channel(false);
    let rw = spawn(cfg(url, 1000), rx).expect("spawned");
    feed(&rw, 1, 5);
    until("the batch refused", || {
        rw.stats().endpoints[0].1.dropped_refused == 5
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(*e.calls.lock().expect("lock"), 1, "no retry after a 400");
    assert_eq!(rw.stats().endpoints[0].1.retries, 0);
}

#[tokio::test]
async fn an_absent_endpoint_is_retried_and_the_queue_drops_its_oldest() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let (_tx, rx) = watch::channel(false);
    let rw = spawn(cfg(format!("http://127.0.0.1:{port}/api/v1/write"), 50), rx).expect("spawned");
    feed(&rw, 1, 10);
    until("retries on connection errors", || {
        rw.stats().endpoints[0].1.retries >= 3
    })
    .await;
    feed(&rw, 100, 80);
    until("drops while away", || {
        rw.stats().endpoints[0].1.dropped_overflow == 30
    })
    .await;
    let q = rw.stats().endpoints[0].1;
    assert_eq!((q.queued, q.samples_sent), (50, 0));
    assert!(
        spawn(
            cfg("ftp://example.org/api/v1/write".into(), 1),
            watch::channel(false).1
        )
        .is_err()
    );
    assert!(spawn(cfg("not a url".into(), 1), watch::channel(false).1).is_err());
}
