//! Sans-I/O encoding of op batches as WAL record payloads.
//!
//! Each segment starts with empty dictionaries; a series' labels and a
//! source's name are written once per segment and referred to by index
//! afterwards, so a segment replays on its own (old segments can be
//! deleted freely) and a steady sample costs about 12 bytes.
//!
//! ```text
//! payload: op*
//! 0x01 def-series  labels                 (index = next series index)
//! 0x02 def-source  name                   (index = next source index)
//! 0x03 append      series | source+1 (0: explicit) | dts | value (u64 LE bits)
//! 0x04 heartbeat   source | dts | tick_ms
//! 0x05 retire      series | dts
//! 0x06 maintain    dts
//! 0x07 samples     series | n | (dts | value (u64 LE bits))*   (explicit samples of one series;
//!                  after the first sample dts is a delta of deltas: 1 byte on a steady tick)
//! 0x08 body        len | remote_write v1 body as received (snappy protobuf; replays as the
//!                  `samples` ops the receiver made of it, in order, each series found in the
//!                  store's index by its label bytes as live; every body the receiver accepts
//!                  up to MAX_LOGGED_BODY, whatever its sample count; segments without it read
//!                  as before)
//! dts: zigzag varint, ms since the previous op's time in this record (0 first)
//! ```

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use rustc_hash::FxHasher;

use crate::remote_write::receiver::body_ops;
use crate::remote_write::wire::WireLimits;
use crate::store::codec::{CodecError, Cursor, put_labels, put_str, put_uvarint, put_varint};
use crate::store::{Labels, Op, Sample, SeriesHint};

const DEF_SERIES: u8 = 0x01;
const DEF_SOURCE: u8 = 0x02;
const APPEND: u8 = 0x03;
const HEARTBEAT: u8 = 0x04;
const RETIRE: u8 = 0x05;
const MAINTAIN: u8 = 0x06;
const SAMPLES: u8 = 0x07;
const BODY: u8 = 0x08;
/// Largest remote_write body logged as it came (larger ones, beyond any
/// default limit, are logged as ops; so are bodies that decompress past
/// [`MAX_LOGGED_DECODED`]).
pub const MAX_LOGGED_BODY: usize = 128 << 20;
/// Largest decompressed size of a body logged as it came.
pub const MAX_LOGGED_DECODED: usize = 1 << 30;
/// Limits a logged body is decoded under at replay: it was accepted live
/// (under the configured limits), so these only bound memory.
pub const REPLAY_LIMITS: WireLimits = WireLimits {
    max_body_bytes: MAX_LOGGED_BODY,
    max_decoded_bytes: MAX_LOGGED_DECODED,
};
/// Most samples one `samples` op may declare (bounds replay allocation).
const MAX_BATCH: usize = 1 << 20;
/// Store slots the hinted dictionary follows (12 bytes each; the store's
/// series limit is far below).
const MAX_SLOTS: usize = 1 << 24;

/// A series defined in this segment, by the store slot its hint names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    /// The hint's store instance (0: none).
    store: u32,
    generation: u32,
    /// The series' index in this segment.
    index: u32,
}

/// Encodes op batches for one segment (keeps the segment's dictionaries).
#[derive(Debug, Default)]
pub struct Encoder {
    /// Series defined in this segment by label set (ops without a store
    /// hint). Fx, not SipHash: keys are validated label sets.
    series: HashMap<Labels, u64, BuildHasherDefault<FxHasher>>,
    /// Series defined in this segment by the store slot of their hint
    /// (see [`SeriesHint::slot`]): a hinted op finds its reference with one
    /// index into this, not a hash of its labels (which cost a cache miss
    /// or two per series: the log's largest cost).
    slots: Vec<Slot>,
    /// Series defined in this segment (both ways; the next index).
    defined: u64,
    sources: HashMap<String, u64, BuildHasherDefault<FxHasher>>,
}

impl Encoder {
    /// Forgets the dictionaries: call when a new segment starts.
    pub fn reset(&mut self) {
        self.series.clear();
        self.slots.clear();
        self.defined = 0;
        self.sources.clear();
    }

    /// Series and sources defined in the current segment.
    pub fn dictionary_len(&self) -> usize {
        usize::try_from(self.defined).unwrap_or(usize::MAX) + self.sources.len()
    }

    fn define(&mut self, l: &Labels, out: &mut Vec<u8>) -> u64 {
        let i = self.defined;
        self.defined += 1;
        out.push(DEF_SERIES);
        put_labels(out, l);
        i
    }

    fn series_id(&mut self, l: &Labels, out: &mut Vec<u8>) -> u64 {
        if let Some(&i) = self.series.get(l) {
            return i;
        }
        let i = self.define(l, out);
        self.series.insert(l.clone(), i);
        i
    }

    /// The reference of `l`, through `hint` when it has one (the store
    /// filled it for `l`, so its slot triple names `l` and nothing else).
    /// A hinted series not defined yet is defined and kept by slot only:
    /// the label-set map holds just the series first seen without a hint.
    fn hinted_series_id(
        &mut self,
        l: &Labels,
        hint: Option<&SeriesHint>,
        out: &mut Vec<u8>,
    ) -> u64 {
        let Some((store, id, generation)) = hint.and_then(SeriesHint::slot) else {
            return self.series_id(l, out);
        };
        let id = id as usize;
        if let Some(s) = self.slots.get(id)
            && s.store == store
            && s.generation == generation
        {
            return u64::from(s.index);
        }
        let i = match self.series.get(l) {
            Some(&i) => i,
            None => self.define(l, out),
        };
        if id < MAX_SLOTS
            && let Ok(index) = u32::try_from(i)
        {
            if self.slots.len() <= id {
                self.slots.resize(id + 1, Slot::default());
            }
            if let Some(s) = self.slots.get_mut(id) {
                *s = Slot {
                    store,
                    generation,
                    index,
                };
            }
        }
        i
    }

    fn source_id(&mut self, s: &str, out: &mut Vec<u8>) -> u64 {
        if let Some(&i) = self.sources.get(s) {
            return i;
        }
        let i = self.sources.len() as u64;
        out.push(DEF_SOURCE);
        put_str(out, s);
        self.sources.insert(s.to_string(), i);
        i
    }

    /// Appends the payload of one record holding a remote_write v1 `body`
    /// to `out` (replayed as the ops the receiver makes of it).
    pub fn encode_body(&mut self, body: &[u8], out: &mut Vec<u8>) {
        out.push(BODY);
        put_uvarint(out, body.len() as u64);
        out.extend_from_slice(body);
    }

    /// Appends the payload of one record holding `ops` to `out`.
    pub fn encode(&mut self, ops: &[Op], out: &mut Vec<u8>) {
        self.encode_hinted(ops, &[], out);
    }

    /// [`Encoder::encode`] with the store's [`SeriesHint`] of each op
    /// (`hints[i]` for `ops[i]`; missing or default ones are not used).
    /// Only ever pass a hint with the label set the store filled it for.
    /// The payload decodes the same either way.
    pub fn encode_hinted(&mut self, ops: &[Op], hints: &[SeriesHint], out: &mut Vec<u8>) {
        let mut prev = 0i64;
        let mut dts = |t: i64| {
            let d = t.wrapping_sub(prev);
            prev = t;
            d
        };
        for (k, op) in ops.iter().enumerate() {
            match op {
                Op::Append {
                    source,
                    labels,
                    ts_ms,
                    value,
                } => {
                    let s = self.series_id(labels, out);
                    let src = source.as_deref().map_or(0, |n| self.source_id(n, out) + 1);
                    out.push(APPEND);
                    put_uvarint(out, s);
                    put_uvarint(out, src);
                    put_varint(out, dts(*ts_ms));
                    out.extend_from_slice(&value.to_bits().to_le_bytes());
                }
                Op::Samples { labels, samples } => {
                    let s = self.hinted_series_id(labels, hints.get(k), out);
                    out.push(SAMPLES);
                    put_uvarint(out, s);
                    put_uvarint(out, samples.len() as u64);
                    out.reserve(samples.len() * 10);
                    let mut last_delta = 0i64;
                    for smp in samples {
                        let d = dts(smp.ts_ms);
                        put_varint(out, d.wrapping_sub(last_delta));
                        last_delta = d;
                        out.extend_from_slice(&smp.value.to_bits().to_le_bytes());
                    }
                }
                Op::Heartbeat {
                    source,
                    ts_ms,
                    tick_ms,
                } => {
                    let src = self.source_id(source, out);
                    out.push(HEARTBEAT);
                    put_uvarint(out, src);
                    put_varint(out, dts(*ts_ms));
                    put_uvarint(out, u64::from(*tick_ms));
                }
                Op::Retire { labels, ts_ms } => {
                    let s = self.series_id(labels, out);
                    out.push(RETIRE);
                    put_uvarint(out, s);
                    put_varint(out, dts(*ts_ms));
                }
                Op::Maintain { now_ms } => {
                    out.push(MAINTAIN);
                    put_varint(out, dts(*now_ms));
                }
            }
        }
    }
}

/// One item of a record, as [`Decoder::decode_items`] hands it over.
#[derive(Debug)]
pub enum Item<'a> {
    /// An op.
    Op(Op),
    /// A remote_write v1 body recorded as it came (`0x08`), to replay
    /// through the receiver's decoding (see
    /// [`crate::remote_write::receiver::replay_body`]).
    Body(&'a [u8]),
}

/// Decodes the records of one segment (keeps the segment's dictionaries).
#[derive(Debug, Default)]
pub struct Decoder {
    series: Vec<Labels>,
    sources: Vec<String>,
    /// Ops of the body being decoded by [`Decoder::decode`] (reused).
    body_ops: Vec<Op>,
}

impl Decoder {
    /// Decodes one record payload, calling `f` for each op in order; a
    /// body recorded as it came is decoded into the ops it stands for
    /// (every label set parsed: for tools and tests; a replay into a store
    /// takes [`Decoder::decode_items`]). Returns the ops decoded.
    pub fn decode(&mut self, payload: &[u8], mut f: impl FnMut(Op)) -> Result<usize, CodecError> {
        let mut body_ops_buf = std::mem::take(&mut self.body_ops);
        let res = self.decode_items(payload, |item| match item {
            Item::Op(op) => {
                f(op);
                Ok(1)
            }
            Item::Body(body) => {
                body_ops_buf.clear();
                body_ops(body, &REPLAY_LIMITS, &mut body_ops_buf)
                    .map_err(|_| CodecError::Malformed("unreadable remote_write body"))?;
                let n = body_ops_buf.len();
                for op in body_ops_buf.drain(..) {
                    f(op);
                }
                Ok(n)
            }
        });
        body_ops_buf.clear();
        self.body_ops = body_ops_buf;
        res
    }

    /// Decodes one record payload, handing each item to `f` in order;
    /// `f` returns how many ops the item stood for (an error from it ends
    /// the record). Returns the ops decoded.
    pub fn decode_items(
        &mut self,
        payload: &[u8],
        mut f: impl FnMut(Item<'_>) -> Result<usize, CodecError>,
    ) -> Result<usize, CodecError> {
        let mut c = Cursor::new(payload);
        let mut prev = 0i64;
        let mut n_ops = 0;
        while !c.is_empty() {
            let kind = c.u8()?;
            match kind {
                DEF_SERIES => self.series.push(c.labels()?),
                DEF_SOURCE => self.sources.push(c.str()?.to_string()),
                APPEND => {
                    let labels = self.series_ref(c.uvarint()?)?;
                    let source = match c.uvarint()? {
                        0 => None,
                        i => Some(self.source_ref(i - 1)?),
                    };
                    prev = prev.wrapping_add(c.varint()?);
                    let value = f64::from_bits(c.u64_le()?);
                    n_ops += f(Item::Op(Op::Append {
                        source,
                        labels,
                        ts_ms: prev,
                        value,
                    }))?;
                }
                HEARTBEAT => {
                    let source = self.source_ref(c.uvarint()?)?;
                    prev = prev.wrapping_add(c.varint()?);
                    let tick_ms = u32::try_from(c.uvarint()?)
                        .map_err(|_| CodecError::Malformed("tick out of range"))?;
                    n_ops += f(Item::Op(Op::Heartbeat {
                        source,
                        ts_ms: prev,
                        tick_ms,
                    }))?;
                }
                RETIRE => {
                    let labels = self.series_ref(c.uvarint()?)?;
                    prev = prev.wrapping_add(c.varint()?);
                    n_ops += f(Item::Op(Op::Retire {
                        labels,
                        ts_ms: prev,
                    }))?;
                }
                SAMPLES => {
                    let labels = self.series_ref(c.uvarint()?)?;
                    let n = c.len(MAX_BATCH)?;
                    // Each sample takes at least 9 bytes: no allocation beyond the payload.
                    let mut samples = Vec::with_capacity(n.min(payload.len() / 9));
                    let mut delta = 0i64;
                    for _ in 0..n {
                        delta = delta.wrapping_add(c.varint()?);
                        prev = prev.wrapping_add(delta);
                        let value = f64::from_bits(c.u64_le()?);
                        samples.push(Sample { ts_ms: prev, value });
                    }
                    n_ops += f(Item::Op(Op::Samples { labels, samples }))?;
                }
                BODY => {
                    let n = c.len(REPLAY_LIMITS.max_body_bytes)?;
                    n_ops += f(Item::Body(c.bytes(n)?))?;
                }
                MAINTAIN => {
                    prev = prev.wrapping_add(c.varint()?);
                    n_ops += f(Item::Op(Op::Maintain { now_ms: prev }))?;
                }
                _ => return Err(CodecError::Malformed("unknown op kind")),
            }
        }
        Ok(n_ops)
    }

    fn series_ref(&self, i: u64) -> Result<Labels, CodecError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.series.get(i))
            .cloned()
            .ok_or(CodecError::Malformed("reference to an undefined series"))
    }

    fn source_ref(&self, i: u64) -> Result<String, CodecError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.sources.get(i))
            .cloned()
            .ok_or(CodecError::Malformed("reference to an undefined source"))
    }
}
