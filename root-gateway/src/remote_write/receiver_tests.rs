//! The receiver through its router: good bodies land in the store, bad ones
//! are a 400 with a clear reason, and the next good request still works.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use canopy_proto::model::Labels;
use tower::ServiceExt;

use super::pb::WriteBatch;
use super::receiver::{ReceiverState, router};
use super::resolve::{Resolved, resolve};
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
    // Both are now found by their label bytes in the store itself.
    let got = resolved(&store, &wire::encode(&two).expect("encode"));
    assert!(
        got.iter().all(|r| matches!(r, Resolved::Held(_))),
        "{got:?}"
    );
}

/// How the store knows each series of `body` now.
fn resolved(store: &SharedStore, body: &[u8]) -> Vec<Resolved> {
    let mut raw = Vec::new();
    let n = wire::decompress_into(body, &WireLimits::default(), &mut raw).expect("snappy");
    let mut batch = WriteBatch::default();
    batch.decode(&raw[..n]).expect("decode");
    let mut out = Vec::new();
    store
        .read(|s| resolve(s, &raw[..n], &batch, &mut out))
        .expect("resolve");
    out
}

#[test]
fn known_series_are_found_in_the_store_by_their_bytes_and_others_parsed() {
    use super::receiver::ingest;
    let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
    let st = ReceiverState::new(store.clone(), None, WireLimits::default());
    let (b1, b2) = (body("h1", &[(1000, 1.0)]), body("h1", &[(2000, 2.0)]));
    let want = Labels::from_pairs([("__name__", "rw_metric"), ("node", "h1"), ("job", "t")]);
    assert_eq!(resolved(&store, &b1), vec![Resolved::New(want.clone())]);
    ingest(&st, &b1).expect("first");
    let got = resolved(&store, &b2);
    let [Resolved::Held(h)] = got[..] else {
        panic!("not found by its bytes: {got:?}")
    };
    assert_eq!(store.read(|s| s.hinted_labels(&h)), Some(want));
    ingest(&st, &b2).expect("second");
    assert_eq!(stored(&store, "h1"), vec![(1000, 1.0), (2000, 2.0)]);
    // The same series sent unsorted is parsed, and lands in the same series.
    let unsorted = {
        use canopy_proto::schema::remote::{Label, Sample, TimeSeries, WriteRequest};
        let label = |n: &str, v: &str| Label {
            name: n.into(),
            value: v.into(),
        };
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![
                    label("node", "h1"),
                    label("__name__", "rw_metric"),
                    label("job", "t"),
                ],
                samples: vec![Sample {
                    value: 3.0,
                    timestamp: 3000,
                }],
            }],
        };
        wire::encode(&req).expect("encode")
    };
    assert!(matches!(
        resolved(&store, &unsorted)[..],
        [Resolved::New(_)]
    ));
    ingest(&st, &unsorted).expect("third");
    assert_eq!(
        stored(&store, "h1"),
        vec![(1000, 1.0), (2000, 2.0), (3000, 3.0)]
    );
    assert_eq!(store.read(|s| s.stats().series), 1);
}

/// A journal that records no body as it came: the receiver hands it ops,
/// labels included, for held series too.
#[derive(Clone, Default)]
struct OpsOnly(std::sync::Arc<std::sync::Mutex<Vec<crate::store::Op>>>);

impl crate::store::Journal for OpsOnly {
    fn log(&mut self, ops: &[crate::store::Op]) -> Result<(), crate::store::StoreError> {
        self.0.lock().expect("lock").extend_from_slice(ops);
        Ok(())
    }

    fn tick(
        &mut self,
        _: &LiveStore,
    ) -> Result<Option<crate::store::PendingCheckpoint>, crate::store::StoreError> {
        Ok(None)
    }
}

#[test]
fn a_journal_without_bodies_gets_ops_with_their_labels() {
    use super::receiver::ingest;
    use crate::store::{Op, Sample};
    let journal = OpsOnly::default();
    let store = SharedStore::with_journal(
        LiveStore::new(LiveStoreConfig::default()),
        Box::new(journal.clone()),
    );
    let st = ReceiverState::new(store.clone(), None, WireLimits::default());
    ingest(&st, &body("j1", &[(1000, 1.0)])).expect("first");
    // Held now: its labels come from the request again, not a cache.
    ingest(&st, &body("j1", &[(2000, 2.0), (3000, 3.0)])).expect("second");
    let l = Labels::from_pairs([("__name__", "rw_metric"), ("node", "j1"), ("job", "t")]);
    let smp = |t: i64, v: f64| Sample { ts_ms: t, value: v };
    assert_eq!(
        *journal.0.lock().expect("lock"),
        vec![
            Op::Samples {
                labels: l.clone(),
                samples: vec![smp(1000, 1.0)],
            },
            Op::Samples {
                labels: l,
                samples: vec![smp(2000, 2.0), smp(3000, 3.0)],
            },
        ]
    );
    assert_eq!(
        stored(&store, "j1"),
        vec![(1000, 1.0), (2000, 2.0), (3000, 3.0)]
    );
}

/// Requests decoded on several threads and stored on the applier thread:
/// every sample lands, in order per series, and a refusal (out of order)
/// comes back to the request that caused it, with the scratch reused.
#[test]
fn applier_stores_requests_from_many_threads() {
    use super::receiver::ingest_bytes;
    let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
    let st = std::sync::Arc::new(
        ReceiverState::new(store.clone(), None, WireLimits::default()).with_applier(),
    );
    std::thread::scope(|sc| {
        for t in 0..4 {
            let st = std::sync::Arc::clone(&st);
            sc.spawn(move || {
                let l = Labels::metric("rw_metric", [("node", format!("t{t}"))]);
                for k in 0..20i64 {
                    let req = wire::request_of([
                        (&l, 1000 * (2 * k + 1), k as f64),
                        (&l, 1000 * (2 * k + 2), 0.5),
                    ]);
                    let body = bytes::Bytes::from(wire::encode(&req).expect("encode"));
                    ingest_bytes(&st, body).expect("stored");
                }
                let old = wire::request_of([(&l, 500, 9.0)]);
                let body = bytes::Bytes::from(wire::encode(&old).expect("encode"));
                assert_eq!(
                    ingest_bytes(&st, body).map_err(|e| e.0),
                    Err(StatusCode::BAD_REQUEST)
                );
            });
        }
    });
    for t in 0..4 {
        let got = stored(&store, &format!("t{t}"));
        assert_eq!(got.len(), 40, "t{t}");
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(got.last(), Some(&(40_000, 0.5)));
    }
}
