//! Records in flight: one [`Segment`] per connection of a link, and the
//! [`SimUplink`] that encodes a sender's changesets into them, following the
//! failover rule (a new connection, hence a fresh encoder and a keyframe,
//! whenever the destination changes).

use canopy_proto::codec::{Changeset, LinkEncoder, SeriesTable, record};
use canopy_topology::Link;

use super::FabricError;
use super::timing::{Ctx, Dest};

/// One record as its receiver gets it.
#[derive(Debug)]
pub struct Rec {
    /// Virtual arrival time at the receiver, ms.
    pub at_ms: i64,
    /// The record payload (length prefix stripped), as `Merger::on_record`
    /// takes it.
    pub payload: Vec<u8>,
}

/// Every record one connection delivered, in order. Its first record is a
/// keyframe (a fresh encoder).
#[derive(Debug)]
pub struct Segment {
    /// The sending node.
    pub from: usize,
    /// The sender's output it came from, and its connection number there:
    /// with `from`, a stable order for inputs that arrive at the same time.
    pub conn: (u8, u32),
    /// Where the records went.
    pub dest: Dest,
    /// Delivered records.
    pub recs: Vec<Rec>,
}

/// What kind of link a [`SimUplink`] is; bytes are accounted per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    /// A leaf into its own node's relay (in memory, not on the network).
    Local,
    /// A leaf-only membership: a leaf to its parent in another subtree.
    Leaf,
    /// A relay to its parent relay.
    Relay,
    /// A subtree top to the gateway.
    Top,
}

/// Bytes per second on network links of one kind, in the steady window.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LinkBytes {
    /// Links counted.
    pub links: u64,
    /// Sum over links of bytes/s.
    pub sum_bps: f64,
    /// Largest bytes/s of one link.
    pub max_bps: f64,
}

impl LinkBytes {
    /// Adds one link's rate.
    pub fn add(&mut self, bps: f64) {
        self.links += 1;
        self.sum_bps += bps;
        self.max_bps = self.max_bps.max(bps);
    }

    /// Merges another tally in.
    pub fn merge(&mut self, o: &LinkBytes) {
        self.links += o.links;
        self.sum_bps += o.sum_bps;
        self.max_bps = self.max_bps.max(o.max_bps);
    }

    /// Mean bytes/s per link (0 without links).
    pub fn mean_bps(&self) -> f64 {
        if self.links == 0 {
            0.0
        } else {
            self.sum_bps / self.links as f64
        }
    }
}

/// One sender's link: encodes every tick for its current destination.
#[derive(Debug)]
pub struct SimUplink<'a> {
    link: Option<&'a Link>,
    from: usize,
    /// Kind of the link (by its planned parent).
    pub kind: LinkKind,
    /// Which of the sender's outputs this is.
    output: u8,
    enc: Option<LinkEncoder>,
    cur: Option<Segment>,
    done: Vec<Segment>,
    buf: Vec<u8>,
    steady_bytes: u64,
    /// Records sent to a peer that was already dead (lost).
    pub lost: u64,
    /// Times the destination changed after the first connection.
    pub failovers: u64,
}

impl<'a> SimUplink<'a> {
    /// The in-memory link of node `from`'s leaf into its own relay.
    pub fn local(from: usize) -> Self {
        Self::new(None, from, LinkKind::Local, 0)
    }

    /// A planned network link of node `from`, its output number `output`.
    pub fn planned(link: &'a Link, from: usize, kind: LinkKind, output: u8) -> Self {
        Self::new(Some(link), from, kind, output)
    }

    fn new(link: Option<&'a Link>, from: usize, kind: LinkKind, output: u8) -> Self {
        Self {
            link,
            from,
            kind,
            output,
            enc: None,
            cur: None,
            done: Vec::new(),
            buf: Vec::new(),
            steady_bytes: 0,
            lost: 0,
            failovers: 0,
        }
    }

    /// Encodes this tick (sent at `t`) to wherever the link points now.
    pub fn send(
        &mut self,
        ctx: &Ctx,
        t: i64,
        table: &SeriesTable,
        cs: &Changeset,
    ) -> Result<(), FabricError> {
        let dest = match self.link {
            None => Dest::Node(self.from),
            Some(l) => ctx.route(l, t),
        };
        if self.cur.as_ref().is_none_or(|s| s.dest != dest) {
            if let Some(s) = self.cur.take() {
                self.done.push(s);
                self.failovers += 1;
            }
            let n = u32::try_from(self.done.len()).unwrap_or(u32::MAX);
            self.cur = Some(Segment {
                from: self.from,
                conn: (self.output, n),
                dest,
                recs: Vec::new(),
            });
            self.enc = Some(LinkEncoder::new(&ctx.cfg.codec).map_err(FabricError::Codec)?);
        }
        let (Some(enc), Some(seg)) = (self.enc.as_mut(), self.cur.as_mut()) else {
            return Ok(()); // invariant: both were just set
        };
        self.buf.clear();
        enc.encode(table, cs, &mut self.buf)
            .map_err(FabricError::Codec)?;
        let (lo, hi) = ctx.steady_window();
        if self.kind != LinkKind::Local && t >= lo && t < hi {
            self.steady_bytes += self.buf.len() as u64;
        }
        if !ctx.delivered(dest, t) {
            self.lost += 1;
            return Ok(());
        }
        let Ok(Some((len, pre))) = record::read_prefix(&self.buf, usize::MAX) else {
            return Err(FabricError::Framing);
        };
        let at_ms = if self.kind == LinkKind::Local {
            t
        } else {
            ctx.arrival(t)
        };
        seg.recs.push(Rec {
            at_ms,
            payload: self.buf[pre..pre + len].to_vec(),
        });
        Ok(())
    }

    /// Steady-window bytes per second of cluster time.
    pub fn steady_bps(&self, ctx: &Ctx) -> f64 {
        let (lo, hi) = ctx.steady_window();
        let secs = (hi - lo) as f64 / 1000.0;
        if secs > 0.0 {
            self.steady_bytes as f64 / secs
        } else {
            0.0
        }
    }

    /// Every connection's records, oldest connection first.
    pub fn finish(mut self) -> Vec<Segment> {
        if let Some(s) = self.cur.take() {
            self.done.push(s);
        }
        self.done
    }
}
