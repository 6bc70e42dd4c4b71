//! A subtree top with two gateways dies while one gateway lags: the leaf
//! below must still hold, and replay to the gateways directly, every tick
//! that the lagging gateway had not taken. Sans-I/O and deterministic: real
//! senders, mergers, codecs and outboxes, the relay's ack rule
//! ([`AckQuorum`] over [`PendingAcks`]), data time only, no sockets.

use std::collections::{BTreeMap, VecDeque};

use canopy_aggregator::acks::{AckQuorum, PendingAcks, UpAck};
use canopy_aggregator::merge::{MergeConfig, Merger, Sink};
use canopy_proto::codec::{BoundsPolicy, CodecConfig, LinkEncoder, Sender, record};
use canopy_proto::link::{BufferLimits, Outbox};
use canopy_proto::{Labels, MetricKind};

/// ts (s) -> values of the leaf's `ticks_total` a gateway stored.
#[derive(Default)]
struct Ticks(BTreeMap<i64, Vec<f64>>);

impl Sink for Ticks {
    fn sample(&mut self, _: &str, labels: &Labels, ts_ms: i64, value: f64) {
        if labels.name() == "ticks_total" {
            self.0.entry(ts_ms / 1000).or_default().push(value);
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

fn codec() -> CodecConfig {
    CodecConfig::default()
}

/// An encoder for an outbox's epoch, started afresh (keyframe) whenever the
/// epoch moves on, as `UplinkEncoder` does.
struct Enc {
    enc: LinkEncoder,
    epoch: u64,
}

impl Enc {
    fn for_epoch(&mut self, epoch: u64) -> &mut LinkEncoder {
        if epoch != self.epoch {
            self.enc = LinkEncoder::new(&codec()).expect("encoder");
            self.epoch = epoch;
        }
        &mut self.enc
    }
}

fn enc(epoch: u64) -> Enc {
    Enc {
        enc: LinkEncoder::new(&codec()).expect("encoder"),
        epoch,
    }
}

/// One of the top's uplinks and the gateway behind it, which takes (and
/// acks) each record `lag` seconds after it was written.
struct Up {
    out: Outbox,
    gw: Merger,
    sink: Ticks,
    child: u64,
    on_link: u64,
    lag: i64,
    wire: VecDeque<(i64, Vec<u8>)>,
}

impl Up {
    fn new(lag: i64) -> Self {
        let out = Outbox::new(BufferLimits::default(), codec());
        let mut gw = Merger::new(MergeConfig {
            hole_wait_ms: 8_000,
            ..MergeConfig::default()
        });
        gw.child_connected(1).expect("top's link");
        Self {
            out,
            gw,
            sink: Ticks::default(),
            child: 1,
            on_link: 0,
            lag,
            wire: VecDeque::new(),
        }
    }

    /// Second `s`: what is queued goes on the wire; what has been on it
    /// for `lag` s arrives and is acked.
    fn deliver(&mut self, s: i64) {
        while let Some((_, r)) = self.out.next_live() {
            let r = r.to_vec();
            self.out.sent();
            self.wire.push_back((s, r));
        }
        while self.wire.front().is_some_and(|w| w.0 + self.lag <= s) {
            let (_, r) = self.wire.pop_front().expect("checked");
            self.gw
                .on_record(self.child, &r, &mut self.sink)
                .expect("gateway decodes");
            self.on_link += 1;
        }
        if self.on_link > 0 {
            let epoch = self.out.epoch();
            self.out.ack(epoch, self.on_link).expect("a fair ack");
        }
    }

    /// A new link of the leaf (failed over to the gateways): its child id.
    fn new_child(&mut self) -> u64 {
        self.child += 1;
        self.gw.child_connected(self.child).expect("new link");
        self.child
    }
}

/// The leaf ticks every second for 20 s; the top (its parent) relays to
/// gateways A (prompt) and B (`lag_b` s late) and dies at `kill`; at
/// `kill + 2` the leaf fails over to the gateways (its backup: all of
/// them), replaying its unacknowledged tail. `any_gateway`: the top acks
/// what any gateway holds (the old rule); else what every live one does.
fn run(any_gateway: bool, lag_b: i64, kill: i64) -> [Ticks; 2] {
    let mut tx = Sender::new(BoundsPolicy::default());
    let mut leaf_out = Outbox::new(BufferLimits::default(), codec());
    let mut leaf_enc = enc(leaf_out.epoch());
    let mut top = Merger::new(MergeConfig::default());
    top.child_connected(1).expect("leaf's link");
    let mut ups = [Up::new(0), Up::new(lag_b)];
    let mut top_encs = [enc(ups[0].out.epoch()), enc(ups[1].out.epoch())];
    let (mut pending, mut quorum) = (PendingAcks::default(), AckQuorum::default());
    let mut fed = 0u64;
    let mut null = Ticks::default();
    // The leaf's failed-over link: its child id at each gateway.
    let mut direct: Option<[u64; 2]> = None;
    let mut direct_sent = 0u64;
    for s in 1..=20i64 {
        // The leaf samples and queues its frame.
        let src = tx.source("leaf", 1000);
        tx.begin_tick(s * 1000);
        tx.tick_source(src, s * 1000);
        let l = Labels::metric("ticks_total", [("node", "leaf")]);
        tx.observe(src, &l, MetricKind::Counter, s as f64);
        let (table, cs) = tx.finish_tick();
        let epoch = leaf_out.epoch();
        let mut rec = Vec::new();
        leaf_enc
            .for_epoch(epoch)
            .encode(table, cs, &mut rec)
            .expect("encode");
        tx.end_tick();
        assert!(leaf_out.push(epoch, s * 1000, payload(&rec)));
        if s < kill {
            // The top takes it, relays at its tick, and acks the leaf
            // what the gateways hold by its ack rule.
            while let Some((_, r)) = leaf_out.next_live() {
                let r = r.to_vec();
                leaf_out.sent();
                top.on_record(1, &r, &mut null).expect("top decodes");
                fed += 1;
            }
            let (table, cs) = top.take_changeset(s * 1000 + 500);
            for (u, e) in ups.iter_mut().zip(top_encs.iter_mut()) {
                let epoch = u.out.epoch();
                let mut rec = Vec::new();
                e.for_epoch(epoch)
                    .encode(table, cs, &mut rec)
                    .expect("encode");
                assert!(
                    u.out
                        .push_tagged(epoch, s * 1000 + 500, payload(&rec), s as u64)
                );
            }
            top.end_tick();
            for u in &mut ups {
                u.deliver(s);
            }
            pending.note_tick(s as u64, fed);
            let safe = if any_gateway {
                ups.iter().map(|u| u.out.acked_tag()).max().unwrap_or(0)
            } else {
                let state: Vec<UpAck> = ups
                    .iter()
                    .map(|u| UpAck {
                        live: true,
                        acked_tag: u.out.acked_tag(),
                    })
                    .collect();
                quorum.update(&state)
            };
            if let Some(n) = pending.release(safe) {
                let epoch = leaf_out.epoch();
                leaf_out.ack(epoch, n).expect("a fair ack");
            }
        } else if s == kill + 2 {
            // The leaf notices and fails over to every gateway: its
            // unacknowledged tail replays on links of its own.
            leaf_out.link_lost();
            while leaf_out.has_backlog() {
                let recs: Vec<Vec<u8>> = leaf_out.backlog().map(<[u8]>::to_vec).collect();
                for u in &mut ups {
                    let c = u.new_child();
                    for r in &recs {
                        u.gw.on_record(c, r, &mut u.sink).expect("replay decodes");
                    }
                    u.gw.child_gone(c);
                }
                leaf_out.backlog_done();
            }
            direct = Some([ups[0].new_child(), ups[1].new_child()]);
        }
        if let Some(ids) = direct {
            let mut n = 0;
            while let Some((_, r)) = leaf_out.next_live() {
                let r = r.to_vec();
                leaf_out.sent();
                for (u, c) in ups.iter_mut().zip(ids) {
                    u.gw.on_record(c, &r, &mut u.sink).expect("gateway decodes");
                }
                n += 1;
            }
            if n > 0 {
                // Both gateways ack at once.
                direct_sent += n;
                let epoch = leaf_out.epoch();
                leaf_out.ack(epoch, direct_sent).expect("a fair ack");
            }
        }
    }
    ups.map(|u| u.sink)
}

/// Ticks 1..=20 each exactly once, or the first difference.
fn exact(t: &Ticks) -> Result<(), String> {
    for s in 1..=20i64 {
        match t.0.get(&s).map(Vec::as_slice) {
            Some([v]) if *v == s as f64 => {}
            other => return Err(format!("tick {s}: {other:?}")),
        }
    }
    Ok(())
}

#[test]
fn a_dead_top_costs_a_lagging_gateway_no_tick() {
    for lag in [0, 1, 2, 3] {
        for kill in [5, 8, 12] {
            let [a, b] = run(false, lag, kill);
            assert_eq!(exact(&a), Ok(()), "gateway A, lag {lag}, kill {kill}");
            assert_eq!(exact(&b), Ok(()), "gateway B, lag {lag}, kill {kill}");
        }
    }
}

/// The old rule (any one gateway's ack is enough) loses at the lagging
/// gateway the ticks it had not taken when the top died: the test above
/// guards the difference.
#[test]
fn acking_on_any_one_gateway_loses_ticks_at_the_other() {
    let [a, b] = run(true, 2, 8);
    assert_eq!(exact(&a), Ok(()), "the prompt gateway has them all");
    assert!(exact(&b).is_err(), "the lagging one misses some: {:?}", b.0);
}
