//! Byte helpers shared by the snapshot and the write-ahead log: varints,
//! strings, label sets, CRC-32C, and length+CRC framed records.
//!
//! Pure: records are read from any [`std::io::Read`] and written to any
//! [`std::io::Write`]; the file handling lives in the `wal` shell.
//!
//! ```text
//! frame:  len (u32 LE, payload bytes) | crc32c (u32 LE, of payload) | payload
//! ```

use std::io::{self, Read, Write};

use super::Labels;

/// Errors decoding framed records or their payloads.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The input ended inside a frame (a torn write).
    #[error("torn record: the input ends {missing} bytes short of a {len}-byte record")]
    Torn {
        /// Declared payload length.
        len: usize,
        /// Bytes missing.
        missing: usize,
    },
    /// The payload does not match its checksum.
    #[error(
        "checksum mismatch in a {len}-byte record (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Crc {
        /// Payload length.
        len: usize,
        /// Checksum in the frame.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
    /// A frame declares more bytes than allowed.
    #[error("record of {len} bytes exceeds the {max}-byte limit")]
    TooLong {
        /// Declared length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A payload is malformed (its checksum was right: a bug or a version mismatch).
    #[error("malformed record: {0}")]
    Malformed(&'static str),
    /// Reading failed.
    #[error("reading: {0}")]
    Io(#[from] io::Error),
}

/// CRC-32C (Castagnoli) of `data`: the `crc32c` crate, which uses the
/// CPU's CRC instructions where present (a byte-wise table cost about 7
/// instructions a byte, a sixth of the write-ahead log's time).
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// Writes one framed record; returns the bytes written.
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<usize> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record over 4 GiB"))?;
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[4..].copy_from_slice(&crc32c(payload).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(payload)?;
    Ok(8 + payload.len())
}

/// Appends one framed record to `out`.
pub fn push_frame(out: &mut Vec<u8>, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Reads as many bytes as available into `buf`; returns how many.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads the next framed record into `buf` (reused). `Ok(false)` at a clean
/// end of input; a record cut short or failing its checksum is an error.
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>, max: usize) -> Result<bool, CodecError> {
    let mut head = [0u8; 8];
    let n = read_full(r, &mut head)?;
    if n == 0 {
        return Ok(false);
    }
    if n < 8 {
        return Err(CodecError::Torn {
            len: 0,
            missing: 8 - n,
        });
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let stored = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len > max {
        return Err(CodecError::TooLong { len, max });
    }
    buf.clear();
    buf.resize(len, 0);
    let got = read_full(r, buf)?;
    if got < len {
        return Err(CodecError::Torn {
            len,
            missing: len - got,
        });
    }
    let computed = crc32c(buf);
    if computed != stored {
        return Err(CodecError::Crc {
            len,
            stored,
            computed,
        });
    }
    Ok(true)
}

/// Appends an unsigned LEB128 varint.
pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a zigzag varint.
pub fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Appends a length-prefixed string.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends a label set (count, then name/value pairs).
pub fn put_labels(out: &mut Vec<u8>, l: &Labels) {
    put_uvarint(out, l.len() as u64);
    for (k, v) in l.iter() {
        put_str(out, k);
        put_str(out, v);
    }
}

/// A cursor over a record payload; every read is bounds-checked.
#[derive(Debug)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// True when every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(CodecError::Malformed("payload ends inside a field"))?;
        self.pos += 1;
        Ok(b)
    }

    /// `n` raw bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(CodecError::Malformed("payload ends inside a field"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// An unsigned varint.
    pub fn uvarint(&mut self) -> Result<u64, CodecError> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return Err(CodecError::Malformed("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CodecError::Malformed("varint overflows 64 bits"))
    }

    /// A zigzag varint.
    pub fn varint(&mut self) -> Result<i64, CodecError> {
        let z = self.uvarint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    /// A varint that must fit a `usize` no larger than `max`.
    pub fn len(&mut self, max: usize) -> Result<usize, CodecError> {
        let v = self.uvarint()?;
        usize::try_from(v)
            .ok()
            .filter(|&n| n <= max)
            .ok_or(CodecError::Malformed("length out of range"))
    }

    /// A little-endian u32.
    pub fn u32_le(&mut self) -> Result<u32, CodecError> {
        let b = self.bytes(4)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        Ok(u32::from_le_bytes(a))
    }

    /// A little-endian u64.
    pub fn u64_le(&mut self) -> Result<u64, CodecError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, CodecError> {
        let n = self.len(self.buf.len())?;
        std::str::from_utf8(self.bytes(n)?).map_err(|_| CodecError::Malformed("string not UTF-8"))
    }

    /// A label set.
    pub fn labels(&mut self) -> Result<Labels, CodecError> {
        let n = self.len(self.buf.len())?;
        let mut pairs = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            pairs.push((self.str()?, self.str()?));
        }
        Ok(Labels::from_pairs(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vector() {
        // RFC 3720 test vector: CRC-32C of "123456789".
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn crc32c_matches_the_bitwise_definition_at_every_length_and_offset() {
        // The accelerated paths work on 8-byte words: check unaligned
        // heads and tails against the bit-at-a-time definition.
        fn bitwise(data: &[u8]) -> u32 {
            let mut c = !0u32;
            for &b in data {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        (c >> 1) ^ 0x82F6_3B78
                    } else {
                        c >> 1
                    };
                }
            }
            !c
        }
        let data: Vec<u8> = (0..600u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for end in (start..data.len()).step_by(37) {
                assert_eq!(
                    crc32c(&data[start..end]),
                    bitwise(&data[start..end]),
                    "{start}..{end}"
                );
            }
        }
    }

    #[test]
    fn varints_and_frames_round_trip() {
        let mut p = Vec::new();
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            put_varint(&mut p, v);
        }
        put_str(&mut p, "héllo");
        put_labels(&mut p, &Labels::metric("m", [("a", "b")]));
        let mut c = Cursor::new(&p);
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(c.varint().expect("varint"), v);
        }
        assert_eq!(c.str().expect("str"), "héllo");
        assert_eq!(
            c.labels().expect("labels"),
            Labels::metric("m", [("a", "b")])
        );
        assert!(c.is_empty());
        assert!(c.u8().is_err());

        let mut f = Vec::new();
        push_frame(&mut f, &p);
        push_frame(&mut f, b"second");
        let mut r = &f[..];
        let mut buf = Vec::new();
        assert!(read_frame(&mut r, &mut buf, 1 << 20).expect("first"));
        assert_eq!(buf, p);
        assert!(read_frame(&mut r, &mut buf, 1 << 20).expect("second"));
        assert_eq!(buf, b"second");
        assert!(!read_frame(&mut r, &mut buf, 1 << 20).expect("clean end"));
    }
}
