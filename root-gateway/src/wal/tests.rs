use std::io::Write;

use super::*;
use crate::store::{Labels, Matcher, Querier, SeriesHint, SharedStore};
use canopy_proto::model::METRIC_NAME;

fn cfg(dir: &Path) -> WalConfig {
    WalConfig::new(dir)
}

fn open(c: WalConfig) -> (SharedStore, Recovery) {
    let (store, wal, rec) = Wal::open(c, LiveStoreConfig::default()).expect("open");
    (SharedStore::with_journal(store, Box::new(wal)), rec)
}

fn ops_for(t: i64) -> Vec<Op> {
    vec![
        Op::Heartbeat {
            source: "n1".into(),
            ts_ms: t,
            tick_ms: 1000,
        },
        Op::Append {
            source: Some("n1".into()),
            labels: Labels::metric("ticks_total", [("node", "n1")]),
            ts_ms: t,
            value: (t / 1000) as f64,
        },
        Op::Append {
            source: None,
            labels: Labels::metric("explicit", [("job", "x")]),
            ts_ms: t,
            value: 0.5,
        },
    ]
}

fn points(s: &SharedStore, name: &str) -> Vec<(i64, u64)> {
    s.select(&[Matcher::equal(METRIC_NAME, name)], 0, 1_000_000, 100)
        .expect("select")
        .iter()
        .flat_map(|x| x.samples.iter().map(|p| (p.ts_ms, p.value.to_bits())))
        .collect()
}

fn feed(s: &SharedStore, from: i64, to: i64) {
    for t in from..to {
        let ts = t * 1000;
        s.apply(&ops_for(ts)).expect("apply");
        s.tick(ts).expect("tick");
    }
}

#[test]
fn record_encoding_round_trips_with_dictionaries() {
    let mut enc = Encoder::default();
    let mut dec = Decoder::default();
    let mut ops = ops_for(5_000);
    ops.push(Op::Retire {
        labels: Labels::metric("explicit", [("job", "x")]),
        ts_ms: 6_000,
    });
    ops.push(Op::Maintain { now_ms: 7_000 });
    for round in 0..2 {
        let mut p = Vec::new();
        enc.encode(&ops, &mut p);
        let mut got = Vec::new();
        dec.decode(&p, |o| got.push(o)).expect("decode");
        assert_eq!(got, ops);
        if round == 1 {
            // Second record: labels are references, not definitions.
            assert!(p.len() < 60, "{} bytes", p.len());
        }
    }
    // A fresh decoder (a later segment) cannot resolve references.
    let mut p = Vec::new();
    enc.encode(&ops, &mut p);
    assert!(Decoder::default().decode(&p, |_| {}).is_err());
}

#[test]
fn reopen_restores_everything_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, rec) = open(cfg(dir.path()));
    assert_eq!(rec, Recovery::default());
    feed(&s, 1, 30);
    let before = (
        points(&s, "ticks_total"),
        points(&s, "explicit"),
        points(&s, "up"),
    );
    assert_eq!(before.0.len(), 29);
    drop(s);
    let (s, rec) = open(cfg(dir.path()));
    assert!(rec.ops > 80, "{rec:?}");
    assert_eq!(rec.bad_records, 0);
    assert_eq!(
        (
            points(&s, "ticks_total"),
            points(&s, "explicit"),
            points(&s, "up")
        ),
        before
    );
    // It keeps working after recovery, and a second restart sees both runs.
    feed(&s, 30, 40);
    let after = points(&s, "ticks_total");
    assert_eq!(after.len(), 39);
    drop(s);
    let (s, _) = open(cfg(dir.path()));
    assert_eq!(points(&s, "ticks_total"), after);
}

fn last_segment(dir: &Path) -> PathBuf {
    let n = *list(dir, "wal-")
        .expect("list")
        .iter()
        .rev()
        .find(|&&n| fs::metadata(seg_path(dir, n)).map(|m| m.len()).unwrap_or(0) > 0)
        .expect("a non-empty segment");
    seg_path(dir, n)
}

#[test]
fn torn_last_record_is_cut_and_the_rest_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, _) = open(cfg(dir.path()));
    feed(&s, 1, 11);
    let before = points(&s, "ticks_total");
    drop(s);
    // A crash in the middle of writing the next record: a frame header that
    // promises 100 bytes, followed by 10.
    let seg = last_segment(dir.path());
    let good_len = fs::metadata(&seg).expect("meta").len();
    let mut f = OpenOptions::new().append(true).open(&seg).expect("open");
    f.write_all(&100u32.to_le_bytes()).expect("w");
    f.write_all(&[0u8; 14]).expect("w");
    drop(f);
    let (s, rec) = open(cfg(dir.path()));
    assert_eq!(rec.bad_records, 1);
    assert_eq!(points(&s, "ticks_total"), before);
    assert_eq!(
        fs::metadata(&seg).expect("meta").len(),
        good_len,
        "torn tail cut off"
    );
    drop(s);
    let (_, rec) = open(cfg(dir.path()));
    assert_eq!(rec.bad_records, 0, "the cut is permanent");
}

#[test]
fn corrupt_last_record_fails_its_crc_and_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, _) = open(cfg(dir.path()));
    feed(&s, 1, 11);
    let all = points(&s, "ticks_total");
    drop(s);
    let seg = last_segment(dir.path());
    let mut bytes = fs::read(&seg).expect("read");
    let n = bytes.len();
    bytes[n - 1] ^= 0x5a; // inside the last record's payload
    fs::write(&seg, &bytes).expect("write");
    let (s, rec) = open(cfg(dir.path()));
    assert_eq!(rec.bad_records, 1);
    // The last record was the tick of t=10 (a Maintain): data is intact.
    assert_eq!(points(&s, "ticks_total"), all);
    assert!(fs::metadata(&seg).expect("meta").len() < n as u64);
}

#[test]
fn corrupt_record_in_an_older_segment_loses_only_that_segment_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = cfg(dir.path());
    c.segment_bytes = 200;
    let (s, _) = open(c.clone());
    feed(&s, 1, 41);
    drop(s);
    let segs = list(dir.path(), "wal-").expect("list");
    assert!(segs.len() > 4, "{segs:?}");
    let victim = seg_path(dir.path(), segs[1]);
    let mut bytes = fs::read(&victim).expect("read");
    bytes[10] ^= 0xff;
    fs::write(&victim, &bytes).expect("write");
    let (s, rec) = open(c);
    assert_eq!(rec.bad_records, 1);
    let p = points(&s, "explicit");
    // The newest samples (later segments) are still there.
    assert_eq!(p.last().map(|x| x.0), Some(40_000));
    assert!(p.len() < 40);
}

#[test]
fn checkpoint_writes_a_snapshot_and_drops_covered_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = cfg(dir.path());
    c.segment_bytes = 300;
    c.checkpoint_bytes = 1000;
    let (s, _) = open(c.clone());
    feed(&s, 1, 60);
    let before = (
        points(&s, "ticks_total"),
        points(&s, "explicit"),
        points(&s, "up"),
    );
    let snaps = list(dir.path(), "snapshot-").expect("list");
    assert_eq!(snaps.len(), 1, "one snapshot kept");
    let segs = list(dir.path(), "wal-").expect("list");
    assert!(segs.iter().all(|&n| n >= snaps[0]), "{segs:?} vs {snaps:?}");
    assert!(segs.len() <= 6, "{segs:?}");
    drop(s);
    let (s, rec) = open(c);
    assert_eq!(rec.snapshot, Some(snaps[0]));
    assert_eq!(
        (
            points(&s, "ticks_total"),
            points(&s, "explicit"),
            points(&s, "up")
        ),
        before
    );
}

#[test]
fn unreadable_snapshot_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(snap_path(dir.path(), 3), b"not a snapshot").expect("write");
    let err = Wal::open(cfg(dir.path()), LiveStoreConfig::default()).expect_err("refused");
    assert!(err.to_string().contains("snapshot-0000000003"), "{err}");
}

#[test]
fn fsync_policy_parses() {
    assert_eq!("tick".parse::<FsyncPolicy>(), Ok(FsyncPolicy::Tick));
    assert_eq!("always".parse::<FsyncPolicy>(), Ok(FsyncPolicy::Always));
    assert!("sometimes".parse::<FsyncPolicy>().is_err());
}

proptest::proptest! {
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
        let _ = Decoder::default().decode(&bytes, |_| {});
        let _ = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &bytes[..]);
        let mut buf = Vec::new();
        let _ = read_frame(&mut &bytes[..], &mut buf, 1 << 16);
    }

    #[test]
    fn sample_batches_round_trip_at_any_times_and_values(
        points in proptest::collection::vec((proptest::num::i64::ANY, proptest::num::u64::ANY), 0..40),
        prefix in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
    ) {
        // Any timestamps (deltas of deltas up to 10-byte varints) and any
        // value bits, written after arbitrary bytes already in the buffer.
        let op = Op::Samples {
            labels: Labels::metric("m", [("k", "v")]),
            samples: points
                .iter()
                .map(|&(ts_ms, bits)| crate::store::Sample { ts_ms, value: f64::from_bits(bits) })
                .collect(),
        };
        let mut out = prefix.clone();
        Encoder::default().encode(std::slice::from_ref(&op), &mut out);
        proptest::prop_assert_eq!(&out[..prefix.len()], &prefix[..]);
        let mut got = Vec::new();
        Decoder::default().decode(&out[prefix.len()..], |o| got.push(o)).expect("decode");
        proptest::prop_assert_eq!(got.len(), 1);
        let (Op::Samples { samples: a, .. }, Op::Samples { samples: b, .. }) = (&got[0], &op) else {
            panic!("not a samples op");
        };
        proptest::prop_assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            proptest::prop_assert_eq!((x.ts_ms, x.value.to_bits()), (y.ts_ms, y.value.to_bits()));
        }
    }
}

fn batch(series: &str, from: i64, n: i64) -> Op {
    Op::Samples {
        labels: Labels::metric("batched", [("series", series)]),
        samples: (from..from + n)
            .map(|k| crate::store::Sample {
                ts_ms: k * 1000,
                value: (k * 7) as f64 + 0.25,
            })
            .collect(),
    }
}

#[test]
fn series_batches_encode_labels_once_then_samples_by_reference() {
    let mut enc = Encoder::default();
    let mut dec = Decoder::default();
    let ops = vec![batch("a", 1, 100), batch("b", 1, 3)];
    let mut first = Vec::new();
    enc.encode(&ops, &mut first);
    let mut second = Vec::new();
    let next = vec![batch("a", 101, 100)];
    enc.encode(&next, &mut second);
    // Steady 1 s ticks: 1 delta-of-delta byte + 8 value bytes per sample,
    // plus a few bytes of header; no label bytes once the series is defined.
    assert!(second.len() <= 100 * 9 + 8, "{} bytes", second.len());
    let mut got = Vec::new();
    dec.decode(&first, |o| got.push(o)).expect("first record");
    dec.decode(&second, |o| got.push(o)).expect("second record");
    let mut want = ops;
    want.extend(next);
    assert_eq!(got, want);
    // A count beyond what the payload can hold is refused, not allocated.
    let mut bogus = second.clone();
    bogus[2] = 0xff;
    assert!(Decoder::default().decode(&bogus, |_| {}).is_err());
}

#[test]
fn series_batches_replay_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, _) = open(cfg(dir.path()));
    let out = s
        .apply(&[batch("a", 1, 50), batch("b", 1, 50)])
        .expect("apply");
    assert_eq!(out.rejected, 0);
    // Out-of-order samples inside a batch are refused one by one (40..49);
    // the repeat of the newest sample (50) is accepted as a no-op.
    let out = s.apply(&[batch("a", 40, 20)]).expect("apply");
    assert_eq!(out.rejected, 10);
    let before = points(&s, "batched");
    assert_eq!(before.len(), 50 + 50 + 9);
    drop(s);
    let (s, rec) = open(cfg(dir.path()));
    assert_eq!(rec.ops, 3);
    assert_eq!(points(&s, "batched"), before);
}

#[test]
fn ingest_goes_on_while_a_checkpoint_streams_and_nothing_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = cfg(dir.path());
    c.checkpoint_bytes = 1;
    let (mut store, mut wal, _) = Wal::open(c.clone(), LiveStoreConfig::default()).expect("open");
    let first = [batch("a", 1, 30)];
    wal.log(&first).expect("log");
    for op in &first {
        op.apply(&mut store).expect("apply");
    }
    store.maintain(30_000);
    // The cut is taken here (the caller holds the locks)...
    let pending = wal
        .tick(&store)
        .expect("tick")
        .expect("a checkpoint is due");
    // ...then the locks are released: ingest continues, into the new
    // segment, and into chunks the cut shares (copied on write).
    let later = [batch("a", 31, 30), batch("b", 1, 5)];
    wal.log(&later).expect("log during the checkpoint");
    for op in &later {
        op.apply(&mut store).expect("apply");
    }
    pending().expect("checkpoint written");
    let want = {
        let s = SharedStore::new(store);
        points(&s, "batched")
    };
    assert_eq!(want.len(), 65);
    drop(wal);
    let snaps = list(dir.path(), "snapshot-").expect("list");
    assert_eq!(snaps.len(), 1);
    let (s, rec) = open(c);
    assert_eq!(rec.snapshot, Some(snaps[0]));
    // The snapshot holds the cut (30 samples of a); the segment after it
    // the rest.
    assert_eq!(rec.ops, 2);
    assert_eq!(points(&s, "batched"), want);
}

#[test]
fn snapshot_cut_is_not_changed_by_later_appends() {
    let mut store = LiveStore::new(LiveStoreConfig::default());
    batch("a", 1, 10).apply(&mut store).expect("apply");
    let cut = store.snapshot_cut();
    let mut before = Vec::new();
    cut.write(&mut before).expect("write");
    batch("a", 11, 10).apply(&mut store).expect("apply");
    let mut after = Vec::new();
    cut.write(&mut after).expect("write");
    assert_eq!(before, after, "the open chunk was copied on write");
    let back = LiveStore::read_snapshot(LiveStoreConfig::default(), &mut &before[..])
        .expect("read the cut back");
    assert_eq!(back.stats().change_points, 10);
    assert_eq!(store.stats().change_points, 20);
}

/// Guards the journal-to-store lock hand-off: batches applied from several
/// threads at once, racing on one series (so out-of-order refusals depend
/// on the order), replay from the log into exactly the live store.
#[test]
fn concurrent_batches_replay_in_the_order_they_were_applied() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (s, _) = open(cfg(dir.path()));
    let labels = Labels::metric("raced", [("job", "x")]);
    std::thread::scope(|sc| {
        for th in 0..4i64 {
            let (s, labels) = (&s, labels.clone());
            sc.spawn(move || {
                for k in 0..200i64 {
                    let samples = (0..3)
                        .map(|j| crate::store::Sample {
                            ts_ms: (k * 3 + j) * 1000 + th,
                            value: (th * 1000 + k) as f64,
                        })
                        .collect();
                    s.apply(&[Op::Samples {
                        labels: labels.clone(),
                        samples,
                    }])
                    .expect("apply");
                }
            });
        }
    });
    let live = points(&s, "raced");
    assert!(live.len() > 600, "some batches were stored: {}", live.len());
    drop(s);
    let (back, rec) = open(cfg(dir.path()));
    assert_eq!(rec.bad_records, 0);
    assert_eq!(points(&back, "raced"), live);
}

/// Applies `op` (an [`Op::Samples`]) to `store` through `hint` and
/// returns the refreshed hint.
fn apply_hinted(store: &mut LiveStore, op: &Op, mut hint: SeriesHint) -> SeriesHint {
    let Op::Samples { labels, samples } = op else {
        panic!("not a samples op");
    };
    store.append_samples_hinted(labels, samples, &mut hint, &mut |_, r| {
        r.expect("sample stored");
    });
    hint
}

#[test]
fn hinted_series_are_referenced_by_slot_and_a_reused_slot_is_defined_anew() {
    let mut store = LiveStore::new(LiveStoreConfig {
        retention_ms: 1_000,
        ..LiveStoreConfig::default()
    });
    let (mut enc, mut dec) = (Encoder::default(), Decoder::default());
    let mut records = Vec::new();
    let mut want = Vec::new();
    // Whether a record holds a definition: the label text is in it.
    let defines = |p: &[u8]| p.windows(7).any(|w| w == b"batched");
    let mut log = |enc: &mut Encoder, ops: Vec<Op>, hints: &[SeriesHint]| {
        let mut p = Vec::new();
        enc.encode_hinted(&ops, hints, &mut p);
        want.extend(ops);
        records.push(p.clone());
        defines(&p)
    };
    // First sight: no hint yet, so the labels are defined (and kept by label set).
    let a1 = batch("a", 1, 3);
    assert!(log(&mut enc, vec![a1.clone()], &[SeriesHint::default()]));
    let hint_a = apply_hinted(&mut store, &a1, SeriesHint::default());
    let (_, slot_a, gen_a) = hint_a.slot().expect("the store filled the hint");
    // With the hint: a reference, no label bytes.
    assert!(!log(&mut enc, vec![batch("a", 4, 3)], &[hint_a]));
    // Retention frees a's slot; b takes it (the same slot, a new generation).
    store.maintain(200_000);
    let b = batch("b", 300, 2);
    let hint_b = apply_hinted(&mut store, &b, SeriesHint::default());
    let (_, slot_b, gen_b) = hint_b.slot().expect("hint");
    assert_eq!((slot_b, gen_b), (slot_a, gen_a.wrapping_add(1)));
    // b under its own hint must be defined, not taken for a...
    assert!(
        log(&mut enc, vec![b.clone()], &[hint_b]),
        "b was not defined"
    );
    // ...and then referenced; a's stale hint still names a.
    assert!(!log(&mut enc, vec![batch("b", 302, 2)], &[hint_b]));
    assert!(!log(&mut enc, vec![batch("a", 7, 2)], &[hint_a]));
    // A series hinted from the start (a new segment) is defined once, by slot.
    enc.reset();
    let mut dec2 = Decoder::default();
    let mut got2 = Vec::new();
    for k in 0..3 {
        let op = batch("b", 400 + 2 * k, 2);
        let mut p = Vec::new();
        enc.encode_hinted(std::slice::from_ref(&op), &[hint_b], &mut p);
        assert_eq!(defines(&p), k == 0, "record {k}");
        dec2.decode(&p, |o| got2.push(o)).expect("decode");
        assert_eq!(got2.last(), Some(&op));
    }
    assert_eq!(enc.dictionary_len(), 1);
    let mut got = Vec::new();
    for r in &records {
        dec.decode(r, |o| got.push(o)).expect("decode");
    }
    assert_eq!(got, want);
}

#[test]
fn hinted_ingest_replays_after_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, _) = open(cfg(dir.path()));
    let mut hints = vec![SeriesHint::default(); 2];
    for k in 0..5 {
        let ops = [batch("a", 1 + 10 * k, 10), batch("b", 1 + 10 * k, 10)];
        let out = s
            .apply_each_hinted(&ops, &mut hints, |_, _, r| {
                r.expect("stored");
            })
            .expect("apply");
        assert_eq!(out.rejected, 0);
        assert!(hints.iter().all(|h| h.slot().is_some()));
    }
    let before = points(&s, "batched");
    assert_eq!(before.len(), 100);
    drop(s);
    let (s, rec) = open(cfg(dir.path()));
    assert_eq!(rec.ops, 10);
    assert_eq!(points(&s, "batched"), before);
}

#[test]
fn remote_write_bodies_are_logged_as_they_came_and_replay_to_the_same_store() {
    use crate::remote_write::receiver::{ReceiverState, ingest};
    use crate::remote_write::wire::{self, WireLimits};
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, _) = open(cfg(dir.path()));
    let st = ReceiverState::new(s.clone(), None, WireLimits::default());
    let series: Vec<Labels> = (0..20)
        .map(|i| Labels::metric("rw_logged", [("node", format!("n{i}").as_str())]))
        .collect();
    let mut bodies = Vec::new();
    for k in 0..6i64 {
        let samples: Vec<(&Labels, i64, f64)> = series
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                (0..3).map(move |j| (l, (k * 3 + j) * 1000, (i as f64) * 0.1 + j as f64))
            })
            .collect();
        let body = wire::encode(&wire::request_of(samples)).expect("encode");
        ingest(&st, &body).expect("stored");
        bodies.push(body);
    }
    let before = points(&s, "rw_logged");
    assert_eq!(before.len(), 20 * 18);
    drop((st, s));
    assert_bodies_logged_and_replayed(dir.path(), &bodies, "rw_logged", 6 * 20, &before);
}

/// The last segment under `dir` holds each of `bodies` as it came (not ops
/// made of them), and reopening the log replays `ops` ops (one per series
/// a body) to the points of `metric` that were there before (`before`).
fn assert_bodies_logged_and_replayed(
    dir: &Path,
    bodies: &[Vec<u8>],
    metric: &str,
    ops: u64,
    before: &[(i64, u64)],
) {
    let seg = fs::read(last_segment(dir)).expect("segment");
    assert!(
        bodies
            .iter()
            .all(|b| seg.windows(b.len()).any(|w| w == &b[..])),
        "every body is in the log as it came"
    );
    let (s, rec) = open(cfg(dir));
    assert_eq!(rec.ops, ops, "each body replays as one op per series");
    assert_eq!(rec.bad_records, 0);
    assert_eq!(points(&s, metric), before);
}

#[test]
fn a_torn_body_record_is_cut_and_the_bodies_before_it_recover() {
    use crate::remote_write::receiver::{ReceiverState, ingest};
    use crate::remote_write::wire::{self, WireLimits};
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, _) = open(cfg(dir.path()));
    let st = ReceiverState::new(s.clone(), None, WireLimits::default());
    let l = Labels::metric("rw_torn", [("node", "a")]);
    for t in 0..4i64 {
        let body = wire::encode(&wire::request_of([(&l, t * 1000, t as f64)])).expect("encode");
        ingest(&st, &body).expect("stored");
    }
    drop((st, s));
    let p = last_segment(dir.path());
    let len = fs::metadata(&p).expect("meta").len();
    OpenOptions::new()
        .write(true)
        .open(&p)
        .and_then(|f| f.set_len(len - 3))
        .expect("tear");
    let (s, rec) = open(cfg(dir.path()));
    assert_eq!(rec.bad_records, 1);
    let got: Vec<i64> = points(&s, "rw_torn").iter().map(|p| p.0).collect();
    assert_eq!(got, vec![0, 1000, 2000]);
}

/// A body over one apply slice (64 k samples) is logged once, as it came,
/// and replays to the same store; so do the bodies around it, with the
/// series they share found by their bytes on replay as they were live.
#[test]
fn a_body_over_one_apply_slice_is_logged_once_and_replays_whole() {
    use crate::remote_write::receiver::{ReceiverState, ingest};
    use crate::remote_write::wire::{self, WireLimits};
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, _) = open(cfg(dir.path()));
    let st = ReceiverState::new(s.clone(), None, WireLimits::default());
    let series: Vec<Labels> = (0..90)
        .map(|i| Labels::metric("rw_big", [("node", format!("n{i}").as_str())]))
        .collect();
    let body_of = |from: i64, n: i64| {
        let samples: Vec<(&Labels, i64, f64)> = series
            .iter()
            .enumerate()
            .flat_map(|(i, l)| (from..from + n).map(move |t| (l, t * 1000, (i as i64 + t) as f64)))
            .collect();
        wire::encode(&wire::request_of(samples)).expect("encode")
    };
    // 90 x 800 = 72,000 samples: two slices.
    let bodies = [body_of(0, 2), body_of(2, 800), body_of(802, 2)];
    for b in &bodies {
        ingest(&st, b).expect("stored");
    }
    let before = points(&s, "rw_big");
    assert_eq!(before.len(), 90 * 804);
    drop((st, s));
    assert_bodies_logged_and_replayed(dir.path(), &bodies, "rw_big", 3 * 90, &before);
}
