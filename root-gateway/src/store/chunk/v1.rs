//! Reading chunks of `canopy-snapshot-v1` snapshots (the byte-aligned
//! chunks of the release before bit-packing), so an upgraded gateway loads
//! the data dir its predecessor wrote. A v1 chunk is decoded and its
//! samples pushed into a new [`Chunk`]; nothing writes v1 any more.
//!
//! ```text
//! state:         count | first_ts | last_ts | last_delta (varints)
//!                | last_bits (8 bytes LE) | n (uvarint) | n bytes
//! first sample:  ts (zigzag varint, absolute) | value (8 bytes LE)
//! next samples:  dod (zigzag varint: delta-of-delta of ts) | value
//! value:         0x00                     equal to the previous
//!                0x0f | zigzag varint     integer delta to the previous value
//!                trail << 4 | n, n bytes  XOR with the previous, shifted
//!                                         right by `trail` bytes (n 1..=8)
//! ```

use super::{Chunk, MAX_CHUNK_SAMPLES};
use crate::store::codec::{CodecError, Cursor};

/// Header byte of an integer-delta value.
const INT_DELTA: u8 = 0x0f;

/// Reads one v1 chunk state and converts it into `out` (one chunk, more
/// when its span does not fit one: [`Chunk::fits`]). Every inconsistency
/// (a stream shorter than its count, timestamps going back, a state that
/// does not match the samples) is an error, never a panic.
pub(in crate::store) fn read_state(
    c: &mut Cursor<'_>,
    out: &mut Vec<Chunk>,
) -> Result<(), CodecError> {
    let count = c.len(MAX_CHUNK_SAMPLES)?;
    let first_ts = c.varint()?;
    let last_ts = c.varint()?;
    let _last_delta = c.varint()?;
    let last_bits = c.u64_le()?;
    // At most a 10-byte varint and 9 value bytes per sample.
    let n = c.len(MAX_CHUNK_SAMPLES * 21 + 16)?;
    let mut s = Cursor::new(c.bytes(n)?);
    let mut chunk = Chunk::default();
    let (mut ts, mut delta, mut bits) = (0i64, 0i64, 0u64);
    let mut first = 0i64;
    for i in 0..count {
        if i == 0 {
            ts = s.varint()?;
            bits = s.u64_le()?;
            first = ts;
        } else {
            delta = delta.wrapping_add(s.varint()?);
            ts = ts.wrapping_add(delta);
            match s.u8()? {
                0 => {}
                INT_DELTA => {
                    let d = s.varint()?;
                    bits = ((f64::from_bits(bits) as i64).wrapping_add(d) as f64).to_bits();
                }
                hdr => {
                    let n = usize::from(hdr & 0x0f);
                    let trail = u32::from(hdr >> 4);
                    if n == 0 || n > 8 || trail as usize + n > 8 {
                        return Err(CodecError::Malformed("v1 chunk: bad value header"));
                    }
                    let mut b = [0u8; 8];
                    b[..n].copy_from_slice(s.bytes(n)?);
                    bits ^= u64::from_le_bytes(b) << (trail * 8);
                }
            }
            if ts < chunk.last_ts() {
                return Err(CodecError::Malformed("v1 chunk: timestamps go back"));
            }
        }
        chunk.push_splitting(out, ts, f64::from_bits(bits));
    }
    if count > 0 && (first != first_ts || ts != last_ts || bits != last_bits) {
        return Err(CodecError::Malformed(
            "v1 chunk: state does not match its samples",
        ));
    }
    out.push(chunk);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A v1 chunk state of two samples, built by hand from the layout.
    fn two_samples(hdr: u8, extra: &[u8]) -> Vec<u8> {
        let mut p = vec![2, 0, 2, 2]; // count 2, first 0, last 1, delta 1
        p.extend_from_slice(&3.0f64.to_bits().to_le_bytes()); // last_bits
        let mut body = vec![0]; // ts 0
        body.extend_from_slice(&1.0f64.to_bits().to_le_bytes());
        body.extend_from_slice(&[2, hdr]); // dod 1
        body.extend_from_slice(extra);
        p.push(body.len() as u8);
        p.extend_from_slice(&body);
        p
    }

    #[test]
    fn v1_int_delta_converts() {
        let p = two_samples(INT_DELTA, &[4]); // +2
        let mut cs = Vec::new();
        read_state(&mut Cursor::new(&p), &mut cs).unwrap();
        assert_eq!(cs.len(), 1);
        let mut out = Vec::new();
        cs[0].decode(&mut out);
        let got: Vec<_> = out.iter().map(|s| (s.ts_ms, s.value)).collect();
        assert_eq!(got, vec![(0, 1.0), (1, 3.0)]);
    }

    #[test]
    fn v1_damaged_chunks_are_errors() {
        // A value header promising more bytes than a u64 holds.
        assert!(
            read_state(
                &mut Cursor::new(&two_samples(0x38, &[0; 8])),
                &mut Vec::new()
            )
            .is_err()
        );
        // A stream cut inside the second sample.
        let mut p = two_samples(INT_DELTA, &[4]);
        p.pop();
        assert!(read_state(&mut Cursor::new(&p), &mut Vec::new()).is_err());
        // A state whose last value is not the samples' last value.
        let p = two_samples(INT_DELTA, &[2]); // +1 gives 2.0, state says 3.0
        assert!(read_state(&mut Cursor::new(&p), &mut Vec::new()).is_err());
    }
}
