//! The remote_write receiver's zero-copy reader on arbitrary bytes: it must
//! never panic, and must agree with prost (verdict and content).
#![no_main]

use canopy_gateway::remote_write::pb::WriteBatch;
use canopy_gateway::remote_write::resolve::{Resolved, resolve};
use canopy_gateway::store::{LiveStore, LiveStoreConfig, Sample};
use canopy_proto::schema::remote::WriteRequest;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let mut batch = WriteBatch::default();
    let ours = batch.decode(data).and_then(|()| {
        let mut all = Vec::new();
        for s in batch.series_views() {
            let mut labels = Vec::new();
            for &span in batch.label_spans(s) {
                let (n, v) = WriteBatch::label(data, span)?;
                labels.push((n.to_string(), v.to_string()));
            }
            let samples: Vec<(i64, u64)> = batch
                .samples(s)
                .iter()
                .map(|x| (x.ts_ms, x.value.to_bits()))
                .collect();
            all.push((labels, samples));
        }
        Ok(all)
    });
    let theirs = WriteRequest::decode(data).map(|req| {
        req.timeseries
            .into_iter()
            .map(|ts| {
                let labels: Vec<(String, String)> =
                    ts.labels.into_iter().map(|l| (l.name, l.value)).collect();
                let samples: Vec<(i64, u64)> = ts
                    .samples
                    .iter()
                    .map(|s| (s.timestamp, s.value.to_bits()))
                    .collect();
                (labels, samples)
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(ours.ok(), theirs.ok());
    if batch.decode(data).is_ok() {
        // Twice through a store: once every series a miss (parsed), then
        // held, found by its bytes: both must name the same label sets.
        let mut store = LiveStore::new(LiveStoreConfig::default());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let first = resolve(&store, data, &batch, &mut a).is_ok();
        if first {
            for r in &a {
                if let Resolved::New(l) = r {
                    let one = [Sample { ts_ms: 1, value: 1.0 }];
                    store.append_samples(l, &one, &mut |_, _| {});
                }
            }
        }
        let second = resolve(&store, data, &batch, &mut b).is_ok();
        assert_eq!(first, second);
        if first {
            let named = |r: &Resolved| match r {
                Resolved::Held(h) => store.hinted_labels(h),
                Resolved::New(l) => Some(l.clone()),
            };
            let a: Vec<_> = a.iter().map(named).collect();
            let b: Vec<_> = b.iter().map(named).collect();
            assert_eq!(a, b);
        }
    }
});
