//! Reading a zstd-mode `Frame`'s sections in place.
//!
//! prost decodes every `Section` of a frame into owned vectors: one
//! allocation for each section's packed bytes and one per column, then a
//! free of each. A subtree top's frame carries one section per node below
//! it, so whenever one of its nodes defines or retires a series (at 10,000
//! nodes, nearly every top frame) the gateway paid that per node, on both
//! paths. Here the frame's sections are cut out of the decompressed bytes
//! first ([`split_frame`]); prost decodes only the rest (definitions,
//! retired sources: small), and each section is read when it is applied
//! ([`read_section`]), its packed bytes borrowed and its columns in vectors
//! the link reuses. The field semantics are prost's (packed or unpacked
//! repeated scalars, the last `packed` field wins, unknown fields skipped,
//! integers truncated as prost truncates them); groups, which no Canopy
//! sender writes, are refused.

use prost::bytes::Buf;

use super::CodecError;

/// `Frame.sections`.
const FRAME_SECTIONS: u64 = 7;

/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// One section, its packed bytes borrowed from the frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SectionView<'a> {
    /// `Section.source`.
    pub(crate) source: u32,
    /// `Section.ts_offset_ms`.
    pub(crate) ts_offset_ms: i64,
    /// `Section.packed`.
    pub(crate) packed: &'a [u8],
    /// `Section.repeat` (codec format 3).
    pub(crate) repeat: bool,
}

/// A section's columns, in vectors reused from section to section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Columns {
    /// `Section.id_deltas`.
    pub(crate) id_deltas: Vec<i32>,
    /// `Section.value_deltas`.
    pub(crate) value_deltas: Vec<i64>,
    /// `Section.special_ids`.
    pub(crate) special_ids: Vec<u32>,
    /// `Section.special_bits`.
    pub(crate) special_bits: Vec<u64>,
    /// `Section.retired`.
    pub(crate) retired: Vec<u32>,
}

impl Columns {
    fn clear(&mut self) {
        self.id_deltas.clear();
        self.value_deltas.clear();
        self.special_ids.clear();
        self.special_bits.clear();
        self.retired.clear();
    }
}

fn malformed(why: &str) -> CodecError {
    CodecError::Malformed(format!("frame: {why}"))
}

/// A LEB128 varint as prost reads one: at most ten bytes, the tenth at
/// most 1 (keys, ids and lengths here are one to three bytes).
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Result<u64, CodecError> {
    // One byte (keys, flags, most ids and lengths): no loop.
    if let Some((&b, rest)) = buf.split_first()
        && b < 0x80
    {
        *buf = rest;
        return Ok(u64::from(b));
    }
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            break;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *buf = &buf[i + 1..];
            return Ok(v);
        }
    }
    Err(malformed("invalid varint"))
}

/// A field key: (field number, wire type).
#[inline(always)]
fn key(buf: &mut &[u8]) -> Result<(u64, u64), CodecError> {
    let k = varint(buf)?;
    if k > u64::from(u32::MAX) {
        return Err(malformed("field key out of range"));
    }
    let (field, wire) = (k >> 3, k & 7);
    if field == 0 {
        return Err(malformed("field number 0"));
    }
    Ok((field, wire))
}

/// A length-delimited field's bytes.
#[inline(always)]
fn len_bytes<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], CodecError> {
    let n = varint(buf)?;
    let n = usize::try_from(n).map_err(|_| malformed("length out of range"))?;
    if n > buf.len() {
        return Err(malformed("field runs past the end"));
    }
    let (v, rest) = buf.split_at(n);
    *buf = rest;
    Ok(v)
}

fn fixed64(buf: &mut &[u8]) -> Result<u64, CodecError> {
    if buf.len() < 8 {
        return Err(malformed("truncated fixed64"));
    }
    Ok(buf.get_u64_le())
}

/// Skips one value of wire type `wire`.
fn skip(buf: &mut &[u8], wire: u64) -> Result<(), CodecError> {
    match wire {
        VARINT => varint(buf).map(drop),
        FIXED64 => fixed64(buf).map(drop),
        LEN => len_bytes(buf).map(drop),
        FIXED32 => {
            if buf.len() < 4 {
                return Err(malformed("truncated fixed32"));
            }
            buf.advance(4);
            Ok(())
        }
        _ => Err(malformed("unsupported wire type")),
    }
}

/// Splits a `Frame`'s bytes: the bytes of each `sections` entry go to
/// `sections` as (start, end) offsets into `raw`, in order; every other
/// field is copied to `rest` as it was (for prost). Both are cleared first.
pub(crate) fn split_frame(
    raw: &[u8],
    sections: &mut Vec<(usize, usize)>,
    rest: &mut Vec<u8>,
) -> Result<(), CodecError> {
    sections.clear();
    rest.clear();
    let mut buf = raw;
    while !buf.is_empty() {
        let start = raw.len() - buf.len();
        let (field, wire) = key(&mut buf)?;
        if field == FRAME_SECTIONS && wire == LEN {
            let v = len_bytes(&mut buf)?;
            let at = raw.len() - buf.len() - v.len();
            sections.push((at, at + v.len()));
        } else {
            skip(&mut buf, wire)?;
            rest.extend_from_slice(&raw[start..raw.len() - buf.len()]);
        }
    }
    Ok(())
}

/// Reads one repeated scalar field (packed or not) into `out` with `one`
/// reading a single value.
fn repeated<T>(
    buf: &mut &[u8],
    wire: u64,
    scalar: u64,
    out: &mut Vec<T>,
    one: fn(&mut &[u8]) -> Result<T, CodecError>,
) -> Result<(), CodecError> {
    if wire == LEN {
        let mut v = len_bytes(buf)?;
        while !v.is_empty() {
            out.push(one(&mut v)?);
        }
        Ok(())
    } else if wire == scalar {
        out.push(one(buf)?);
        Ok(())
    } else {
        Err(malformed("wrong wire type for a repeated field"))
    }
}

#[inline(always)]
fn sint32(buf: &mut &[u8]) -> Result<i32, CodecError> {
    let v = varint(buf)? as u32;
    Ok(((v >> 1) as i32) ^ -((v & 1) as i32))
}

#[inline(always)]
fn sint64(buf: &mut &[u8]) -> Result<i64, CodecError> {
    let v = varint(buf)?;
    Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
}

#[inline(always)]
fn uint32(buf: &mut &[u8]) -> Result<u32, CodecError> {
    Ok(varint(buf)? as u32)
}

/// The `source` of a `Section`'s bytes when it is their first field (as a
/// Canopy sender writes it) and below 2^21; else `None`: a look ahead,
/// not a check.
pub(crate) fn peek_source(buf: &[u8]) -> Option<u32> {
    // Field 1, a varint: key byte 0x08; then an id of one to three bytes
    // (longer ones are not looked ahead for).
    let low = |x: &u8| u32::from(x & 0x7f);
    match buf {
        [0x08, a, ..] if *a < 0x80 => Some(u32::from(*a)),
        [0x08, a, b, ..] if *b < 0x80 => Some(low(a) | (u32::from(*b) << 7)),
        [0x08, a, b, c, ..] if *c < 0x80 => Some(low(a) | (low(b) << 7) | (u32::from(*c) << 14)),
        _ => None,
    }
}

/// Reads one `Section`'s bytes: the scalars and packed bytes into the
/// returned view, the columns into `cols` (cleared first).
pub(crate) fn read_section<'a>(
    mut buf: &'a [u8],
    cols: &mut Columns,
) -> Result<SectionView<'a>, CodecError> {
    cols.clear();
    let mut s = SectionView::default();
    let need = |wire: u64, want: u64| {
        if wire == want {
            Ok(())
        } else {
            Err(malformed("wrong wire type in a section"))
        }
    };
    while !buf.is_empty() {
        let (field, wire) = key(&mut buf)?;
        match field {
            1 => {
                need(wire, VARINT)?;
                s.source = uint32(&mut buf)?;
            }
            2 => {
                need(wire, VARINT)?;
                s.ts_offset_ms = sint64(&mut buf)?;
            }
            3 => repeated(&mut buf, wire, VARINT, &mut cols.id_deltas, sint32)?,
            4 => repeated(&mut buf, wire, VARINT, &mut cols.value_deltas, sint64)?,
            5 => repeated(&mut buf, wire, VARINT, &mut cols.special_ids, uint32)?,
            6 => repeated(&mut buf, wire, FIXED64, &mut cols.special_bits, fixed64)?,
            7 => {
                need(wire, LEN)?;
                s.packed = len_bytes(&mut buf)?;
            }
            8 => repeated(&mut buf, wire, VARINT, &mut cols.retired, uint32)?,
            9 => {
                need(wire, VARINT)?;
                // As prost reads a bool: any non-zero varint is true.
                s.repeat = varint(&mut buf)? != 0;
            }
            _ => skip(&mut buf, wire)?,
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::frame as pb;
    use proptest::prelude::*;
    use prost::Message;

    fn section() -> impl Strategy<Value = pb::Section> {
        (
            any::<u32>(),
            any::<i64>(),
            prop::collection::vec((any::<i32>(), any::<i64>()), 0..6),
            prop::collection::vec((any::<u32>(), any::<u64>()), 0..3),
            prop::collection::vec(any::<u8>(), 0..12),
            prop::collection::vec(any::<u32>(), 0..3),
            any::<bool>(),
        )
            .prop_map(|(source, off, cols, specials, packed, retired, repeat)| {
                pb::Section {
                    source,
                    ts_offset_ms: off,
                    id_deltas: cols.iter().map(|c| c.0).collect(),
                    value_deltas: cols.iter().map(|c| c.1).collect(),
                    special_ids: specials.iter().map(|c| c.0).collect(),
                    special_bits: specials.iter().map(|c| c.1).collect(),
                    packed,
                    retired,
                    repeat,
                }
            })
    }

    fn frame() -> impl Strategy<Value = pb::Frame> {
        (
            any::<u64>(),
            any::<i64>(),
            any::<bool>(),
            prop::collection::vec(section(), 0..5),
            prop::collection::vec(any::<u32>(), 0..3),
            prop::collection::vec((any::<u32>(), "[a-z]{0,6}"), 0..3),
        )
            .prop_map(
                |(seq, delta, keyframe, sections, retired, srcs)| pb::Frame {
                    seq,
                    ts_delta_ms: delta,
                    keyframe,
                    sections,
                    retired_sources: retired,
                    sources: srcs
                        .into_iter()
                        .map(|(id, name)| pb::SourceDef {
                            id,
                            name,
                            tick_ms: 1000,
                        })
                        .collect(),
                    format: super::super::FORMAT,
                    ..pb::Frame::default()
                },
            )
    }

    /// The view of `bytes` as the owned section prost would give.
    fn owned(bytes: &[u8]) -> Result<pb::Section, CodecError> {
        let mut cols = Columns::default();
        let v = read_section(bytes, &mut cols)?;
        Ok(pb::Section {
            source: v.source,
            ts_offset_ms: v.ts_offset_ms,
            id_deltas: cols.id_deltas,
            value_deltas: cols.value_deltas,
            special_ids: cols.special_ids,
            special_bits: cols.special_bits,
            packed: v.packed.to_vec(),
            retired: cols.retired,
            repeat: v.repeat,
        })
    }

    /// Split and read as the decoder does: the frame prost would give.
    fn reassemble(raw: &[u8]) -> Result<pb::Frame, CodecError> {
        let (mut secs, mut rest) = (Vec::new(), Vec::new());
        split_frame(raw, &mut secs, &mut rest)?;
        let mut f =
            pb::Frame::decode(rest.as_slice()).map_err(|e| CodecError::Malformed(e.to_string()))?;
        for (a, b) in secs {
            f.sections.push(owned(&raw[a..b])?);
        }
        Ok(f)
    }

    proptest! {
        #[test]
        fn split_and_read_give_what_prost_gives(f in frame()) {
            let raw = f.encode_to_vec();
            prop_assert_eq!(reassemble(&raw).expect("valid frame"), f);
        }

        /// The look ahead finds a section's source where a sender puts it
        /// (first, absent when 0) and never errs or panics on garbage.
        #[test]
        fn peek_finds_the_source_prost_writes(mut s in section(), small in any::<bool>(), junk in prop::collection::vec(any::<u8>(), 0..24)) {
            if small {
                // Ids as a link hands them out: small, of 1 to 3 bytes.
                s.source %= 1 << 22;
            }
            let raw = s.encode_to_vec();
            let want = (s.source != 0 && s.source < 1 << 21).then_some(s.source);
            prop_assert_eq!(peek_source(&raw), want);
            let _ = peek_source(&junk);
        }

        #[test]
        fn garbage_is_an_error_or_what_prost_reads(raw in prop::collection::vec(any::<u8>(), 0..80)) {
            // Never a panic; where both accept, both read the same.
            let ours = reassemble(&raw);
            if let (Ok(a), Ok(b)) = (ours, pb::Frame::decode(raw.as_slice())) {
                prop_assert_eq!(a, b);
            }
        }

        #[test]
        fn truncated_frames_are_refused_or_shorter(f in frame(), cut in 0usize..200) {
            let raw = f.encode_to_vec();
            let cut = cut.min(raw.len());
            // Cutting mid-field is an error; at a field boundary, a frame
            // with fewer fields, as prost reads it.
            let ours = reassemble(&raw[..cut]);
            let theirs = pb::Frame::decode(&raw[..cut]);
            prop_assert_eq!(ours.is_ok(), theirs.is_ok());
            if let (Ok(a), Ok(b)) = (ours, theirs) {
                prop_assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn unpacked_repeated_fields_and_repeated_packed_bytes_read_as_prost_reads_them() {
        // Section { id_deltas: 5 (unpacked), -3 (unpacked), packed: [1], packed: [2, 3],
        //           special_bits: 7 (unpacked fixed64), unknown field 12 (varint) }
        let mut b = vec![3 << 3, 10, 3 << 3, 5, 7 << 3 | 2, 1, 1, 7 << 3 | 2, 2, 2, 3];
        b.push(6 << 3 | 1);
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&[12 << 3, 0x96, 0x01]);
        let prost_view = pb::Section::decode(b.as_slice()).expect("prost reads it");
        assert_eq!(prost_view.id_deltas, vec![5, -3]);
        assert_eq!(owned(&b).expect("reads"), prost_view);
        // A group (wire type 3) is refused, a wrong wire type too.
        assert!(owned(&[9 << 3 | 3, 9 << 3 | 4]).is_err());
        assert!(owned(&[1 << 3 | 2, 0]).is_err());
    }
}
