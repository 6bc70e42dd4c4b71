//! Reading chunks of `canopy-snapshot-v3` and `-v4` snapshots (the chunk
//! format before the folded Rice codes: every sample after the first
//! starts with a flag bit, `0` for a regular tick in the previous value's
//! form), so an upgraded gateway loads its predecessor's data dir. A v4
//! chunk, open or sealed, is decoded with the v4 bit format and its
//! samples pushed into new [`Chunk`]s; nothing writes v4 any more.

use super::{Chunk, MAX_CHUNK_SAMPLES, MAX_EXP, NONE, State, XOR};
use crate::store::bits::Reader;
use crate::store::codec::{CodecError, Cursor};

/// Most bits a v4 chunk's stream can take.
const MAX_V4_BITS: usize = MAX_CHUNK_SAMPLES * 181 + 64;

/// Reads one v3/v4 chunk with its encoder state (the open chunk of a v4
/// snapshot, every chunk of a v3 one) and converts it into `out` (one
/// chunk, more when its span does not fit one: [`Chunk::fits`]). A stream
/// shorter than its count, timestamps going back, or a state that does
/// not match the samples is an error, never a panic.
pub(in crate::store) fn read_state(
    c: &mut Cursor<'_>,
    out: &mut Vec<Chunk>,
) -> Result<(), CodecError> {
    let bad = CodecError::Malformed;
    let count = c.len(MAX_CHUNK_SAMPLES)?;
    let first_ts = c.varint()?;
    let last_ts = c.varint()?;
    let _delta = c.varint()?;
    let last_bits = c.u64_le()?;
    let _mant = c.varint()?;
    let _pred = c.varint()?;
    let _mag = c.u32_le()?;
    let (exp, lead, sig, last) = (c.u8()?, c.u8()?, c.u8()?, c.u8()?);
    if (exp != NONE && exp > MAX_EXP)
        || (lead != NONE && u32::from(lead) + u32::from(sig) > 64)
        || last > XOR
    {
        return Err(bad("chunk encoder state out of range"));
    }
    let bit_len = c.len(MAX_V4_BITS)? as u32;
    let bytes = c.bytes(bit_len.div_ceil(8) as usize)?;
    if count == 0 {
        out.push(Chunk::default());
        return Ok(());
    }
    let st = convert(bytes, bit_len, count, first_ts, out)?;
    if st.ts != last_ts || st.bits != last_bits {
        return Err(bad("v4 chunk: state does not match its samples"));
    }
    Ok(())
}

/// Converts a v4 snapshot's sealed run (`first_ts | count | bit_len |
/// bytes`, already read) into `out`.
pub(in crate::store) fn read_sealed(
    bytes: &[u8],
    bit_len: u32,
    count: usize,
    first_ts: i64,
    out: &mut Vec<Chunk>,
) -> Result<(), CodecError> {
    if !(1..=MAX_CHUNK_SAMPLES).contains(&count)
        || !(64..=MAX_V4_BITS).contains(&(bit_len as usize))
        || bytes.len() != bit_len.div_ceil(8) as usize
    {
        return Err(CodecError::Malformed("sealed chunk out of range"));
    }
    convert(bytes, bit_len, count, first_ts, out).map(|_| ())
}

/// Decodes `count` (at least 1) v4 samples and pushes them into new
/// chunks in `out`; the state after the last one.
fn convert(
    bytes: &[u8],
    bit_len: u32,
    count: usize,
    first_ts: i64,
    out: &mut Vec<Chunk>,
) -> Result<State, CodecError> {
    let bad = CodecError::Malformed;
    let mut r = Reader::new(bytes, bit_len);
    let first = r.read(64).ok_or(bad("v4 chunk: no first value"))?;
    let mut st = State::first(first_ts, first);
    let mut chunk = Chunk::default();
    chunk.push(st.ts, f64::from_bits(st.bits));
    for _ in 1..count {
        let prev = st.ts;
        next(&mut r, &mut st).ok_or(bad("v4 chunk: stream shorter than its count"))?;
        if st.ts < prev {
            return Err(bad("v4 chunk: timestamps go back"));
        }
        chunk.push_splitting(out, st.ts, f64::from_bits(st.bits));
    }
    out.push(chunk);
    Ok(st)
}

/// Decodes the v4 sample after `st` into `st`; `None` on a damaged stream.
fn next(r: &mut Reader<'_>, st: &mut State) -> Option<()> {
    let form = if r.bit()? {
        super::view::full_header(r, st)?.0
    } else {
        st.ts = st.ts.wrapping_add(st.delta);
        st.last
    };
    super::view::apply_form(r, st, form, None)
}
