//! A relay's uplink keeps what its parent has not acked and, when the
//! parent dies, replays the tail rebuilt for a fresh link: the gateway's
//! merger then holds every tick of every source exactly once (sans-I/O:
//! real senders, mergers, codecs and outbox, no sockets).

use std::collections::BTreeMap;

use canopy_aggregator::merge::{MergeConfig, Merger, Sink};
use canopy_proto::codec::{BoundsPolicy, CodecConfig, LinkEncoder, Sender, record};
use canopy_proto::link::{BufferLimits, Outbox};
use canopy_proto::{Labels, MetricKind};

/// (source, ts) -> values of `ticks_total` the gateway stored.
#[derive(Default)]
struct Ticks(BTreeMap<(String, i64), Vec<f64>>);

impl Sink for Ticks {
    fn sample(&mut self, source: &str, labels: &Labels, ts_ms: i64, value: f64) {
        if labels.name() == "ticks_total" {
            self.0
                .entry((source.to_string(), ts_ms))
                .or_default()
                .push(value);
        }
    }
    fn heartbeat(&mut self, _: &str, _: i64, _: u32) {}
    fn retire(&mut self, _: &str, _: &Labels, _: i64) {}
}

fn payload(rec: &[u8]) -> Vec<u8> {
    let (len, pre) = record::read_prefix(rec, usize::MAX)
        .expect("prefix")
        .expect("complete");
    rec[pre..pre + len].to_vec()
}

/// A leaf: one source ticking `ticks_total` on its own link to the relay.
struct Leaf {
    name: String,
    tx: Sender,
    enc: LinkEncoder,
    n: u64,
}

impl Leaf {
    fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            tx: Sender::new(BoundsPolicy::default()),
            enc: LinkEncoder::new(&CodecConfig::default()).expect("encoder"),
            n: 0,
        }
    }

    fn tick(&mut self, ts: i64) -> Vec<u8> {
        self.n += 1;
        let src = self.tx.source(&self.name.clone(), 1000);
        self.tx.begin_tick(ts);
        self.tx.tick_source(src, ts);
        let l = Labels::metric("ticks_total", [("node", self.name.as_str())]);
        self.tx.observe(src, &l, MetricKind::Counter, self.n as f64);
        let (table, cs) = self.tx.finish_tick();
        let mut rec = Vec::new();
        self.enc.encode(table, cs, &mut rec).expect("encode");
        self.tx.end_tick();
        payload(&rec)
    }
}

fn gateway() -> Merger {
    Merger::new(MergeConfig {
        hole_wait_ms: 8_000,
        ..MergeConfig::default()
    })
}

/// The relay ticks at `phase` ms into each second; its parent (the
/// gateway's path) acks `lag` records late and dies at second `kill`,
/// having received `sent_after` more records it never acked.
fn run(phase: i64, lag: u64, kill: i64, lost_in_flight: usize) -> Ticks {
    let mut leaves = [Leaf::new("a"), Leaf::new("b")];
    let mut relay = Merger::new(MergeConfig::default());
    for c in 1..=2 {
        relay.child_connected(c).expect("child");
    }
    let mut gw = gateway();
    let mut sink = Ticks::default();
    let mut out = Outbox::new(BufferLimits::default(), CodecConfig::default());
    let mut enc = LinkEncoder::new(&CodecConfig::default()).expect("encoder");
    let mut enc_epoch = out.epoch();
    let mut gw_child = 100;
    gw.child_connected(gw_child).expect("gateway child");
    let mut fed_on_link = 0u64;
    let mut dead = false;
    let mut in_flight = 0;
    let mut null = Ticks::default();
    for s in 1..=20i64 {
        for (i, l) in leaves.iter_mut().enumerate() {
            let rec = l.tick(s * 1000 + 22 + i as i64 * 300);
            relay
                .on_record(i as u64 + 1, &rec, &mut null)
                .expect("relay takes the leaf frame");
        }
        let now = s * 1000 + phase;
        {
            let (table, cs) = relay.take_changeset(now);
            if out.epoch() != enc_epoch {
                enc = LinkEncoder::new(&CodecConfig::default()).expect("encoder");
                enc_epoch = out.epoch();
            }
            let mut rec = Vec::new();
            enc.encode(table, cs, &mut rec).expect("encode");
            assert!(out.push(enc_epoch, now, payload(&rec)));
        }
        relay.end_tick();
        if s == kill {
            dead = true;
        }
        // Write what is pending on the live link.
        while let Some((_, rec)) = out.next_live() {
            let rec = rec.to_vec();
            out.sent();
            if dead {
                if in_flight < lost_in_flight {
                    // Reached the parent before it died: it passed it on
                    // but never acked it.
                    gw.on_record(gw_child, &rec, &mut sink).expect("gateway");
                    in_flight += 1;
                }
                continue;
            }
            gw.on_record(gw_child, &rec, &mut sink).expect("gateway");
            fed_on_link += 1;
        }
        if !dead && fed_on_link > lag {
            out.ack(enc_epoch, fed_on_link - lag).expect("a fair ack");
        }
        if s == kill + 2 {
            // The child notices: the tail replays on a link of its own,
            // then the live stream on another.
            out.link_lost();
            while out.has_backlog() {
                gw_child += 1;
                gw.child_connected(gw_child).expect("replay link");
                let recs: Vec<Vec<u8>> = out.backlog().map(<[u8]>::to_vec).collect();
                for r in recs {
                    gw.on_record(gw_child, &r, &mut sink)
                        .expect("replay decodes");
                }
                out.backlog_done();
                gw.child_gone(gw_child);
            }
            gw_child += 1;
            gw.child_connected(gw_child).expect("live link");
            fed_on_link = 0;
            dead = false;
        }
    }
    sink
}

fn check(t: &Ticks) {
    for src in ["a", "b"] {
        let vals: Vec<(i64, &Vec<f64>)> =
            t.0.iter()
                .filter(|((s, _), _)| s == src)
                .map(|((_, ts), v)| (*ts, v))
                .collect();
        assert_eq!(vals.len(), 20, "{src}: every tick arrives: {vals:?}");
        for (i, (_, v)) in vals.iter().enumerate() {
            assert_eq!(
                v.as_slice(),
                &[(i + 1) as f64],
                "{src}: tick {} once: {vals:?}",
                i + 1
            );
        }
    }
}

#[test]
fn a_dead_parent_costs_no_tick_and_doubles_none() {
    for phase in [100, 500, 900] {
        for lag in [0, 1, 2, 3] {
            for lost in [0, 1, 2] {
                check(&run(phase, lag, 6, lost));
            }
        }
    }
}
