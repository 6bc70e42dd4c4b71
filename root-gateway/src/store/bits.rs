//! A bit stream, most significant bit first, for the chunk codec.
//!
//! The writer appends into a `Vec<u8>` and keeps the number of bits used;
//! the reader never reads past that number and answers `None` instead, so
//! a damaged chunk (from a snapshot) ends its decoding early rather than
//! panicking.

/// Appends `n` (0..=64) low bits of `v` to `buf`, whose first `*len` bits
/// are in use. The buffer grows by small steps so an open chunk keeps
/// little slack.
pub(crate) fn put(buf: &mut Vec<u8>, len: &mut u32, v: u64, n: u32) {
    let mut n = n.min(64);
    while n > 0 {
        let used = *len % 8;
        if used == 0 {
            if buf.len() == buf.capacity() {
                buf.reserve_exact((buf.len() / 8).max(16));
            }
            buf.push(0);
        }
        let free = 8 - used;
        let take = free.min(n);
        let part = (v >> (n - take)) & ((1u64 << take) - 1);
        if let Some(last) = buf.last_mut() {
            *last |= (part as u8) << (free - take);
        }
        *len += take;
        n -= take;
    }
}

/// Number of significant bits of `v` (0 for 0).
pub(crate) fn bit_len(v: u64) -> u32 {
    64 - v.leading_zeros()
}

/// Zigzag mapping of a signed value (small magnitudes to small codes).
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub(crate) fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Reads a bit stream written by [`put`].
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    /// A reader of the first `len` bits of `buf`.
    pub(crate) fn new(buf: &'a [u8], len: u32) -> Self {
        Reader {
            buf,
            pos: 0,
            end: (len as usize).min(buf.len() * 8),
        }
    }

    /// One bit.
    pub(crate) fn bit(&mut self) -> Option<bool> {
        if self.pos >= self.end {
            return None;
        }
        let b = self.buf.get(self.pos / 8)?;
        let v = (b >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Some(v == 1)
    }

    /// The next `n` (0..=64) bits as an unsigned value.
    pub(crate) fn read(&mut self, n: u32) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        if n > 64 || self.pos + n as usize > self.end {
            return None;
        }
        if n > 56 {
            let hi = self.read(n - 32)?;
            let lo = self.read(32)?;
            return Some((hi << 32) | lo);
        }
        let byte = self.pos / 8;
        let off = (self.pos % 8) as u32;
        let mut w = [0u8; 8];
        let avail = self.buf.len().saturating_sub(byte).min(8);
        w[..avail].copy_from_slice(self.buf.get(byte..byte + avail)?);
        let word = u64::from_be_bytes(w) << off;
        self.pos += n as usize;
        Some(word >> (64 - n))
    }

    /// Counts `1` bits before the first `0`, reading at most `max` bits.
    pub(crate) fn ones(&mut self, max: u32) -> Option<u32> {
        let mut k = 0;
        while k < max {
            if !self.bit()? {
                return Some(k);
            }
            k += 1;
        }
        Some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_across_byte_edges() {
        let mut buf = Vec::new();
        let mut len = 0;
        let items: [(u64, u32); 7] = [
            (1, 1),
            (0b101, 3),
            (u64::MAX, 64),
            (0, 5),
            (0x1234_5678_9abc, 57),
            (0x7f, 7),
            (1 << 62, 63),
        ];
        for (v, n) in items {
            put(&mut buf, &mut len, v, n);
        }
        let mut r = Reader::new(&buf, len);
        for (v, n) in items {
            let mask = if n == 64 { u64::MAX } else { (1 << n) - 1 };
            assert_eq!(r.read(n), Some(v & mask), "{n} bits");
        }
        assert_eq!(r.bit(), None, "reads stop at the written length");
        assert_eq!(unzigzag(zigzag(i64::MIN)), i64::MIN);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(bit_len(0), 0);
        assert_eq!(bit_len(u64::MAX), 64);
    }
}
