//! Link records: how frames are delimited on a byte stream.
//!
//! ```text
//! +----------------------+---------------------------+
//! | length (LEB128 u32)  | payload (length bytes)    |
//! +----------------------+---------------------------+
//! ```
//! The payload is a compressed frame (see `codec::frame`). The reader refuses
//! a length above its cap before reading the payload, so a hostile peer
//! cannot make it allocate what it claims.

use super::CodecError;

/// Largest length prefix: 5 bytes of LEB128 for a u32.
pub const MAX_PREFIX: usize = 5;

/// Appends `payload` to `out` as one record.
pub fn write_record(out: &mut Vec<u8>, payload: &[u8]) {
    let mut n = payload.len() as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(payload);
}

/// Reads the length prefix at the start of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a prefix, otherwise the
/// payload length and the prefix size. Fails when the prefix is malformed or
/// announces more than `max_len` bytes.
pub fn read_prefix(buf: &[u8], max_len: usize) -> Result<Option<(usize, usize)>, CodecError> {
    let mut n: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(MAX_PREFIX) {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if n > max_len as u64 || n > u64::from(u32::MAX) {
                return Err(CodecError::RecordTooLarge {
                    len: n,
                    max: max_len,
                });
            }
            return Ok(Some((n as usize, i + 1)));
        }
    }
    if buf.len() >= MAX_PREFIX {
        return Err(CodecError::BadRecordPrefix);
    }
    Ok(None)
}

/// Splits a byte stream into records, sans-I/O: push bytes in, pop records out.
///
/// Memory is bounded by `max_len` plus one read's worth of bytes.
#[derive(Debug)]
pub struct RecordSplitter {
    buf: Vec<u8>,
    max_len: usize,
}

impl RecordSplitter {
    /// A splitter that rejects records longer than `max_len`.
    pub fn new(max_len: usize) -> Self {
        Self {
            buf: Vec::new(),
            max_len,
        }
    }

    /// Appends bytes received from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Pops the next complete record's payload, if one is buffered.
    pub fn pop(&mut self) -> Result<Option<Vec<u8>>, CodecError> {
        let Some((len, pre)) = read_prefix(&self.buf, self.max_len)? else {
            return Ok(None);
        };
        if self.buf.len() < pre + len {
            return Ok(None);
        }
        let payload = self.buf[pre..pre + len].to_vec();
        self.buf.drain(..pre + len);
        Ok(Some(payload))
    }

    /// Bytes buffered but not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_split_at_every_byte() {
        let mut wire = Vec::new();
        let payloads: Vec<Vec<u8>> = vec![vec![], vec![1; 127], vec![2; 128], vec![3; 40_000]];
        for p in &payloads {
            write_record(&mut wire, p);
        }
        let mut s = RecordSplitter::new(1 << 20);
        let mut got = Vec::new();
        for b in &wire {
            s.push(std::slice::from_ref(b));
            while let Some(r) = s.pop().expect("valid stream") {
                got.push(r);
            }
        }
        assert_eq!(got, payloads);
        assert_eq!(s.buffered(), 0);
    }

    #[test]
    fn oversize_prefix_rejected_before_payload() {
        let mut wire = Vec::new();
        write_record(&mut wire, &[0; 300]);
        let mut s = RecordSplitter::new(100);
        s.push(&wire[..2]);
        assert!(matches!(
            s.pop(),
            Err(CodecError::RecordTooLarge { len: 300, max: 100 })
        ));
    }

    #[test]
    fn endless_prefix_is_garbage() {
        assert!(matches!(
            read_prefix(&[0xff; 6], 1 << 20),
            Err(CodecError::BadRecordPrefix)
        ));
    }
}
