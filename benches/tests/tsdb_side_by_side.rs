//! The pure parts of `tsdb-side-by-side`: the generator is deterministic and
//! Canopy-shaped, its bodies decode through the gateway's own remote_write
//! decoder, and the cut into requests does not change the data.

use std::collections::{BTreeMap, BTreeSet};

use canopy_benches::sidebyside::data::{self, Cut, DataSpec, IO_READ};
use canopy_gateway::remote_write::wire::{self, WireLimits};

fn spec() -> DataSpec {
    DataSpec {
        nodes: 20,
        series_per_node: 100,
        nodes_per_job: 8,
        interval_ms: 15_000,
        steps: 30,
        end_ms: 1_800_000_000_000,
        seed: 42,
    }
}

type Samples = BTreeMap<Vec<(String, String)>, Vec<(i64, f64)>>;

/// Every sample of `bodies`, decoded by the gateway's receiver code,
/// checking along the way that each series' labels are sorted and unique.
fn decode_all(bodies: &[Vec<data::Body>]) -> Samples {
    let mut out: Samples = BTreeMap::new();
    for list in bodies {
        let mut last_slice = 0;
        for b in list {
            assert!(b.slice >= last_slice, "a sender's bodies are in time order");
            last_slice = b.slice;
            let req = wire::decode(&b.bytes, &WireLimits::default()).expect("decodes");
            let n: usize = req.timeseries.iter().map(|t| t.samples.len()).sum();
            assert_eq!(n, b.samples);
            for ts in &req.timeseries {
                let labels = wire::labels_of(ts).expect("valid labels");
                assert_eq!(labels.name(), ts.labels[0].value);
                let pairs: Vec<(String, String)> = ts
                    .labels
                    .iter()
                    .map(|l| (l.name.clone(), l.value.clone()))
                    .collect();
                let mut sorted = pairs.clone();
                sorted.sort();
                assert_eq!(pairs, sorted, "labels sorted by name, as Prometheus wants");
                out.entry(pairs)
                    .or_default()
                    .extend(ts.samples.iter().map(|s| (s.timestamp, s.value)));
            }
        }
    }
    out
}

#[test]
fn generator_is_deterministic_and_canopy_shaped() {
    let s = spec();
    let cut = Cut {
        senders: 3,
        nodes_per_request: 4,
        steps_per_request: 7,
    };
    let a = data::bodies(&s, &cut).expect("bodies");
    let b = data::bodies(&s, &cut).expect("bodies again");
    assert_eq!(a.len(), 3);
    let bytes = |x: &Vec<Vec<data::Body>>| -> Vec<Vec<u8>> {
        x.iter().flatten().map(|b| b.bytes.clone()).collect()
    };
    assert_eq!(bytes(&a), bytes(&b), "same spec, same bodies");

    let all = decode_all(&a);
    assert_eq!(all.len(), s.series(), "nodes x series per node");
    let total: usize = all.values().map(Vec::len).sum();
    assert_eq!(total as u64, s.samples());
    let mut names = BTreeSet::new();
    let (mut flat, mut moving, mut resets) = (0, 0, 0);
    for (labels, samples) in &all {
        let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        names.insert(get("__name__").expect("a name").to_string());
        assert!(get("node").is_some() && get("partition").is_some());
        assert_eq!(samples.len(), s.steps);
        for w in samples.windows(2) {
            assert_eq!(w[1].0 - w[0].0, s.interval_ms, "on the grid, in order");
        }
        assert!(
            samples.iter().all(|(t, _)| t % 1000 != 0),
            "never on a whole second"
        );
        assert!(
            samples
                .iter()
                .all(|(t, _)| *t < s.end_ms && *t > s.start_ms())
        );
        let vals: Vec<f64> = samples.iter().map(|x| x.1).collect();
        if vals.windows(2).all(|w| w[0] == w[1]) {
            flat += 1;
        } else {
            moving += 1;
        }
        if get("__name__").is_some_and(|n| n.ends_with("_total")) {
            resets += vals.windows(2).filter(|w| w[1] < w[0]).count();
        }
        if get("__name__") == Some(IO_READ) {
            for k in ["job_id", "user", "account"] {
                assert!(get(k).is_some(), "{IO_READ} carries {k}");
            }
        }
    }
    assert!(names.contains(IO_READ));
    assert!(names.contains("canopy_node_cpu_seconds_total"));
    assert!(names.contains("canopy_job_memory_bytes"));
    assert!(names.len() >= 30, "{} metric names", names.len());
    assert!(flat > 100 && moving > 1000, "flat {flat}, moving {moving}");
    assert!(resets <= 40, "a few counter resets at most: {resets}");
    // 20 nodes at 8 per job: three jobs.
    let jobs: BTreeSet<&str> = all
        .keys()
        .filter_map(|l| {
            l.iter()
                .find(|(n, _)| n == "job_id")
                .map(|(_, v)| v.as_str())
        })
        .collect();
    assert_eq!(jobs.len(), 3);

    let other = data::bodies(&DataSpec { seed: 43, ..s }, &cut).expect("other seed");
    assert_ne!(decode_all(&other), all, "the seed matters");
}

#[test]
fn the_cut_into_requests_does_not_change_the_data() {
    let s = spec();
    let one = data::bodies(
        &s,
        &Cut {
            senders: 1,
            nodes_per_request: 20,
            steps_per_request: 30,
        },
    )
    .expect("one body");
    assert_eq!(one.iter().flatten().count(), 1);
    let many = data::bodies(
        &s,
        &Cut {
            senders: 4,
            nodes_per_request: 3,
            steps_per_request: 4,
        },
    )
    .expect("many bodies");
    assert_eq!(many.len(), 4);
    // 4 senders of 5 nodes: 2 requests per slice each, 8 slices of 4 steps.
    assert!(many.iter().all(|l| l.len() == 16 && l[15].slice == 7));
    assert_eq!(decode_all(&one), decode_all(&many));
}
