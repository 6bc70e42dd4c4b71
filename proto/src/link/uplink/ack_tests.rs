//! Acknowledgements and replay of the unacknowledged tail (sans-I/O).

use super::outbox::{AckError, BufferLimits, Outbox};
use super::shadow::Recipe;
use crate::codec::tests::encode_payload;
use crate::codec::{BoundsPolicy, CodecConfig, LinkDecoder, LinkEncoder, Sender};
use crate::model::{Labels, MetricKind};

fn lim(max_bytes: usize) -> BufferLimits {
    BufferLimits {
        max_bytes,
        max_age_ms: 60_000,
        segment_ms: 10_000,
    }
}

fn outbox(max_bytes: usize) -> Outbox {
    Outbox::new(lim(max_bytes), CodecConfig::default())
}

fn ticks() -> Labels {
    Labels::metric("ticks_total", [("node", "n1")])
}

/// One node's stream: tick `t` (1-based) carries `ticks_total = t`, a gauge
/// that exists from tick 4 on, and a gauge that ends after tick 5.
fn stream(n: i64) -> Vec<Vec<u8>> {
    stream_with_recipes(n).into_iter().map(|r| r.0).collect()
}

/// [`stream`] with each record's recipe, as the `UplinkEncoder` makes them.
fn stream_with_recipes(n: i64) -> Vec<(Vec<u8>, Recipe)> {
    let cfg = CodecConfig::default();
    let mut tx = Sender::new(BoundsPolicy::default());
    let mut enc = LinkEncoder::new(&cfg).expect("encoder");
    let src = tx.source("n1", 1000);
    let late = Labels::metric("late", [("node", "n1")]);
    let early = Labels::metric("early", [("node", "n1")]);
    let mut out = Vec::new();
    for t in 1..=n {
        tx.begin_tick(t * 1000);
        tx.tick_source(src, t * 1000);
        tx.observe(src, &ticks(), MetricKind::Counter, t as f64);
        if t >= 4 {
            tx.observe(src, &late, MetricKind::Gauge, 10.0 * t as f64);
        }
        if t <= 5 {
            tx.observe(src, &early, MetricKind::Gauge, 2.0);
        }
        let (table, cs) = tx.finish_tick();
        let payload = encode_payload(&mut enc, table, cs);
        let recipe = Recipe::new(table, cs, t == 1);
        tx.end_tick();
        out.push((payload, recipe));
    }
    out
}

/// Every sample and retirement a fresh decoder reads from `recs`:
/// (ts, labels, value or NaN for a retirement), in order.
fn replayed_samples(recs: &[Vec<u8>]) -> Vec<(i64, String, f64)> {
    let mut dec = LinkDecoder::new(&CodecConfig::default()).expect("decoder");
    let mut out = Vec::new();
    for r in recs {
        let f = dec.decode(r).expect("a fresh decoder reads the replay");
        for sec in &f.sections {
            for &(id, v) in &sec.updates {
                let l = dec.series(id).map(|s| format!("{:?}", s.labels));
                out.push((sec.ts_ms, l.unwrap_or_default(), v));
            }
            for (_, s) in &sec.retired {
                out.push((sec.ts_ms, format!("{:?}", s.labels), f64::NAN));
            }
        }
        for (_, s) in &f.retired {
            out.push((f.ts_ms, format!("{:?}", s.labels), f64::NAN));
        }
    }
    out
}

/// Sends `sent` records of a fresh outbox fed `stream_with_recipes(n)`
/// (with or without the recipes), acks `acked`, loses the link, and
/// returns the replayed segment.
fn lose_after(n: i64, sent: usize, acked: u64, recipes: bool) -> Vec<Vec<u8>> {
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    for (i, (r, rc)) in stream_with_recipes(n).into_iter().enumerate() {
        let rc = recipes.then_some(rc);
        assert!(o.push_recipe(e, 0, r, i as u64 + 1, rc));
    }
    for _ in 0..sent {
        o.sent();
    }
    assert_eq!(o.ack(e, acked), Ok(acked as usize));
    o.link_lost();
    take_backlog(&mut o)
}

#[test]
fn the_shadow_rebuilds_the_same_tail_as_the_mirror() {
    // Acks before, at and after the series set changes (tick 4 adds one,
    // tick 6 retires one), with written and unwritten tails.
    for (acked, sent) in [(1, 1), (1, 8), (3, 5), (4, 4), (5, 9), (6, 6), (8, 10)] {
        let from_shadow = replayed_samples(&lose_after(10, sent, acked, true));
        let from_mirror = replayed_samples(&lose_after(10, sent, acked, false));
        assert!(!from_shadow.is_empty());
        let same = from_shadow.len() == from_mirror.len()
            && from_shadow.iter().zip(&from_mirror).all(|(a, b)| {
                a.0 == b.0 && a.1 == b.1 && (a.2 == b.2 || a.2.is_nan() && b.2.is_nan())
            });
        assert!(
            same,
            "acked {acked}, sent {sent}:\n{from_shadow:?}\n{from_mirror:?}"
        );
    }
}

#[test]
fn with_recipes_the_acknowledged_records_are_not_decoded() {
    // Records no decoder could read, with their true recipes: only a path
    // that never decodes them rebuilds the tail (ticks 3..=6 here).
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    let recs = stream_with_recipes(6);
    for (i, (_, rc)) in recs.into_iter().enumerate() {
        assert!(o.push_recipe(e, 0, vec![0xff; 9], i as u64 + 1, Some(rc)));
    }
    send_all(&mut o);
    assert_eq!(o.ack(e, 2), Ok(2));
    o.link_lost();
    let got = replayed_ticks(&take_backlog(&mut o));
    let want: Vec<(i64, f64)> = (2..=6).map(|t| (t * 1000, t as f64)).collect();
    assert_eq!(got, want, "the snapshot of tick 2, then ticks 3..=6");
    assert_eq!(o.stats().dropped_records, 0);
}

#[test]
fn recipes_over_the_byte_limit_fall_back_on_the_mirror() {
    let recs = stream_with_recipes(6);
    let rec_bytes: usize = recs.iter().map(|r| r.0.len()).sum();
    let recipe_bytes: usize = recs.iter().map(|r| r.1.bytes()).sum();
    // Room for every record, not for every recipe.
    let max = rec_bytes.max(recipe_bytes / 2);
    assert!(max < recipe_bytes, "{rec_bytes} {recipe_bytes}");
    let mut o = outbox(max);
    let e = o.epoch();
    for (i, (r, rc)) in recs.into_iter().enumerate() {
        assert!(o.push_recipe(e, 0, r, i as u64 + 1, Some(rc)));
    }
    send_all(&mut o);
    assert_eq!(o.ack(e, 3), Ok(3));
    o.link_lost();
    let got = replayed_ticks(&take_backlog(&mut o));
    let want: Vec<(i64, f64)> = (3..=6).map(|t| (t * 1000, t as f64)).collect();
    assert_eq!(got, want, "the mirror decoded the acknowledged records");
}

#[test]
fn recipes_lost_after_an_ack_drop_the_tail_without_panic() {
    let recs = stream_with_recipes(6);
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    for (i, (r, rc)) in recs.into_iter().enumerate() {
        // The fifth record comes without its recipe.
        let rc = (i != 4).then_some(rc);
        assert!(o.push_recipe(e, 0, r, i as u64 + 1, rc));
        if i == 1 {
            o.sent();
            o.sent();
            assert_eq!(o.ack(e, 2), Ok(2));
        }
    }
    send_all(&mut o);
    o.link_lost();
    assert!(!o.has_backlog(), "no state to rebuild the tail from");
    assert_eq!(o.stats().dropped_records, 4);
    assert_eq!((o.records(), o.bytes()), (0, 0));
}

/// Decodes a replayed segment with a fresh decoder: (ts, ticks_total) samples.
fn replayed_ticks(recs: &[Vec<u8>]) -> Vec<(i64, f64)> {
    let mut dec = LinkDecoder::new(&CodecConfig::default()).expect("decoder");
    let mut out = Vec::new();
    for r in recs {
        let f = dec.decode(r).expect("a fresh decoder reads the replay");
        for sec in &f.sections {
            for &(id, v) in &sec.updates {
                if dec.series(id).is_some_and(|s| s.labels == ticks()) {
                    out.push((sec.ts_ms, v));
                }
            }
        }
    }
    out
}

fn send_all(o: &mut Outbox) -> usize {
    let mut n = 0;
    while o.next_live().is_some() {
        o.sent();
        n += 1;
    }
    n
}

fn take_backlog(o: &mut Outbox) -> Vec<Vec<u8>> {
    assert!(o.has_backlog(), "a lost link leaves its tail to replay");
    let recs: Vec<Vec<u8>> = o.backlog().map(<[u8]>::to_vec).collect();
    o.backlog_done();
    recs
}

#[test]
fn written_records_stay_until_the_parent_acks_them() {
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    for (i, r) in stream(3).into_iter().enumerate() {
        assert!(o.push_tagged(e, 0, r, i as u64 + 1));
    }
    assert_eq!(send_all(&mut o), 3);
    let held = o.bytes();
    assert!(held > 0, "written but unacked records are held");
    assert_eq!(o.unacked(), 3);
    assert_eq!(o.ack(e, 2), Ok(2));
    assert_eq!(o.records(), 1);
    assert!(o.bytes() < held);
    assert_eq!(o.acked_tag(), 2, "the tag of the last acked record");
    assert_eq!(o.ack(e, 3), Ok(1));
    assert_eq!((o.records(), o.bytes(), o.unacked()), (0, 0, 0));
    assert_eq!(o.stats().acked_records, 3);
    assert_eq!(o.stats().bad_acks, 0);
}

#[test]
fn stale_and_impossible_acks_are_refused_and_change_nothing() {
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    for r in stream(4) {
        assert!(o.push(e, 0, r));
    }
    o.sent();
    o.sent();
    assert_eq!(o.ack(e, 1), Ok(1));
    // Behind an earlier ack, beyond what was written, another epoch.
    assert_eq!(o.ack(e, 0), Err(AckError::Stale));
    assert_eq!(
        o.ack(e, 3),
        Err(AckError::Beyond {
            count: 3,
            written: 2
        })
    );
    assert_eq!(o.ack(e + 1, 1), Err(AckError::Stale));
    assert_eq!(
        o.ack(e, u64::MAX),
        Err(AckError::Beyond {
            count: u64::MAX,
            written: 2
        })
    );
    assert_eq!(o.stats().bad_acks, 4);
    assert_eq!(o.records(), 3, "nothing released by a refused ack");
    assert_eq!(o.unacked(), 1);
    // Still sends in order after all that.
    assert!(o.next_live().is_some());
}

#[test]
fn a_lost_link_with_nothing_acked_replays_its_records_as_they_are() {
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    let recs = stream(4);
    for r in recs.clone() {
        assert!(o.push(e, 0, r));
    }
    o.sent();
    o.sent();
    o.link_lost();
    assert_ne!(o.epoch(), e, "a new epoch for the next link");
    assert_eq!(
        take_backlog(&mut o),
        recs,
        "written or not, nothing is lost"
    );
    assert_eq!(o.stats().dropped_records, 0);
    assert_eq!(o.records(), 0);
}

#[test]
fn after_failover_the_unacked_tail_replays_oldest_first_from_the_mirror() {
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    for r in stream(8) {
        assert!(o.push(e, 0, r));
    }
    // Six written, three acked; two never written.
    for _ in 0..6 {
        o.sent();
    }
    assert_eq!(o.ack(e, 3), Ok(3));
    o.link_lost();
    let replay = take_backlog(&mut o);
    // A keyframe of the acked state (tick 3: already at the parent, so
    // downstream dedup drops it), then ticks 4..=8 in order, each once.
    let got = replayed_ticks(&replay);
    let want: Vec<(i64, f64)> = (3..=8).map(|t| (t * 1000, t as f64)).collect();
    assert_eq!(got, want);
    assert_eq!(
        replay.len(),
        6,
        "one snapshot plus the five unacked records"
    );
    assert_eq!(o.stats().replayed_unacked, 5);
    assert_eq!(o.stats().dropped_records, 0);
    // The new epoch streams live from a clean start.
    assert!(!o.has_backlog());
    assert_eq!(o.records(), 0);
}

#[test]
fn the_rebuilt_tail_keeps_new_and_retired_series() {
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    for r in stream(7) {
        assert!(o.push(e, 0, r));
    }
    send_all(&mut o);
    assert_eq!(o.ack(e, 2), Ok(2));
    o.link_lost();
    let replay = take_backlog(&mut o);
    let mut dec = LinkDecoder::new(&CodecConfig::default()).expect("decoder");
    let mut late = Vec::new();
    let mut early_retired_at = None;
    for r in &replay {
        let f = dec.decode(r).expect("decodes");
        for sec in &f.sections {
            for &(id, v) in &sec.updates {
                if dec.series(id).is_some_and(|s| s.labels.name() == "late") {
                    late.push((sec.ts_ms, v));
                }
            }
            for (_, s) in &sec.retired {
                if s.labels.name() == "early" {
                    early_retired_at = Some(sec.ts_ms);
                }
            }
        }
    }
    assert_eq!(
        late,
        vec![(4000, 40.0), (5000, 50.0), (6000, 60.0), (7000, 70.0)]
    );
    assert_eq!(early_retired_at, Some(6000), "the retirement replays too");
}

#[test]
fn the_byte_bound_holds_when_the_parent_never_acks() {
    let recs = stream(200);
    // A tenth of the stream, and at least the first record (the keyframe):
    // since format 3 the steady records are repeats of a few bytes.
    let max = (recs.iter().map(Vec::len).sum::<usize>() / 10).max(2 * recs[0].len());
    let mut o = outbox(max);
    let e = o.epoch();
    for r in recs {
        assert!(o.push(e, 0, r), "the live epoch continues");
        send_all(&mut o);
        assert!(o.bytes() <= max, "{} > {max}", o.bytes());
    }
    assert!(o.stats().unacked_released > 0, "counted");
    assert_eq!(
        o.stats().dropped_records,
        0,
        "written records are not lost data"
    );
}

#[test]
fn a_mirror_that_cannot_read_the_stream_drops_the_tail_without_panic() {
    let mut o = outbox(1 << 20);
    let e = o.epoch();
    // Garbage where a stream should be: the mirror is poisoned.
    for r in [vec![0xff; 20], vec![1, 2, 3], vec![]] {
        assert!(o.push(e, 0, r));
    }
    send_all(&mut o);
    assert_eq!(o.ack(e, 1), Ok(1));
    o.link_lost();
    assert!(!o.has_backlog());
    assert_eq!(o.stats().dropped_records, 2);
    assert_eq!(o.records(), 0);
    assert_eq!(o.bytes(), 0);
}
