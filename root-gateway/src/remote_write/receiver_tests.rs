//! The receiver through its router: good bodies land in the store, bad ones
//! are a 400 with a clear reason, and the next good request still works.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use canopy_proto::model::Labels;
use tower::ServiceExt;

use super::receiver::{ReceiverState, router};
use super::wire::{self, WireLimits};
use crate::store::{LiveStore, LiveStoreConfig, Matcher, Querier, SharedStore};

fn app(store: &SharedStore, limits: WireLimits) -> axum::Router {
    router(ReceiverState::new(store.clone(), None, limits))
}

async fn post(app: &axum::Router, body: Vec<u8>) -> (StatusCode, String) {
    let req = Request::post("/api/v1/write")
        .header("content-encoding", "snappy")
        .header("content-type", "application/x-protobuf")
        .body(Body::from(body))
        .expect("request");
    let resp = app.clone().oneshot(req).await.expect("answered");
    let status = resp.status();
    let b = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&b).to_string())
}

fn body(node: &str, samples: &[(i64, f64)]) -> Vec<u8> {
    let l = Labels::from_pairs([("__name__", "rw_metric"), ("node", node), ("job", "t")]);
    wire::encode(&wire::request_of(samples.iter().map(|&(t, v)| (&l, t, v)))).expect("encode")
}

fn stored(store: &SharedStore, node: &str) -> Vec<(i64, f64)> {
    let m = [
        Matcher::equal("__name__", "rw_metric"),
        Matcher::equal("node", node),
    ];
    store
        .select(&m, 0, i64::MAX, 10)
        .expect("select")
        .into_iter()
        .flat_map(|s| s.samples)
        .map(|s| (s.ts_ms, s.value))
        .collect()
}

#[tokio::test]
async fn good_bodies_are_stored_and_bad_ones_refused_clearly() {
    let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
    let limits = WireLimits {
        max_body_bytes: 4096,
        max_decoded_bytes: 8192,
    };
    let app = app(&store, limits);
    let (st, _) = post(&app, body("a", &[(1000, 1.5), (2000, 2.5)])).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_eq!(stored(&store, "a"), vec![(1000, 1.5), (2000, 2.5)]);

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "corrupt snappy",
            b"\x10garbage-not-snappy".to_vec(),
            "not valid snappy",
        ),
        (
            "garbage protobuf",
            snap::raw::Encoder::new()
                .compress_vec(&[0xff; 100])
                .expect("compress"),
            "not a valid protobuf",
        ),
        (
            // A varint header claiming 2^32-1 decompressed bytes.
            "huge claimed size",
            vec![0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0],
            "declares 4294967295 decompressed bytes",
        ),
        (
            "oversize body",
            vec![0u8; 5000],
            "exceeds the limit of 4096 bytes",
        ),
    ];
    for (what, b, want) in cases {
        let (st, msg) = post(&app, b).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{what}: {msg}");
        assert!(msg.contains(want), "{what}: {msg:?} lacks {want:?}");
    }
    // A decompressed size within the body limit but over the decoded limit.
    let long = "x".repeat(20_000);
    let l = Labels::from_pairs([("__name__", "rw_metric"), ("node", "b"), ("pad", &long)]);
    let b = wire::encode(&wire::request_of([(&l, 3000, 0.0)])).expect("encode");
    assert!(b.len() <= 4096, "compresses well: {}", b.len());
    let (st, msg) = post(&app, b).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(msg.contains("over the limit of 8192 bytes"), "{msg}");
    assert!(stored(&store, "b").is_empty());

    // Out of order against what is stored: refused, the rest stored.
    let (st, msg) = post(&app, body("a", &[(1500, 9.0), (3000, 3.5)])).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(msg.contains("1 of 2 samples refused"), "{msg}");
    // Still serving.
    let (st, _) = post(&app, body("c", &[(5000, 7.0)])).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_eq!(stored(&store, "c"), vec![(5000, 7.0)]);
    assert_eq!(
        stored(&store, "a"),
        vec![(1000, 1.5), (2000, 2.5), (3000, 3.5)]
    );
}

#[tokio::test]
async fn series_without_a_name_or_with_repeated_labels_store_nothing() {
    use canopy_proto::schema::remote::{Label, Sample, TimeSeries, WriteRequest};
    let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
    let app = app(&store, WireLimits::default());
    let good = TimeSeries {
        labels: vec![
            Label {
                name: "__name__".into(),
                value: "rw_metric".into(),
            },
            Label {
                name: "node".into(),
                value: "d".into(),
            },
        ],
        samples: vec![Sample {
            value: 1.0,
            timestamp: 1000,
        }],
    };
    let nameless = TimeSeries {
        labels: vec![Label {
            name: "node".into(),
            value: "x".into(),
        }],
        samples: good.samples.clone(),
    };
    let req = WriteRequest {
        timeseries: vec![good, nameless],
    };
    let (st, msg) = post(&app, wire::encode(&req).expect("encode")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(msg.contains("no metric name"), "{msg}");
    assert!(
        stored(&store, "d").is_empty(),
        "nothing of a bad request is stored"
    );
    let v2 = Request::post("/api/v1/write")
        .header(
            "content-type",
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
        )
        .body(Body::empty())
        .expect("request");
    let resp = app.clone().oneshot(v2).await.expect("answered");
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

/// Guards the per-thread scratch reuse: a request with fewer series, or
/// more samples per series, than the one before it on the same thread
/// stores exactly its own samples, and a bad one in between stores nothing.
#[test]
fn reused_scratch_stores_each_request_exactly() {
    use super::receiver::ingest;
    let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
    let st = ReceiverState::new(store.clone(), None, WireLimits::default());
    let la = Labels::from_pairs([("__name__", "rw_metric"), ("node", "a"), ("job", "t")]);
    let lb = Labels::from_pairs([("__name__", "rw_metric"), ("node", "b"), ("job", "t")]);
    let two = wire::request_of([(&la, 1000, 1.0), (&lb, 1000, 10.0), (&lb, 2000, 20.0)]);
    ingest(&st, &wire::encode(&two).expect("encode")).expect("first");
    let bad = snap::raw::Encoder::new()
        .compress_vec(&[0x0a, 0x05, 0x0a])
        .expect("compress");
    assert_eq!(
        ingest(&st, &bad).map_err(|e| e.0),
        Err(StatusCode::BAD_REQUEST)
    );
    let one = wire::request_of([(&la, 3000, 3.0), (&la, 4000, 4.0), (&la, 5000, 5.0)]);
    ingest(&st, &wire::encode(&one).expect("encode")).expect("second");
    assert_eq!(
        stored(&store, "a"),
        vec![(1000, 1.0), (3000, 3.0), (4000, 4.0), (5000, 5.0)]
    );
    assert_eq!(stored(&store, "b"), vec![(1000, 10.0), (2000, 20.0)]);
    assert_eq!(
        st.series.len(),
        2,
        "both series cached by their label bytes"
    );
}

#[test]
fn cached_series_carry_store_hints_and_a_colliding_entry_is_a_miss() {
    use super::pb::WriteBatch;
    use super::receiver::ingest;
    use super::resolve::SeriesCache;

    let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
    let st = ReceiverState::new(store.clone(), None, WireLimits::default());
    let (b1, b2) = (body("h1", &[(1000, 1.0)]), body("h1", &[(2000, 2.0)]));
    ingest(&st, &b1).expect("first");
    // The cache now holds the series with the store's hint for it.
    let mut raw = Vec::new();
    let n = wire::decompress_into(&b2, &WireLimits::default(), &mut raw).expect("snappy");
    let mut batch = WriteBatch::default();
    batch.decode(&raw[..n]).expect("decode");
    let mut got = Vec::new();
    st.series
        .resolve_hinted(&raw[..n], &batch, &mut got)
        .expect("resolve");
    let key = got[0].key.expect("canonical labels have a key");
    assert_ne!(got[0].hint, Default::default());
    assert_eq!(st.series.hint_of(key), Some(got[0].hint));
    ingest(&st, &b2).expect("second");
    assert_eq!(stored(&store, "h1"), vec![(1000, 1.0), (2000, 2.0)]);

    // Another series planted under h1's key (a hash collision): the
    // bytes do not encode it, so it is a miss, parsed, never returned.
    let cache = SeriesCache::new(16);
    let other = Labels::from_pairs([("__name__", "rw_metric"), ("node", "zz"), ("job", "t")]);
    cache.plant(key, other.clone());
    let mut out = Vec::new();
    cache.resolve(&raw[..n], &batch, &mut out).expect("resolve");
    assert_eq!(out[0].get("node"), Some("h1"));
    // A hint kept for a label set no longer under that key is dropped.
    cache.plant(key, other.clone());
    cache.remember([(key, &out[0], got[0].hint)]);
    assert_eq!(cache.hint_of(key), Some(Default::default()));
}
