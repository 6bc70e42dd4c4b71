//! A bit stream, most significant bit first, for the chunk codec.
//!
//! The writer appends into a `Vec<u8>` and keeps the number of bits used;
//! the reader never reads past that number and answers `None` instead, so
//! a damaged chunk (from a snapshot) ends its decoding early rather than
//! panicking.

/// Appends `n` (0..=64) low bits of `v` to `buf`, whose first `*len` bits
/// are in use (`buf` holds exactly `len.div_ceil(8)` bytes, the bits past
/// `len` zero). The buffer grows by small steps so an open chunk keeps
/// little slack.
///
/// The bits are placed with one shift of a 128-bit word, then OR-ed into
/// the partly used last byte and appended as whole bytes: a handful of
/// instructions, where a loop over byte pieces took several per piece.
#[inline]
pub(crate) fn put(buf: &mut Vec<u8>, len: &mut u32, v: u64, n: u32) {
    let n = n.min(64);
    if n == 0 {
        return;
    }
    let v = if n == 64 { v } else { v & ((1u64 << n) - 1) };
    let used = *len % 8;
    // `used + n <= 71`: the bits fit the top 9 bytes of the word.
    let word = (u128::from(v) << (128 - n - used)).to_be_bytes();
    let touched = (used + n).div_ceil(8) as usize;
    let fresh = if used == 0 { touched } else { touched - 1 };
    grow_for(buf, fresh);
    let from = if used == 0 {
        0
    } else {
        if let Some(last) = buf.last_mut() {
            *last |= word[0];
        }
        1
    };
    let keep = buf.len() + fresh;
    if buf.capacity() - buf.len() >= 9 {
        // Room for the most a put appends: a fixed 9-byte copy (two moves,
        // no `memcpy` call) cut back to the bytes written; the capacity,
        // which `grown` alone sets, is not touched.
        buf.extend_from_slice(word.get(from..from + 9).unwrap_or_default());
        buf.truncate(keep);
    } else {
        buf.extend_from_slice(word.get(from..from + fresh).unwrap_or_default());
    }
    *len += n;
}

/// Makes room in `buf` for `fresh` more bytes, when its capacity lacks
/// it: to [`grown`]'s capacity (the one growth policy of [`put`] and a
/// chunk's in-place writes).
#[inline(always)]
pub(crate) fn grow_for(buf: &mut Vec<u8>, fresh: usize) {
    if buf.capacity() - buf.len() < fresh {
        buf.reserve_exact(grown(buf.len(), fresh) - buf.len());
    }
}

/// The capacity a buffer of `len` bytes grows to for `fresh` more: at
/// least an eighth more (16 bytes at least), rounded up to 8 bytes past a
/// multiple of 16. glibc's malloc hands out 16-byte granules less its
/// 8-byte size word, so such a capacity fills its block; a multiple of 16
/// left 8 bytes of every open chunk's block unusable (issue 5: RSS per
/// series).
fn grown(len: usize, fresh: usize) -> usize {
    let want = len.saturating_add((len / 8).max(16).max(fresh));
    want.saturating_sub(8)
        .next_multiple_of(16)
        .saturating_add(8)
}

/// Gathers codes (most significant first) in a 128-bit word and writes
/// them to the buffer it borrows in one or two [`put`]s when the word is
/// full or at [`Writer::finish`]: a chunk sample is a dozen short codes.
#[derive(Debug)]
pub(crate) struct Writer {
    buf: Vec<u8>,
    len: u32,
    word: u128,
    n: u32,
}

impl Writer {
    /// A writer appending to `buf`, whose first `len` bits are in use.
    pub(crate) fn new(buf: Vec<u8>, len: u32) -> Self {
        Writer {
            buf,
            len,
            word: 0,
            n: 0,
        }
    }

    /// Appends the `n` (0..=64) low bits of `v`.
    #[inline]
    pub(crate) fn put(&mut self, v: u64, n: u32) {
        let n = n.min(64);
        if self.n + n > 128 {
            self.flush();
        }
        let v = if n == 64 { v } else { v & ((1u64 << n) - 1) };
        // n <= 64 < 128: the shift is defined (bits shifted out are the
        // ones written already, none: self.n + n <= 128).
        self.word = (self.word << n) | u128::from(v);
        self.n += n;
    }

    fn flush(&mut self) {
        if self.n > 64 {
            put(
                &mut self.buf,
                &mut self.len,
                (self.word >> 64) as u64,
                self.n - 64,
            );
            put(&mut self.buf, &mut self.len, self.word as u64, 64);
        } else {
            put(&mut self.buf, &mut self.len, self.word as u64, self.n);
        }
        self.word = 0;
        self.n = 0;
    }

    /// Writes what is gathered; the buffer and its length in bits.
    pub(crate) fn finish(mut self) -> (Vec<u8>, u32) {
        self.flush();
        (self.buf, self.len)
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
///
/// Each read loads the 8 bytes at the current byte as one big-endian word
/// (a single unaligned load away from the buffer's end), so a code of up
/// to 56 bits costs a load, a shift and a bounds check, and a unary
/// prefix is counted with one `leading_ones` instead of bit by bit.
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

    /// The 64 bits from the current position, most significant first; at
    /// least the top 57 are stream bits (or zeros past the buffer's end).
    #[inline(always)]
    pub(crate) fn peek(&self) -> u64 {
        let byte = self.pos / 8;
        let word = match self.buf.get(byte..byte + 8) {
            Some(b) => <[u8; 8]>::try_from(b).map_or(0, u64::from_be_bytes),
            None => {
                let tail = self.buf.get(byte..).unwrap_or(&[]);
                let n = tail.len().min(8);
                let mut w = [0u8; 8];
                w[..n].copy_from_slice(&tail[..n]);
                u64::from_be_bytes(w)
            }
        };
        word << (self.pos % 8)
    }

    /// Bits left to read.
    #[inline(always)]
    pub(crate) fn left(&self) -> usize {
        self.end - self.pos
    }

    /// Moves past `n` bits the caller has read through [`Self::peek`]
    /// (at most [`Self::left`]).
    #[inline(always)]
    pub(crate) fn skip(&mut self, n: u32) {
        self.pos = (self.pos + n as usize).min(self.end);
    }

    /// One bit.
    #[inline(always)]
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
    #[inline(always)]
    pub(crate) fn read(&mut self, n: u32) -> Option<u64> {
        if n > 56 {
            return self.read_long(n);
        }
        if n as usize > self.left() {
            return None;
        }
        // `n` may be 0: shift in two steps (a shift by 64 would overflow).
        let v = (self.peek() >> 1) >> (63 - n);
        self.pos += n as usize;
        Some(v)
    }

    /// [`Self::read`] of 57..=64 bits (raw values, rare): two reads.
    #[inline(never)]
    fn read_long(&mut self, n: u32) -> Option<u64> {
        if n > 64 || n as usize > self.left() {
            return None;
        }
        let hi = self.read(n - 32)?;
        let lo = self.read(32)?;
        Some((hi << 32) | lo)
    }

    /// Counts `1` bits before the first `0`, reading at most `max` (at
    /// most 56) bits; `None` when the stream ends first.
    #[inline(always)]
    pub(crate) fn ones(&mut self, max: u32) -> Option<u32> {
        let max = max.min(56);
        let k = self.peek().leading_ones().min(max);
        let used = if k < max { k + 1 } else { k };
        if used as usize > self.left() {
            return None;
        }
        self.pos += used as usize;
        Some(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_fills_malloc_granules() {
        for len in 0..5000 {
            for fresh in [1, 9, 17] {
                let cap = grown(len, fresh);
                assert!(cap >= len + fresh && cap >= len + 16 && cap >= len + len / 8);
                assert_eq!(cap % 16, 8, "len {len} fresh {fresh} -> {cap}");
                assert!(cap < len + (len / 8).max(16).max(fresh) + 16);
            }
        }
    }

    /// The bit-at-a-time writer `put` replaced, as the reference.
    fn put_reference(buf: &mut Vec<u8>, len: &mut u32, v: u64, n: u32) {
        for i in (0..n.min(64)).rev() {
            if (*len).is_multiple_of(8) {
                buf.push(0);
            }
            if (v >> i) & 1 == 1
                && let Some(last) = buf.last_mut()
            {
                *last |= 0x80 >> (*len % 8);
            }
            *len += 1;
        }
    }

    /// A step of a xorshift walk from `x`: a width in 0..=64 and a value
    /// (the item index `i` rotates it, so every bit offset is met).
    fn next_code(x: &mut u64, i: u64) -> (u32, u64) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        ((*x % 65) as u32, x.rotate_left((i % 64) as u32))
    }

    #[test]
    fn put_writes_the_same_bytes_as_bit_at_a_time() {
        // A fixed pseudo-random walk over widths 0..=64 and every offset.
        let (mut fast, mut slow) = ((Vec::new(), 0u32), (Vec::new(), 0u32));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut cap = 0;
        for i in 0..5000u64 {
            let (n, v) = next_code(&mut x, i);
            // The buffer grows only as `grown` says, when the bytes the put
            // adds do not fit (its 9-byte copy never grows it).
            let fresh = (fast.1 + n.min(64)).div_ceil(8) as usize - fast.0.len();
            if cap - fast.0.len() < fresh {
                cap = grown(fast.0.len(), fresh);
            }
            put(&mut fast.0, &mut fast.1, v, n);
            put_reference(&mut slow.0, &mut slow.1, v, n);
            assert_eq!(fast.1, slow.1, "bit length after item {i}");
            assert_eq!(fast.0.len(), fast.1.div_ceil(8) as usize);
            assert_eq!(fast.0.capacity(), cap, "capacity after item {i}");
            assert_eq!(fast.0, slow.0, "bytes after item {i}");
        }
        assert_eq!(fast.0, slow.0);
    }

    #[test]
    fn writer_writes_the_same_bytes_as_put() {
        // Runs of codes longer than the 128-bit word, flushed at random.
        let (mut direct, mut len) = (Vec::new(), 0u32);
        let mut w = Writer::new(Vec::new(), 0);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..4000u64 {
            let (n, v) = next_code(&mut x, i);
            put(&mut direct, &mut len, v, n);
            w.put(v, n);
            if x.is_multiple_of(7) {
                let (buf, l) = w.finish();
                assert_eq!((&buf, l), (&direct, len), "after item {i}");
                w = Writer::new(buf, l);
            }
        }
        assert_eq!(w.finish(), (direct, len));
    }

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

    /// The plain bit-by-bit reader the word-at-a-time one replaced.
    struct Naive<'a> {
        buf: &'a [u8],
        pos: usize,
        end: usize,
    }

    impl Naive<'_> {
        fn bit(&mut self) -> Option<bool> {
            if self.pos >= self.end {
                return None;
            }
            let v = (self.buf[self.pos / 8] >> (7 - self.pos % 8)) & 1;
            self.pos += 1;
            Some(v == 1)
        }

        fn read(&mut self, n: u32) -> Option<u64> {
            if n > 64 || self.pos + n as usize > self.end {
                return None;
            }
            let mut v = 0u64;
            for _ in 0..n {
                v = (v << 1) | u64::from(self.bit()?);
            }
            Some(v)
        }

        fn ones(&mut self, max: u32) -> Option<u32> {
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

    proptest::proptest! {
        /// Any mix of reads and unary counts, over any bytes cut at any
        /// bit length (damaged streams included), gives what reading bit
        /// by bit gives, `None` at the same read.
        #[test]
        fn word_reader_matches_bit_by_bit(
            buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            cut in 0u32..400,
            ops in proptest::collection::vec((0u8..3, 0u32..=65), 0..80),
        ) {
            let len = cut.min(buf.len() as u32 * 8);
            let mut fast = Reader::new(&buf, len);
            let mut slow = Naive { buf: &buf, pos: 0, end: len as usize };
            for (kind, n) in ops {
                // A `None` ends a decoding, so the position after it is moot.
                let done = match kind {
                    0 => {
                        let (a, b) = (fast.read(n), slow.read(n));
                        proptest::prop_assert_eq!(a, b);
                        a.is_none()
                    }
                    1 => {
                        let (a, b) = (fast.ones(n % 8), slow.ones(n % 8));
                        proptest::prop_assert_eq!(a, b);
                        a.is_none()
                    }
                    _ => {
                        let (a, b) = (fast.bit(), slow.bit());
                        proptest::prop_assert_eq!(a, b);
                        a.is_none()
                    }
                };
                if done {
                    break;
                }
                proptest::prop_assert_eq!(fast.pos, slow.pos);
            }
        }
    }
}
