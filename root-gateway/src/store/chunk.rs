//! Compact change-point chunks.
//!
//! Layout of one chunk (bytes, appended in place):
//!
//! ```text
//! first sample:  ts (zigzag varint, absolute) | value (8 bytes LE)
//! next samples:  dod (zigzag varint: delta-of-delta of ts) | xor-value
//! xor-value:     0x00                          value equal to previous
//!                hdr | n bytes                 hdr = trailing_zero_bytes << 4 | n (1..=8)
//!                0x0f | zigzag varint          integral value: the integer delta to the
//!                                              previous (integral) value
//! ```
//!
//! Timestamps of a regular tick cost one byte, an unchanged value one byte;
//! integral counters (bytes, packets, jiffies) cost the varint of their
//! increase, whichever of the two value forms is shorter.
//! Chunks are sealed after [`CHUNK_SAMPLES`] samples so retention can drop
//! whole chunks.

use canopy_proto::model::Sample;

/// Samples per chunk before a new one is started.
pub const CHUNK_SAMPLES: usize = 240;
/// Header byte of an integer-delta value.
const INT_DELTA: u8 = 0x0f;
/// Largest magnitude at which every integer is an exact f64.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// Bytes of the zigzag varint of `v`.
fn varint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (z | 1).leading_zeros() as usize).div_ceil(7)
}

/// The integer delta from `prev` to `v` when both are exact integers and
/// the delta restores `v` bit for bit (so not for -0.0).
fn int_delta(prev: f64, v: f64) -> Option<i64> {
    let exact = |x: f64| x.fract() == 0.0 && x.abs() < EXACT_INT;
    if !(exact(prev) && exact(v)) {
        return None;
    }
    let d = (v as i64).wrapping_sub(prev as i64);
    (((prev as i64).wrapping_add(d) as f64).to_bits() == v.to_bits()).then_some(d)
}

/// A sealed or open chunk of change points.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    bytes: Vec<u8>,
    count: usize,
    first_ts: i64,
    last_ts: i64,
    last_delta: i64,
    last_bits: u64,
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn get_varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift >= 64 {
            return None;
        }
        z |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    Some(((z >> 1) as i64) ^ -((z & 1) as i64))
}

impl Chunk {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Timestamp of the first sample.
    pub fn first_ts(&self) -> i64 {
        self.first_ts
    }

    /// Timestamp of the newest sample.
    pub fn last_ts(&self) -> i64 {
        self.last_ts
    }

    /// Value of the newest sample.
    pub fn last_value(&self) -> f64 {
        f64::from_bits(self.last_bits)
    }

    /// True when the chunk should be sealed.
    pub fn is_full(&self) -> bool {
        self.count >= CHUNK_SAMPLES
    }

    /// Encoded size in bytes.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// Appends a sample; the caller guarantees `ts >= last_ts`.
    pub fn push(&mut self, ts: i64, v: f64) {
        let bits = v.to_bits();
        if self.count == 0 {
            put_varint(&mut self.bytes, ts);
            self.bytes.extend_from_slice(&bits.to_le_bytes());
            self.first_ts = ts;
            self.last_delta = 0;
        } else {
            let delta = ts.wrapping_sub(self.last_ts);
            put_varint(&mut self.bytes, delta.wrapping_sub(self.last_delta));
            self.last_delta = delta;
            let x = bits ^ self.last_bits;
            if x == 0 {
                self.bytes.push(0);
            } else {
                let lead = x.leading_zeros() / 8;
                let trail = x.trailing_zeros() / 8;
                let n = 8 - lead - trail;
                match int_delta(f64::from_bits(self.last_bits), v) {
                    Some(d) if varint_len(d) < n as usize => {
                        self.bytes.push(INT_DELTA);
                        put_varint(&mut self.bytes, d);
                    }
                    _ => {
                        self.bytes.push(((trail as u8) << 4) | n as u8);
                        let shifted = (x >> (trail * 8)).to_le_bytes();
                        self.bytes.extend_from_slice(&shifted[..n as usize]);
                    }
                }
            }
        }
        self.last_ts = ts;
        self.last_bits = bits;
        self.count += 1;
        if self.is_full() {
            // Sealed: give back the growth slack.
            self.bytes.shrink_to_fit();
        }
    }

    /// Appends the chunk's full state (for snapshots).
    pub fn write_state(&self, out: &mut Vec<u8>) {
        use super::codec::{put_uvarint, put_varint};
        put_uvarint(out, self.count as u64);
        put_varint(out, self.first_ts);
        put_varint(out, self.last_ts);
        put_varint(out, self.last_delta);
        out.extend_from_slice(&self.last_bits.to_le_bytes());
        put_uvarint(out, self.bytes.len() as u64);
        out.extend_from_slice(&self.bytes);
    }

    /// Reads a chunk written by [`Chunk::write_state`].
    pub fn read_state(c: &mut super::codec::Cursor<'_>) -> Result<Chunk, super::codec::CodecError> {
        let count = c.len(CHUNK_SAMPLES)?;
        let first_ts = c.varint()?;
        let last_ts = c.varint()?;
        let last_delta = c.varint()?;
        let last_bits = c.u64_le()?;
        // At most a 10-byte varint and 11 value bytes per sample.
        let n = c.len(CHUNK_SAMPLES * 21 + 16)?;
        let bytes = c.bytes(n)?.to_vec();
        Ok(Chunk {
            bytes,
            count,
            first_ts,
            last_ts,
            last_delta,
            last_bits,
        })
    }

    /// Decodes every sample, oldest first.
    pub fn decode(&self, out: &mut Vec<Sample>) {
        let buf = &self.bytes;
        let mut pos = 0usize;
        let mut ts = 0i64;
        let mut delta = 0i64;
        let mut bits = 0u64;
        for i in 0..self.count {
            if i == 0 {
                let Some(t) = get_varint(buf, &mut pos) else {
                    return;
                };
                let Some(raw) = buf.get(pos..pos + 8) else {
                    return;
                };
                let mut b = [0u8; 8];
                b.copy_from_slice(raw);
                pos += 8;
                ts = t;
                bits = u64::from_le_bytes(b);
            } else {
                let Some(dod) = get_varint(buf, &mut pos) else {
                    return;
                };
                delta = delta.wrapping_add(dod);
                ts = ts.wrapping_add(delta);
                let Some(&hdr) = buf.get(pos) else { return };
                pos += 1;
                if hdr == INT_DELTA {
                    let Some(d) = get_varint(buf, &mut pos) else {
                        return;
                    };
                    let prev = f64::from_bits(bits) as i64;
                    bits = (prev.wrapping_add(d) as f64).to_bits();
                } else if hdr != 0 {
                    let n = usize::from(hdr & 0x0f);
                    let trail = u32::from(hdr >> 4);
                    let Some(raw) = buf.get(pos..pos + n) else {
                        return;
                    };
                    let mut b = [0u8; 8];
                    b[..n].copy_from_slice(raw);
                    pos += n;
                    bits ^= u64::from_le_bytes(b) << (trail * 8);
                }
            }
            out.push(Sample {
                ts_ms: ts,
                value: f64::from_bits(bits),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_compact() {
        let mut c = Chunk::default();
        let vals = [1.0, 1.0, 2.5, -3.0, f64::NAN, 0.0, 1e300, 7.0];
        for (i, v) in vals.iter().enumerate() {
            c.push(1_000 + i as i64 * 1_000 + (i as i64 % 3), *v);
        }
        let mut out = Vec::new();
        c.decode(&mut out);
        assert_eq!(out.len(), vals.len());
        for (i, s) in out.iter().enumerate() {
            assert_eq!(s.value.to_bits(), vals[i].to_bits());
            assert_eq!(s.ts_ms, 1_000 + i as i64 * 1_000 + (i as i64 % 3));
        }
        // Integral counters use the integer delta when it is shorter.
        let mut ints = Chunk::default();
        let ivals = [
            0.0,
            4096.0,
            1e12,
            1e12 + 3.0,
            -0.0,
            5.0,
            2.5,
            3.0,
            9e15,
            -9e15,
        ];
        for (i, v) in ivals.iter().enumerate() {
            ints.push(i as i64 * 1000, *v);
        }
        let mut back = Vec::new();
        ints.decode(&mut back);
        let bits: Vec<u64> = back.iter().map(|s| s.value.to_bits()).collect();
        let want: Vec<u64> = ivals.iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, want);
        let mut counter = Chunk::default();
        for i in 0..100i64 {
            counter.push(i * 1000, (i * 40_960 + i % 7) as f64);
        }
        // 1 timestamp byte + 1 header + 3 varint bytes per sample.
        assert!(counter.byte_len() <= 100 * 5 + 9, "{}", counter.byte_len());
        let mut steady = Chunk::default();
        for i in 0..100 {
            steady.push(i * 1000, 5.0);
        }
        assert!(steady.byte_len() < 220, "{}", steady.byte_len());
    }
}
