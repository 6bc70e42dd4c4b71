//! The zero-copy reader ([`super::pb`]) and the series lookup by label
//! bytes ([`super::resolve`]) against prost's generated decoder: same
//! verdict, same content, on valid, random and mutated inputs.

use canopy_proto::schema::remote::{Label, Sample as PbSample, TimeSeries, WriteRequest};
use proptest::prelude::*;
use prost::Message;

use super::pb::WriteBatch;
use super::resolve::{Resolved, parse, resolve};
use super::wire;
use crate::store::{Labels, LiveStore, LiveStoreConfig, Sample};

/// Puts one sample of each of `labels` in `store` (so it holds them).
fn hold(store: &mut LiveStore, labels: &[Labels]) {
    for l in labels {
        let one = [Sample {
            ts_ms: 1,
            value: 1.0,
        }];
        store.append_samples(l, &one, &mut |_, _| {});
    }
}

/// The label set each resolved series stands for in `store`.
fn labels_of(store: &LiveStore, got: &[Resolved]) -> Vec<Option<Labels>> {
    got.iter()
        .map(|r| match r {
            Resolved::Held(h) => store.hinted_labels(h),
            Resolved::New(l) => Some(l.clone()),
        })
        .collect()
}

/// A decoded request as plain values: per series, the raw label pairs (as
/// sent: empty values and repeats kept) and (timestamp, value bits).
type Plain = Vec<(Vec<(String, String)>, Vec<(i64, u64)>)>;

fn plain_prost(buf: &[u8]) -> Option<Plain> {
    let req = WriteRequest::decode(buf).ok()?;
    Some(
        req.timeseries
            .into_iter()
            .map(|ts| {
                (
                    ts.labels.into_iter().map(|l| (l.name, l.value)).collect(),
                    ts.samples
                        .iter()
                        .map(|s| (s.timestamp, s.value.to_bits()))
                        .collect(),
                )
            })
            .collect(),
    )
}

fn plain_ours(buf: &[u8]) -> Option<Plain> {
    let mut b = WriteBatch::default();
    b.decode(buf).ok()?;
    let mut out = Vec::new();
    for s in b.series_views() {
        let mut labels = Vec::new();
        for &span in b.label_spans(s) {
            let (n, v) = WriteBatch::label(buf, span).ok()?;
            labels.push((n.to_string(), v.to_string()));
        }
        let samples = b
            .samples(s)
            .iter()
            .map(|x| (x.ts_ms, x.value.to_bits()))
            .collect();
        out.push((labels, samples));
    }
    Some(out)
}

fn same_as_prost(buf: &[u8]) {
    assert_eq!(plain_ours(buf), plain_prost(buf), "input {buf:02x?}");
}

fn label_str() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("__name__".to_string()),
        "[a-c]{1,3}",
        "\\PC{0,12}",
    ]
}

fn request() -> impl Strategy<Value = WriteRequest> {
    let label = (label_str(), label_str()).prop_map(|(name, value)| Label { name, value });
    let sample =
        (any::<f64>(), any::<i64>()).prop_map(|(value, timestamp)| PbSample { value, timestamp });
    let series = (
        prop::collection::vec(label, 0..6),
        prop::collection::vec(sample, 0..6),
    )
        .prop_map(|(labels, samples)| TimeSeries { labels, samples });
    prop::collection::vec(series, 0..6).prop_map(|timeseries| WriteRequest { timeseries })
}

#[derive(Clone, Debug)]
enum Edit {
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Remove),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(buf: &mut Vec<u8>, e: &Edit) {
    let n = buf.len();
    match *e {
        Edit::Set(i, b) if n > 0 => buf[i % n] = b,
        Edit::Insert(i, b) => buf.insert(i % (n + 1), b),
        Edit::Remove(i) if n > 0 => {
            buf.remove(i % n);
        }
        Edit::Truncate(i) => buf.truncate(i % (n + 1)),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn valid_requests_decode_as_prost_does(req in request()) {
        let buf = req.encode_to_vec();
        prop_assert!(plain_ours(&buf).is_some());
        same_as_prost(&buf);
    }

    #[test]
    fn mutated_requests_get_prost_s_verdict(req in request(), edits in prop::collection::vec(edit(), 1..4)) {
        let mut buf = req.encode_to_vec();
        for e in &edits {
            apply(&mut buf, e);
        }
        same_as_prost(&buf);
    }

    #[test]
    fn random_bytes_get_prost_s_verdict(buf in prop::collection::vec(any::<u8>(), 0..64)) {
        same_as_prost(&buf);
    }

    #[test]
    fn series_found_by_their_bytes_resolve_as_parsed_ones(req in request()) {
        let buf = req.encode_to_vec();
        let mut b = WriteBatch::default();
        b.decode(&buf).expect("valid request");
        let expect: Result<Vec<_>, String> = req
            .timeseries
            .iter()
            .map(|ts| {
                let l = wire::labels_of(ts).map_err(|e| e.to_string())?;
                if l.name().is_empty() { Err("no name".to_string()) } else { Ok(l) }
            })
            .collect();
        let mut store = LiveStore::new(LiveStoreConfig::default());
        let mut out = Vec::new();
        let got = resolve(&store, &buf, &b, &mut out);
        match &expect {
            Ok(want) => {
                prop_assert!(got.is_ok(), "{got:?}");
                prop_assert!(out.iter().all(|r| matches!(r, Resolved::New(_))));
                let want: Vec<_> = want.iter().cloned().map(Some).collect();
                prop_assert_eq!(labels_of(&store, &out), want.clone());
                // Held now: found by their bytes where canonical, and
                // naming exactly the parsed label set either way.
                hold(&mut store, &want.iter().flatten().cloned().collect::<Vec<_>>());
                resolve(&store, &buf, &b, &mut out).expect("valid still");
                prop_assert_eq!(labels_of(&store, &out), want);
            }
            Err(_) => prop_assert!(got.is_err()),
        }
    }
}

/// A field key byte (tags below 16).
fn key(tag: u8, wire: u8) -> u8 {
    (tag << 3) | wire
}

fn len_field(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![key(tag, 2)];
    prost::encoding::encode_varint(body.len() as u64, &mut out);
    out.extend_from_slice(body);
    out
}

#[test]
fn unknown_fields_groups_and_repeats_follow_prost() {
    let label = |n: &str, v: &str| {
        let mut b = len_field(1, n.as_bytes());
        b.extend(len_field(2, v.as_bytes()));
        b
    };
    // A label whose name is given twice (last wins) with unknown fields of
    // every wire type in between, a group among them.
    let mut l = len_field(1, b"first");
    l.extend([key(7, 0), 0x96, 0x01]);
    l.extend([key(8, 1), 1, 2, 3, 4, 5, 6, 7, 8]);
    l.extend([key(9, 5), 1, 2, 3, 4]);
    l.extend([key(10, 3), key(11, 0), 5, key(10, 4)]);
    l.extend(label("__name__", "m"));
    let mut ts = len_field(1, &l);
    ts.extend(len_field(2, &[key(2, 0), 42]));
    ts.extend(len_field(1, &label("b", "x")));
    let mut buf = len_field(1, &ts);
    buf.extend([key(3, 0), 1]);
    let got = plain_ours(&buf).expect("valid");
    assert_eq!(got, plain_prost(&buf).expect("prost accepts it"));
    assert_eq!(got[0].0[0], ("__name__".to_string(), "m".to_string()));
    assert_eq!(got[0].1, vec![(42, 0)]);
    // Labels interrupted by a sample are not one span: no cache key.
    let mut b = WriteBatch::default();
    b.decode(&buf).expect("valid");
    assert_eq!(b.series_views()[0].label_bytes, None);
}

#[test]
fn group_nesting_stops_where_prost_s_recursion_limit_does() {
    for depth in [98usize, 99, 100, 101] {
        let mut buf = Vec::new();
        for _ in 0..depth {
            buf.push(key(5, 3));
        }
        for _ in 0..depth {
            buf.push(key(5, 4));
        }
        same_as_prost(&buf);
        let mut ts = Vec::new();
        for _ in 0..depth {
            ts.push(key(5, 3));
        }
        for _ in 0..depth {
            ts.push(key(5, 4));
        }
        same_as_prost(&len_field(1, &ts));
    }
    assert!(plain_ours(&[key(5, 3); 1]).is_none());
    assert!(plain_ours(&[key(5, 4)]).is_none());
}

#[test]
fn bad_utf8_wrong_wire_types_and_overlong_varints_are_refused() {
    let bad_utf8 = len_field(1, &len_field(1, &len_field(1, &[0xff, 0xfe])));
    let wrong_wire = len_field(1, &len_field(2, &[key(1, 0), 0]));
    let overlong = [
        key(2, 0),
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0x02,
    ];
    let tag_zero = [0x00, 0x00];
    for buf in [&bad_utf8[..], &wrong_wire, &overlong, &tag_zero] {
        assert!(plain_ours(buf).is_none(), "{buf:02x?}");
        same_as_prost(buf);
    }
}

#[test]
fn a_cached_series_still_refuses_other_bytes() {
    let ts = |labels: &[(&str, &str)]| TimeSeries {
        labels: labels
            .iter()
            .map(|(n, v)| Label {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect(),
        samples: vec![PbSample {
            value: 1.0,
            timestamp: 1,
        }],
    };
    let mut store = LiveStore::new(LiveStoreConfig::default());
    let good = WriteRequest {
        timeseries: vec![ts(&[("__name__", "m"), ("a", "1")])],
    };
    let want = wire::labels_of(&good.timeseries[0]).expect("labels");
    hold(&mut store, std::slice::from_ref(&want));
    // Unsorted, with an empty value, and a repeated name.
    let unsorted = WriteRequest {
        timeseries: vec![ts(&[("a", "1"), ("__name__", "m"), ("b", "")])],
    };
    let dup = WriteRequest {
        timeseries: vec![ts(&[("__name__", "m"), ("a", "1"), ("a", "1")])],
    };
    let mut b = WriteBatch::default();
    let mut out = Vec::new();
    for (req, held) in [(&good, true), (&unsorted, false)] {
        let buf = req.encode_to_vec();
        b.decode(&buf).expect("valid");
        resolve(&store, &buf, &b, &mut out).expect("labels");
        assert_eq!(matches!(out[0], Resolved::Held(_)), held);
        assert_eq!(labels_of(&store, &out), vec![Some(want.clone())]);
    }
    let buf = dup.encode_to_vec();
    b.decode(&buf).expect("valid protobuf");
    assert!(resolve(&store, &buf, &b, &mut out).is_err());
    assert!(parse(&buf, &b, &b.series_views()[0]).is_err());
}

/// Guards the canonical-sample fast path: a repeated timestamp (last wins),
/// a value given twice, and a short sample followed by bytes that look
/// like one all decode as prost decodes them.
#[test]
fn sample_fast_path_falls_back_on_anything_unusual() {
    let v = 2.5f64.to_le_bytes();
    let mut twice_ts = vec![key(1, 1)];
    twice_ts.extend(v);
    twice_ts.extend([key(2, 0), 0x80, 0x01, key(2, 0), 7]);
    let mut twice_value = twice_ts.clone();
    twice_value.push(key(1, 1));
    twice_value.extend(1.0f64.to_le_bytes());
    let short = vec![key(2, 0), 5];
    for sample in [twice_ts, twice_value, short] {
        let mut series = len_field(1, &len_field(1, b"\x0a\x08__name__\x12\x01m"));
        series.extend(len_field(2, &sample));
        // Trailing bytes shaped like a sample, outside the short one.
        series.extend([key(9, 1), 0, 0, 0, 0, 0, 0, 0, 0]);
        let buf = len_field(1, &series);
        assert!(plain_ours(&buf).is_some(), "{buf:02x?}");
        same_as_prost(&buf);
    }
}

#[test]
fn timestamps_of_every_varint_length_decode_as_prost_does() {
    // A timestamp of each varint length (1..=10 bytes, negatives take 10),
    // as the last field of the buffer and followed by more data, cut
    // short inside the varint and with the sample's length too short; with
    // a value, and with none (a zero value is left out, as prost writes it).
    let mut stamps: Vec<i64> = (0..63).map(|k| (1i64 << k) - 1).collect();
    stamps.extend([i64::MAX, -1, i64::MIN, 1_700_000_000_123]);
    for (ts, value) in stamps.iter().flat_map(|&t| [(t, Some(1.5f64)), (t, None)]) {
        let mut s = Vec::new();
        if let Some(v) = value {
            s.push(key(1, 1));
            s.extend_from_slice(&v.to_le_bytes());
        }
        s.push(key(2, 0));
        prost::encoding::encode_varint(ts as u64, &mut s);
        let series = len_field(2, &s);
        let last = len_field(1, &series);
        let got = plain_ours(&last).expect("valid");
        let bits = value.unwrap_or(0.0).to_bits();
        assert_eq!(got[0].1, vec![(ts, bits)], "ts {ts}");
        same_as_prost(&last);
        let mut more = last.clone();
        more.extend(len_field(1, &len_field(2, &s)));
        same_as_prost(&more);
        // The sample message ends one byte early: the varint runs past it.
        let mut short = s.clone();
        short.pop();
        let mut cut = len_field(1, &len_field(2, &short));
        cut.extend_from_slice(&last);
        assert!(plain_ours(&cut).is_none() || short.last().is_some_and(|b| *b < 0x80));
        same_as_prost(&cut);
        for n in 1..last.len() {
            same_as_prost(&last[..n]);
        }
    }
}

#[test]
fn short_and_long_labels_are_found_by_their_bytes_once_held() {
    // Labels under 124 bytes take the one-byte-length walk, longer ones
    // (two-byte lengths) the field-by-field one: both must hit, with the
    // same labels.
    for len in [1usize, 100, 119, 120, 300] {
        let value = "v".repeat(len);
        let ts = TimeSeries {
            labels: vec![
                Label {
                    name: "__name__".into(),
                    value: "m".into(),
                },
                Label {
                    name: "long".into(),
                    value: value.clone(),
                },
            ],
            samples: vec![PbSample {
                value: 1.0,
                timestamp: 5,
            }],
        };
        let req = WriteRequest {
            timeseries: vec![ts],
        };
        let buf = req.encode_to_vec();
        let mut b = WriteBatch::default();
        b.decode(&buf).expect("valid");
        let mut store = LiveStore::new(LiveStoreConfig::default());
        let (mut first, mut second) = (Vec::new(), Vec::new());
        resolve(&store, &buf, &b, &mut first).expect("labels");
        let [Resolved::New(l)] = &first[..] else {
            panic!("a miss first at {len}")
        };
        hold(&mut store, std::slice::from_ref(l));
        resolve(&store, &buf, &b, &mut second).expect("labels");
        assert!(matches!(second[..], [Resolved::Held(_)]), "a hit at {len}");
        let held = labels_of(&store, &second);
        assert_eq!(held, vec![Some(l.clone())]);
        assert_eq!(l.get("long"), Some(value.as_str()));
        // One byte of the value changed: not the held series.
        let mut other = buf.clone();
        if let Some(last) = other.iter().rposition(|&c| c == b'v') {
            other[last] = b'w';
        }
        b.decode(&other).expect("valid");
        let mut third = Vec::new();
        resolve(&store, &other, &b, &mut third).expect("labels");
        let [Resolved::New(t)] = &third[..] else {
            panic!("another series at {len}")
        };
        assert_eq!(
            t.get("long"),
            Some(format!("{}w", "v".repeat(len - 1)).as_str())
        );
    }
}
