//! Reading chunks of `canopy-snapshot-v2` snapshots (the bit-packed chunks
//! of the release before the adaptive value codes), so an upgraded gateway
//! loads its predecessor's data dir. A v2 chunk is decoded with the v2 bit
//! format and its samples pushed into a new [`Chunk`]; nothing writes v2
//! any more.
//!
//! ```text
//! state:     count | first_ts | last_ts | last_delta | last_bits (8 LE)
//!            | mant | exp, lead, sig (3 bytes) | bit_len | bytes
//! stream:    first value (64 bits), then per sample a timestamp code
//!            (as today's) and a value code:
//!   0                     same bits as the previous value
//!   10   + delta + resid  decimal: mantissa delta at the current exponent
//!   110  + window         XOR with the previous value (Gorilla)
//!   111  + e (3 bits) + delta + resid   decimal at a new exponent
//! ```

use super::{
    Chunk, MAX_CHUNK_SAMPLES, MAX_EXP, NONE, approx, get_delta, get_resid, get_window, read_dod,
    value_of,
};
use crate::store::bits::{Reader, unzigzag};
use crate::store::codec::{CodecError, Cursor};

/// The v2 decoder's state after a sample.
struct State {
    ts: i64,
    delta: i64,
    bits: u64,
    mant: i64,
    exp: u8,
    lead: u8,
    sig: u8,
}

/// Reads one v2 chunk state and converts it into `out` (one chunk, more
/// when its span does not fit one: [`Chunk::fits`]). A stream shorter
/// than its count, timestamps going back, or a state that does not match
/// the samples is an error, never a panic.
pub(in crate::store) fn read_state(
    c: &mut Cursor<'_>,
    out: &mut Vec<Chunk>,
) -> Result<(), CodecError> {
    let bad = CodecError::Malformed;
    let count = c.len(MAX_CHUNK_SAMPLES)?;
    let first_ts = c.varint()?;
    let last_ts = c.varint()?;
    let _last_delta = c.varint()?;
    let last_bits = c.u64_le()?;
    let _mant = c.varint()?;
    let (exp, lead, sig) = (c.u8()?, c.u8()?, c.u8()?);
    if (exp != NONE && exp > MAX_EXP) || (lead != NONE && u32::from(lead) + u32::from(sig) > 64) {
        return Err(bad("v2 chunk: encoder state out of range"));
    }
    // At most 4 + 64 timestamp bits and 3 + 3 + 7 + 64 value bits a sample.
    let bit_len = c.len(MAX_CHUNK_SAMPLES * 145 + 64)? as u32;
    let bytes = c.bytes(bit_len.div_ceil(8) as usize)?;
    let mut chunk = Chunk::default();
    if count == 0 {
        out.push(chunk);
        return Ok(());
    }
    let mut r = Reader::new(bytes, bit_len);
    let first = r.read(64).ok_or(bad("v2 chunk: no first value"))?;
    let mut st = State {
        ts: first_ts,
        delta: 0,
        bits: first,
        mant: 0,
        exp: NONE,
        lead: NONE,
        sig: 0,
    };
    chunk.push(st.ts, f64::from_bits(st.bits));
    for _ in 1..count {
        let prev = st.ts;
        next(&mut r, &mut st).ok_or(bad("v2 chunk: stream shorter than its count"))?;
        if st.ts < prev {
            return Err(bad("v2 chunk: timestamps go back"));
        }
        chunk.push_splitting(out, st.ts, f64::from_bits(st.bits));
    }
    if st.ts != last_ts || st.bits != last_bits {
        return Err(bad("v2 chunk: state does not match its samples"));
    }
    out.push(chunk);
    Ok(())
}

/// Decodes the v2 sample after `st` into `st`; `None` on a damaged stream.
fn next(r: &mut Reader<'_>, st: &mut State) -> Option<()> {
    let dod = read_dod(r)?;
    st.delta = st.delta.wrapping_add(unzigzag(dod));
    st.ts = st.ts.wrapping_add(st.delta);
    match r.ones(3)? {
        0 => {}
        1 => {
            if st.exp == NONE {
                return None;
            }
            st.mant = st.mant.wrapping_add(unzigzag(get_delta(r)?));
            st.bits = value_of(st.mant, st.exp).to_bits() ^ get_resid(r)?;
        }
        2 => {
            get_window(r, &mut st.lead, &mut st.sig, &mut st.bits)?;
            st.exp = NONE;
        }
        _ => {
            let e = r.read(3)? as u8;
            let prev = approx(f64::from_bits(st.bits), e)?;
            st.mant = prev.wrapping_add(unzigzag(get_delta(r)?));
            st.exp = e;
            st.bits = value_of(st.mant, e).to_bits() ^ get_resid(r)?;
        }
    }
    Some(())
}
