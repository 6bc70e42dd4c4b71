//! [`UplinkEncoder`]: one uplink's encoder, restarted (a keyframe) with
//! each epoch of its outbox.

use super::{Recipe, Uplink};
use crate::codec::{Changeset, CodecConfig, LinkEncoder, SeriesTable, record};

/// Encodes each tick's changeset for one [`Uplink`], with a fresh encoder
/// (whose first frame is a keyframe) whenever the uplink's epoch moves on.
#[derive(Debug)]
pub struct UplinkEncoder {
    codec: CodecConfig,
    epoch: u64,
    enc: Option<LinkEncoder>,
}

impl UplinkEncoder {
    /// An encoder with the link codec settings `codec`.
    pub fn new(codec: &CodecConfig) -> Self {
        Self {
            codec: codec.clone(),
            epoch: 0,
            enc: None,
        }
    }

    /// Encodes `cs` (against `table`) and queues it on `up`. When the epoch
    /// ended meanwhile, starts over at once with a keyframe of `table`, so
    /// this tick's values still go out.
    pub fn emit(&mut self, up: &Uplink, table: &SeriesTable, cs: &Changeset) {
        self.emit_tagged(up, table, cs, 0);
    }

    /// [`UplinkEncoder::emit`] with a tag for [`Uplink::acked_tag`].
    pub fn emit_tagged(&mut self, up: &Uplink, table: &SeriesTable, cs: &Changeset, tag: u64) {
        for _ in 0..2 {
            let epoch = up.epoch();
            let first = epoch != self.epoch || self.enc.is_none();
            if first {
                self.enc = LinkEncoder::new(&self.codec).ok();
                self.epoch = epoch;
            }
            let Some(payload) = self.encode(table, cs) else {
                self.enc = None;
                return;
            };
            let recipe = Recipe::new(table, cs, first);
            if up.send_recipe(epoch, payload, tag, Some(recipe)) {
                return;
            }
            self.enc = None;
        }
    }

    fn encode(&mut self, table: &SeriesTable, cs: &Changeset) -> Option<Vec<u8>> {
        let enc = self.enc.as_mut()?;
        let mut rec = Vec::new();
        if let Err(e) = enc.encode(table, cs, &mut rec) {
            tracing::warn!(error = %e, "encoding failed; restarting the uplink stream");
            return None;
        }
        let (len, pre) = record::read_prefix(&rec, usize::MAX).ok().flatten()?;
        rec.drain(..pre);
        rec.truncate(len);
        Some(rec)
    }
}
