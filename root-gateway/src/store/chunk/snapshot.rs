//! A chunk's full state in a snapshot: its header fields and bit stream
//! written as they are ([`Chunk::write_state`]), and read back, a state
//! from an older release split into chunks that fit ([`Chunk::read_state`]).
//! Apart from `chunk.rs` because only snapshot writing and loading use it.

use super::{
    Chunk, ChunkView, Enc, FOLD_AFTER, MAX_CHUNK_SAMPLES, MAX_EXP, MAX_SEALED_BITS, NONE, State,
    XOR, folding,
};

impl Chunk {
    /// Appends the chunk's full state (for snapshots).
    pub fn write_state(&self, out: &mut Vec<u8>) {
        use crate::store::codec::{put_uvarint, put_varint};
        put_uvarint(out, u64::from(self.count));
        put_varint(out, self.first_ts);
        put_varint(out, self.last_ts());
        put_varint(out, i64::from(self.delta));
        out.extend_from_slice(&self.bits.to_le_bytes());
        put_varint(out, self.mant);
        put_varint(out, self.pred);
        out.extend_from_slice(&self.mag.to_le_bytes());
        out.extend_from_slice(&[self.exp, self.lead, self.sig, self.last]);
        // v5 (v4, written by tests, has no `reg`).
        if folding() {
            out.push(self.reg);
        }
        put_uvarint(out, u64::from(self.bit_len));
        out.extend_from_slice(self.used());
    }

    /// Reads a chunk written by [`Chunk::write_state`] into `out`: one
    /// chunk, or (a state whose timestamps do not fit the packed fields,
    /// from a release that did not bound a chunk's span) its samples
    /// decoded and pushed again into as many chunks as they need.
    pub fn read_state(
        c: &mut crate::store::codec::Cursor<'_>,
        out: &mut Vec<Chunk>,
    ) -> Result<(), crate::store::codec::CodecError> {
        use crate::store::codec::CodecError;
        let count = c.len(MAX_CHUNK_SAMPLES)? as u16;
        let first_ts = c.varint()?;
        let ts = c.varint()?;
        let delta = c.varint()?;
        let bits = c.u64_le()?;
        let mant = c.varint()?;
        let pred = c.varint()?;
        let mag = c.u32_le()?;
        let (exp, lead, sig, last) = (c.u8()?, c.u8()?, c.u8()?, c.u8()?);
        let reg = c.u8()?;
        if (exp != NONE && exp > MAX_EXP)
            || (lead != NONE && u32::from(lead) + u32::from(sig) > 64)
            || last > XOR
            || reg > FOLD_AFTER
        {
            return Err(CodecError::Malformed("chunk encoder state out of range"));
        }
        let bit_len = c.len(MAX_SEALED_BITS as usize)? as u32;
        let bytes: &[u8] = c.bytes(bit_len.div_ceil(8) as usize)?;
        let enc = Enc {
            st: State {
                ts,
                delta,
                bits,
                mant,
                pred,
                mag,
                exp,
                lead,
                sig,
                last,
                reg,
            },
            skip: 0,
            backoff: 0,
            count,
            first_ts,
        };
        let mut chunk = Chunk {
            bytes: bytes.into(),
            bit_len: u16::try_from(bit_len).unwrap_or(u16::MAX),
            ..Chunk::default()
        };
        if count == 0 || chunk.pack(&enc) {
            out.push(chunk);
            return Ok(());
        }
        let view = ChunkView {
            bytes,
            bit_len,
            count,
            first_ts,
            last_ts: ts,
        };
        let samples = view.decode_checked().ok_or(CodecError::Malformed(
            "chunk stream does not match its state",
        ))?;
        let mut chunk = Chunk::default();
        for p in samples {
            chunk.push_splitting(out, p.ts_ms, p.value);
        }
        out.push(chunk);
        Ok(())
    }
}
