//! Tests of the sans-I/O cores (tracker, queue) and the receiver.

use std::collections::HashMap;
use std::sync::Arc;

use canopy_proto::model::{Labels, is_stale_nan};
use proptest::prelude::*;

use super::queue::{Next, Outcome, QueueConfig, SendQueue, classify};
use super::tracker::{OutSample, TapEvent, Tracker, TrackerConfig};
use super::wire;

fn lab(name: &str, node: &str) -> Labels {
    Labels::from_pairs([("__name__", name), ("node", node)])
}

fn hb(src: &str, ts: i64) -> TapEvent {
    TapEvent::Heartbeat {
        source: src.into(),
        ts_ms: ts,
        tick_ms: 1000,
    }
}

fn smp(src: &str, l: &Labels, ts: i64, v: f64) -> TapEvent {
    TapEvent::Sample {
        source: src.into(),
        labels: l.clone(),
        ts_ms: ts,
        value: v,
    }
}

/// Samples per series, in emission order.
fn by_series(out: &[OutSample]) -> HashMap<Labels, Vec<(i64, f64)>> {
    let mut m: HashMap<Labels, Vec<(i64, f64)>> = HashMap::new();
    for s in out {
        m.entry((*s.labels).clone())
            .or_default()
            .push((s.ts_ms, s.value));
    }
    m
}

#[test]
fn change_only_data_is_expanded_per_tick_with_up() {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    let a = lab("cpu", "n1");
    for ev in [
        hb("n1", 1000),
        smp("n1", &a, 1000, 5.0),
        hb("n1", 2000),
        hb("n1", 3000),
        smp("n1", &a, 3000, 7.0),
    ] {
        t.on_event(ev, &mut out);
    }
    // The last tick waits for its flush delay.
    let m = by_series(&out);
    assert_eq!(m[&a], vec![(1000, 5.0), (2000, 5.0)]);
    t.poll(3000 + 500, &mut out);
    let m = by_series(&out);
    assert_eq!(m[&a], vec![(1000, 5.0), (2000, 5.0), (3000, 7.0)]);
    assert_eq!(
        m[&lab("up", "n1")],
        vec![(1000, 1.0), (2000, 1.0), (3000, 1.0)]
    );
    assert_eq!(t.stats().series, 1);
}

/// Implied values sit on the change point's grid, as the live store
/// answers them, even when heartbeats jitter around it.
#[test]
fn implied_samples_follow_the_change_point_grid() {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    let a = lab("cpu", "n1");
    t.on_event(hb("n1", 1010), &mut out);
    t.on_event(smp("n1", &a, 1010, 1.0), &mut out);
    for h in [1990, 3005, 3990] {
        t.on_event(hb("n1", h), &mut out);
    }
    t.on_event(smp("n1", &a, 3990, 2.0), &mut out);
    t.poll(5000, &mut out);
    let m = by_series(&out);
    assert_eq!(
        m[&a],
        vec![(1010, 1.0), (2010, 1.0), (3010, 1.0), (3990, 2.0)]
    );
    // `up` runs on the grid of the alive period's start.
    assert_eq!(
        m[&lab("up", "n1")],
        vec![(1010, 1.0), (2010, 1.0), (3010, 1.0)]
    );
    // The same value again (a keyframe) does not move the grid.
    t.on_event(hb("n1", 5020), &mut out);
    t.on_event(smp("n1", &a, 5020, 2.0), &mut out);
    t.poll(6000, &mut out);
    assert_eq!(by_series(&out)[&a].last(), Some(&(4990, 2.0)));
}

#[test]
fn retirement_writes_one_staleness_marker() {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    let a = lab("cpu", "n1");
    t.on_event(hb("n1", 1000), &mut out);
    t.on_event(smp("n1", &a, 1000, 1.0), &mut out);
    t.on_event(hb("n1", 2000), &mut out);
    t.on_event(
        TapEvent::Retire {
            source: "n1".into(),
            labels: a.clone(),
            ts_ms: 2600,
        },
        &mut out,
    );
    t.on_event(hb("n1", 3000), &mut out);
    t.poll(10_000, &mut out);
    let s = &by_series(&out)[&a];
    assert_eq!(s.len(), 3, "{s:?}");
    assert_eq!(&s[..2], &[(1000, 1.0), (2000, 1.0)]);
    assert_eq!(s[2].0, 2600);
    assert!(is_stale_nan(s[2].1));
    // A late sample cannot slip in behind the marker...
    t.on_event(smp("n1", &a, 2400, 3.0), &mut out);
    t.poll(11_000, &mut out);
    assert_eq!(by_series(&out)[&a].len(), 3);
    // ...and the ended series is forgotten after `keep_stale_ms`.
    assert_eq!(t.stats().series, 1);
    t.poll(2600 + 10 * 60 * 1000 + 1, &mut out);
    assert_eq!(t.stats().series, 0);
}

#[test]
fn a_silent_source_goes_stale_and_down() {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    let a = lab("cpu", "n1");
    t.on_event(hb("n1", 1000), &mut out);
    t.on_event(smp("n1", &a, 1000, 1.0), &mut out);
    t.poll(1600, &mut out);
    // Deadline: max(3 ticks, 5 s) after the last heartbeat.
    t.poll(6000, &mut out);
    assert_eq!(by_series(&out)[&a], vec![(1000, 1.0)]);
    t.poll(6001, &mut out);
    let m = by_series(&out);
    assert_eq!(m[&a].len(), 2);
    assert_eq!(m[&a][1].0, 2000);
    assert!(is_stale_nan(m[&a][1].1));
    let up = &m[&lab("up", "n1")];
    assert_eq!(up[0], (1000, 1.0));
    assert_eq!(
        &up[1..],
        &[
            (2000, 0.0),
            (3000, 0.0),
            (4000, 0.0),
            (5000, 0.0),
            (6000, 0.0)
        ]
    );
    // It comes back: up 1 again, the series resumes.
    t.on_event(hb("n1", 7000), &mut out);
    t.on_event(smp("n1", &a, 7000, 2.0), &mut out);
    t.poll(8000, &mut out);
    let m = by_series(&out);
    assert_eq!(m[&a].last(), Some(&(7000, 2.0)));
    assert_eq!(m[&lab("up", "n1")].last(), Some(&(7000, 1.0)));
}

#[test]
fn explicit_samples_pass_through_in_order() {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    let a = lab("rw", "x");
    for (ts, v) in [(10, 1.0), (20, 2.0), (15, 9.0), (20, 2.0), (30, 3.0)] {
        t.on_event(
            TapEvent::Explicit {
                labels: a.clone(),
                ts_ms: ts,
                value: v,
            },
            &mut out,
        );
    }
    assert_eq!(by_series(&out)[&a], vec![(10, 1.0), (20, 2.0), (30, 3.0)]);
    assert_eq!(t.stats().late, 2);
}

#[test]
fn the_series_limit_is_enforced() {
    let mut t = Tracker::new(TrackerConfig {
        max_series: 2,
        ..TrackerConfig::default()
    });
    let mut out = Vec::new();
    t.on_event(hb("n1", 1000), &mut out);
    for i in 0..5 {
        t.on_event(smp("n1", &lab(&format!("m{i}"), "n1"), 1000, 1.0), &mut out);
    }
    t.poll(5000, &mut out);
    assert_eq!(t.stats().series, 2);
    assert_eq!(t.stats().over_limit, 3);
}

proptest! {
    /// Whatever the event order, every series is sent with strictly
    /// increasing timestamps (a TSDB refuses a whole batch otherwise).
    #[test]
    fn per_series_timestamps_strictly_increase(
        evs in proptest::collection::vec((0u8..4, 0u8..3, 0u8..3, 0i64..8, 0u8..4), 1..120)
    ) {
        let mut t = Tracker::new(TrackerConfig::default());
        let mut out = Vec::new();
        let mut now = 0i64;
        for (kind, src, ser, dt, v) in evs {
            now += dt * 250;
            let src = format!("n{src}");
            let l = lab(&format!("m{ser}"), &src);
            let ev = match kind {
                0 => hb(&src, now),
                1 => smp(&src, &l, now - 250 * i64::from(v % 2), f64::from(v)),
                2 => TapEvent::Retire { source: src, labels: l, ts_ms: now },
                _ => { t.poll(now, &mut out); continue; }
            };
            t.on_event(ev, &mut out);
        }
        t.poll(now + 60_000, &mut out);
        for (l, s) in by_series(&out) {
            for w in s.windows(2) {
                prop_assert!(w[0].0 < w[1].0, "{} {:?}", l, s);
            }
        }
    }
}

fn out(l: &Arc<Labels>, ts: i64) -> OutSample {
    OutSample {
        labels: Arc::clone(l),
        ts_ms: ts,
        value: ts as f64,
    }
}

fn send(q: &mut SendQueue, now: i64) -> super::queue::Batch {
    match q.next(now).expect("encodes") {
        Next::Send(b) => b,
        other => panic!("expected a batch at {now}, got {other:?}"),
    }
}

#[test]
fn batches_are_cut_when_full_or_after_the_wait() {
    let mut q = SendQueue::new(QueueConfig {
        max_batch: 3,
        batch_wait_ms: 1000,
        ..QueueConfig::default()
    });
    let l = Arc::new(lab("m", "a"));
    assert!(matches!(q.next(0), Ok(Next::Idle)));
    q.push([out(&l, 1), out(&l, 2)], 0);
    assert!(matches!(q.next(10), Ok(Next::WaitUntil(1000))));
    q.push([out(&l, 3), out(&l, 4)], 20);
    let b = send(&mut q, 20);
    assert_eq!(b.samples, 3);
    let req = wire::decode(&b.body, &wire::WireLimits::default()).expect("decodes");
    let ts: Vec<i64> = req.timeseries[0]
        .samples
        .iter()
        .map(|s| s.timestamp)
        .collect();
    assert_eq!(ts, vec![1, 2, 3]);
    assert_eq!(q.on_outcome(&Outcome::Accepted, 30), None);
    // One left: it goes after the batch wait.
    assert!(matches!(q.next(30), Ok(Next::WaitUntil(1020))));
    assert_eq!(send(&mut q, 1020).samples, 1);
    q.on_outcome(&Outcome::Accepted, 1030);
    let st = q.stats();
    assert_eq!((st.samples_sent, st.batches_sent, st.queued), (4, 2, 0));
}

#[test]
fn a_full_queue_drops_its_oldest_and_counts() {
    let mut q = SendQueue::new(QueueConfig {
        capacity: 5,
        max_batch: 100,
        batch_wait_ms: 0,
        ..QueueConfig::default()
    });
    let l = Arc::new(lab("m", "a"));
    q.push((0..8).map(|i| out(&l, i)), 0);
    assert_eq!(q.stats().dropped_overflow, 3);
    let b = send(&mut q, 0);
    let req = wire::decode(&b.body, &wire::WireLimits::default()).expect("decodes");
    let ts: Vec<i64> = req.timeseries[0]
        .samples
        .iter()
        .map(|s| s.timestamp)
        .collect();
    assert_eq!(ts, vec![3, 4, 5, 6, 7]);
}

#[test]
fn retries_back_off_exponentially_and_refusals_drop() {
    let mut q = SendQueue::new(QueueConfig {
        batch_wait_ms: 0,
        min_backoff_ms: 100,
        max_backoff_ms: 1000,
        ..QueueConfig::default()
    });
    let l = Arc::new(lab("m", "a"));
    q.push([out(&l, 1)], 0);
    let first = send(&mut q, 0);
    let mut now = 0;
    let mut delays = Vec::new();
    for _ in 0..6 {
        let d = q
            .on_outcome(&Outcome::Retry("HTTP 503".into()), now)
            .expect("retried");
        delays.push(d);
        assert!(matches!(q.next(now + d - 1), Ok(Next::WaitUntil(_))));
        now += d;
        let again = send(&mut q, now);
        assert_eq!(again.body, first.body, "the same request is resent");
    }
    assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000]);
    assert_eq!(
        q.on_outcome(&Outcome::Refused("HTTP 400".into()), now),
        None
    );
    let st = q.stats();
    assert_eq!((st.retries, st.dropped_refused, st.samples_sent), (6, 1, 0));
    assert!(matches!(q.next(now), Ok(Next::Idle)));
}

#[test]
fn statuses_are_classified_like_prometheus() {
    assert_eq!(classify(204, ""), Outcome::Accepted);
    assert!(matches!(classify(500, "x"), Outcome::Retry(_)));
    assert!(matches!(classify(503, "x"), Outcome::Retry(_)));
    assert!(matches!(classify(429, "x"), Outcome::Retry(_)));
    assert!(matches!(classify(400, "x"), Outcome::Refused(_)));
    assert!(matches!(classify(404, "x"), Outcome::Refused(_)));
}

proptest! {
    /// What the tracker sends is what the live store answers for the same
    /// append path: same series, timestamps and values (staleness markers
    /// included), with jittery ticks, changes, retirements at ticks and
    /// silences past the deadline.
    #[test]
    fn the_tracker_sends_what_the_live_store_holds(
        steps in proptest::collection::vec((0u8..10, 0u8..3, -40i64..40, 0u8..4), 1..60)
    ) {
        use crate::store::{Appender, LiveStore, LiveStoreConfig, Matcher, MatchOp, Querier};
        let mut store = LiveStore::new(LiveStoreConfig::default());
        let mut t = Tracker::new(TrackerConfig::default());
        let mut out = Vec::new();
        let mut clock = 100_000i64;
        let mut values = [0.0f64; 3];
        for (kind, ser, jitter, v) in steps {
            let l = lab(&format!("m{ser}"), "n1");
            match kind {
                // A silence past the deadline.
                0 => {
                    clock += 7_000;
                    store.maintain(clock);
                    t.poll(clock, &mut out);
                }
                // A tick: heartbeat, then changes of the series whose value moved.
                _ => {
                    clock += 1000;
                    let ts = clock + jitter;
                    store.heartbeat("n1", ts, 1000);
                    t.on_event(TapEvent::Heartbeat { source: "n1".into(), ts_ms: ts, tick_ms: 1000 }, &mut out);
                    let i = usize::from(ser);
                    if kind == 1 {
                        // Retirements travel at their section's tick.
                        store.retire(&l, ts);
                        t.on_event(
                            TapEvent::Retire {
                                source: "n1".into(),
                                labels: l.clone(),
                                ts_ms: ts,
                            },
                            &mut out,
                        );
                    } else if v > 0 {
                        values[i] += f64::from(v);
                        if store.append(Some("n1"), &l, ts, values[i]).is_ok() {
                            t.on_event(smp("n1", &l, ts, values[i]), &mut out);
                        }
                    }
                    store.maintain(ts + 600);
                    t.poll(ts + 600, &mut out);
                }
            }
        }
        let all = [Matcher { name: "__name__".into(), op: MatchOp::NotEqual(String::new()) }];
        let held = store.select(&all, 0, clock + 600, 100).expect("select");
        let sent = by_series(&out);
        for s in &held {
            let want: Vec<(i64, u64)> = s.samples.iter().map(|x| (x.ts_ms, x.value.to_bits())).collect();
            let got: Vec<(i64, u64)> = sent.get(&s.labels).map(|v| v.iter().map(|(t, x)| (*t, x.to_bits())).collect()).unwrap_or_default();
            prop_assert_eq!(&got, &want, "{}", s.labels);
        }
        prop_assert_eq!(sent.len(), held.len());
    }
}
