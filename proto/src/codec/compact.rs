//! The payload header, and the compact form of plain delta frames.
//!
//! A delta frame is a few hundred range-coded bits; wrapping it in protobuf
//! fields and a flushed zstd block (whose header alone is 3 bytes, and which
//! cannot shrink range-coded bytes) cost ~19 bytes a frame. So a payload says
//! first how it is carried:
//!
//! ```text
//! tag (LEB128):  low 2 bits: mode
//!   mode 0, zstd:    tag >> 2 = decompressed length; then the zstd stream
//!                    block of a protobuf `Frame` (keyframes, definitions,
//!                    columns: what zstd matches against the past)
//!   mode 1, compact: bit 2: one section at the frame's timestamp;
//!                    tag >> 3 = seq mod 16 (a check; the receiver knows
//!                    the sequence); then, not through zstd:
//!       zigzag(ts_delta - previous ts_delta)   LEB128
//!       number of sections                     LEB128 (absent for one)
//!       per section: source << 1 | repeat      LEB128 (repeat: format 3,
//!                                              see `Section.repeat`)
//!                    zigzag(ts_offset)         LEB128 (absent for one)
//!                    packed length (not for the last section: it runs
//!                    to the end of the payload), packed bytes
//! ```
//! Compact frames bypass the zstd stream on both ends, so the stream state
//! stays identical. Only frames made of packed sections and heartbeats
//! (nothing defined, nothing retired, no columns) are compact.

use crate::schema::frame as pb;

use super::CodecError;
use super::encoder::{get_uvarint, put_uvarint};

/// Payload carried as a zstd-compressed protobuf `Frame`.
pub(crate) const MODE_ZSTD: u64 = 0;
/// Payload carried in compact form.
pub(crate) const MODE_COMPACT: u64 = 1;
/// Sequence bits a compact payload carries as a check.
pub(crate) const SEQ_CHECK: u64 = 15;
/// Compact tag bit: a single section at offset 0.
const ONE: u64 = 4;

/// True when `f` can travel in compact form.
pub(crate) fn fits(f: &pb::Frame) -> bool {
    !f.keyframe
        && f.tick_ms == 0
        && f.sources.is_empty()
        && f.series.is_empty()
        && f.retired_sources.is_empty()
        && f.sections.iter().all(|s| {
            s.id_deltas.is_empty()
                && s.value_deltas.is_empty()
                && s.special_ids.is_empty()
                && s.special_bits.is_empty()
                && s.retired.is_empty()
        })
}

/// Appends the compact payload of `f` (which must [`fits`]) to `out`.
pub(crate) fn write(f: &pb::Frame, prev_delta: i64, out: &mut Vec<u8>) {
    let one = f.sections.len() == 1 && f.sections[0].ts_offset_ms == 0;
    let tag = ((f.seq & SEQ_CHECK) << 3) | if one { ONE } else { 0 } | MODE_COMPACT;
    put_uvarint(out, tag);
    put_uvarint(out, zigzag(f.ts_delta_ms.wrapping_sub(prev_delta)));
    if !one {
        put_uvarint(out, f.sections.len() as u64);
    }
    for (i, s) in f.sections.iter().enumerate() {
        put_uvarint(out, (u64::from(s.source) << 1) | u64::from(s.repeat));
        if !one {
            put_uvarint(out, zigzag(s.ts_offset_ms));
        }
        if i + 1 < f.sections.len() {
            put_uvarint(out, s.packed.len() as u64);
        }
        out.extend_from_slice(&s.packed);
    }
}

/// The sequence check a compact tag carries.
pub(crate) fn seq_check(tag: u64) -> u64 {
    tag >> 3
}

/// One section of a compact payload, borrowing its packed bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CompactSection<'a> {
    /// Source id on the link.
    pub(crate) source: u32,
    /// Offset from the frame's timestamp, ms.
    pub(crate) ts_offset_ms: i64,
    /// The range-coded section.
    pub(crate) packed: &'a [u8],
    /// The section repeats its source's previous changes (format 3).
    pub(crate) repeat: bool,
}

/// Parses a compact payload body (after `tag`) into its timestamp delta,
/// appending its sections to `sections` (cleared first). The sections
/// borrow `body`: nothing is copied, one vector per link is reused.
pub(crate) fn parse<'a>(
    tag: u64,
    body: &'a [u8],
    prev_delta: i64,
    sections: &mut Vec<CompactSection<'a>>,
) -> Result<i64, CodecError> {
    sections.clear();
    let one = tag & ONE != 0;
    let mut r = Reader { buf: body };
    let ts_delta_ms = prev_delta.wrapping_add(unzigzag(r.uvarint()?));
    let n = if one { 1 } else { r.uvarint()? };
    // Every section takes at least two bytes: a count beyond that is a lie.
    if n > r.buf.len() as u64 / 2 + 1 {
        return Err(malformed("section count exceeds the payload"));
    }
    sections.reserve(n as usize);
    for i in 0..n {
        let head = r.uvarint()?;
        let source = u32::try_from(head >> 1).map_err(|_| malformed("source id"))?;
        let ts_offset_ms = if one { 0 } else { unzigzag(r.uvarint()?) };
        let len = if i + 1 < n {
            usize::try_from(r.uvarint()?).map_err(|_| malformed("packed length"))?
        } else {
            r.buf.len()
        };
        if len > r.buf.len() {
            return Err(malformed("packed section runs past the payload"));
        }
        let (packed, rest) = r.buf.split_at(len);
        r.buf = rest;
        sections.push(CompactSection {
            source,
            ts_offset_ms,
            packed,
            repeat: head & 1 == 1,
        });
    }
    if !r.buf.is_empty() {
        return Err(malformed("trailing bytes after the last section"));
    }
    Ok(ts_delta_ms)
}

/// [`parse`] into a protobuf `Frame` with sequence number `seq` (tests).
#[cfg(test)]
pub(crate) fn read(
    tag: u64,
    body: &[u8],
    seq: u64,
    prev_delta: i64,
) -> Result<pb::Frame, CodecError> {
    let mut secs = Vec::new();
    let ts_delta_ms = parse(tag, body, prev_delta, &mut secs)?;
    Ok(pb::Frame {
        seq,
        ts_delta_ms,
        sections: secs
            .iter()
            .map(|s| pb::Section {
                source: s.source,
                ts_offset_ms: s.ts_offset_ms,
                packed: s.packed.to_vec(),
                repeat: s.repeat,
                ..pb::Section::default()
            })
            .collect(),
        ..pb::Frame::default()
    })
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn uvarint(&mut self) -> Result<u64, CodecError> {
        let (v, used) = get_uvarint(self.buf).ok_or_else(|| malformed("truncated header"))?;
        self.buf = &self.buf[used..];
        Ok(v)
    }
}

fn malformed(why: &str) -> CodecError {
    CodecError::Malformed(format!("compact frame: {why}"))
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(seq: u64, ts_delta_ms: i64, secs: &[(u32, i64, Vec<u8>)]) -> pb::Frame {
        pb::Frame {
            seq,
            ts_delta_ms,
            sections: secs
                .iter()
                .map(|(source, off, packed)| pb::Section {
                    source: *source,
                    ts_offset_ms: *off,
                    packed: packed.clone(),
                    // A repeat carries no packed bytes (the encoder's rule).
                    repeat: packed.is_empty() && source % 3 == 1,
                    ..pb::Section::default()
                })
                .collect(),
            ..pb::Frame::default()
        }
    }

    proptest! {
        #[test]
        fn compact_frames_round_trip(
            seq in any::<u64>(),
            delta in any::<i64>(),
            prev in any::<i64>(),
            secs in prop::collection::vec((any::<u32>(), any::<i64>(), prop::collection::vec(any::<u8>(), 0..40)), 0..5),
        ) {
            let f = frame(seq, delta, &secs);
            prop_assert!(fits(&f));
            let mut out = Vec::new();
            write(&f, prev, &mut out);
            let (tag, used) = get_uvarint(&out).expect("tag");
            prop_assert_eq!(tag & 3, MODE_COMPACT);
            prop_assert_eq!(seq_check(tag), seq & SEQ_CHECK);
            prop_assert!(used == 1, "the tag is one byte");
            let back = read(tag, &out[used..], seq, prev).expect("parses");
            prop_assert_eq!(back, f);
        }

        #[test]
        fn compact_garbage_is_an_error_or_bounded(body in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(f) = read(MODE_COMPACT, &body, 0, 1000) {
                let total: usize = f.sections.iter().map(|s| s.packed.len()).sum();
                prop_assert!(total <= body.len());
                prop_assert!(f.sections.len() <= body.len());
            }
        }
    }

    #[test]
    fn frames_with_definitions_or_columns_are_not_compact() {
        let mut f = frame(1, 1000, &[(0, 0, vec![1])]);
        assert!(fits(&f));
        f.sections[0].retired.push(3);
        assert!(!fits(&f));
        let mut f = frame(1, 1000, &[]);
        f.keyframe = true;
        assert!(!fits(&f));
    }

    #[test]
    fn truncated_and_lying_compact_bodies_are_rejected() {
        let f = frame(3, 1004, &[(0, 0, vec![9; 10]), (1, 0, vec![7; 10])]);
        let mut out = Vec::new();
        write(&f, 1000, &mut out);
        let tag = u64::from(out[0]);
        assert_eq!(tag & ONE, 0, "two sections");
        let body = &out[1..];
        for cut in 0..body.len() - 1 {
            // Cutting into the first section's bytes breaks its length; cutting
            // the last section's is caught by the range decoder downstream.
            if let Ok(g) = read(tag, &body[..cut], 3, 1000) {
                assert_ne!(g, f, "cut at {cut} decoded as the whole frame");
            }
        }
        // A section count far beyond the bytes.
        assert!(read(MODE_COMPACT, &[0, 0x7f], 0, 0).is_err());
        // Bytes after the last section cannot happen (it runs to the end),
        // but a first section longer than the payload can.
        assert!(read(MODE_COMPACT, &[0, 2, 0, 0, 50, 1], 0, 0).is_err());
        // The one-section form: just the source, then the packed bytes.
        let f = frame(5, 1000, &[(7, 0, vec![1, 2, 3])]);
        let mut out = Vec::new();
        write(&f, 1000, &mut out);
        assert_eq!(
            out,
            vec![(5 << 3 | ONE | MODE_COMPACT) as u8, 0, 7 << 1, 1, 2, 3]
        );
        assert_eq!(read(u64::from(out[0]), &out[1..], 5, 1000).expect("one"), f);
        // A repeat (format 3): the source's low bit, no packed bytes.
        let f = frame(5, 1000, &[(7, 0, vec![])]);
        assert!(f.sections[0].repeat);
        let mut out = Vec::new();
        write(&f, 1000, &mut out);
        assert_eq!(
            out,
            vec![(5 << 3 | ONE | MODE_COMPACT) as u8, 0, 7 << 1 | 1]
        );
        assert_eq!(
            read(u64::from(out[0]), &out[1..], 5, 1000).expect("repeat"),
            f
        );
    }
}
