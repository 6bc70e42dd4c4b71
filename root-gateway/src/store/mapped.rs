//! [`MappedBuf`]: an append-only byte buffer in its own anonymous memory
//! mapping, given back to the system when dropped.
//!
//! For short-lived buffers of many megabytes that must not stay resident
//! once freed (a checkpoint's snapshot cut). From `malloc`, such a buffer
//! stays resident after `free`: past the first one, glibc's dynamic mmap
//! threshold has risen to its size, so the next ones come from a thread's
//! arena heap, which keeps the freed pages (measured: two more arena heaps
//! of 7–10 MB a gateway after four checkpoints at 30,000 series, 1 s).
//!
//! Pages never written are never resident, so a capacity sized by a bound
//! rather than exactly costs address space only.

use std::io::{self, Write};
use std::ops::Deref;

use memmap2::MmapMut;

/// An append-only byte buffer held in an anonymous mapping (unmapped on
/// drop); on the heap when a mapping cannot be made (the same bytes).
#[derive(Debug, Default)]
pub(crate) struct MappedBuf {
    store: Store,
    len: usize,
}

#[derive(Debug, Default)]
enum Store {
    /// Capacity 0.
    #[default]
    Empty,
    Map(MmapMut),
    /// `mmap` failed (address space exhausted): the heap keeps the cut
    /// working, with the resident-memory cost this type avoids.
    Heap(Vec<u8>),
}

impl MappedBuf {
    /// A buffer with room for `cap` bytes (mapped now, resident as written).
    pub(crate) fn with_capacity(cap: usize) -> Self {
        MappedBuf {
            store: Store::new(cap),
            len: 0,
        }
    }

    /// Bytes it holds without growing.
    pub(crate) fn capacity(&self) -> usize {
        match &self.store {
            Store::Empty => 0,
            Store::Map(m) => m.len(),
            Store::Heap(v) => v.len(),
        }
    }

    /// True when it lives in its own mapping (false: empty or on the heap).
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self.store, Store::Map(_))
    }

    /// Appends `b`; past the capacity, moves to a mapping twice as big
    /// (the old one is unmapped).
    pub(crate) fn extend_from_slice(&mut self, b: &[u8]) {
        let end = self.len + b.len();
        if end > self.capacity() {
            let mut next = Store::new(end.max(self.capacity() * 2).max(4096));
            if let (Some(to), Some(from)) = (next.bytes_mut(0..self.len), self.store.bytes()) {
                to.copy_from_slice(from.get(..self.len).unwrap_or_default());
            }
            self.store = next;
        }
        if let Some(to) = self.store.bytes_mut(self.len..end) {
            to.copy_from_slice(b);
            self.len = end;
        }
    }
}

/// A buffered writer whose buffer is a [`MappedBuf`] (a `BufWriter`'s
/// buffer of a megabyte stayed in the arena of each thread that wrote a
/// snapshot). Flush it before dropping it: a drop does not write.
#[derive(Debug)]
pub(crate) struct MappedWriter<W: Write> {
    buf: MappedBuf,
    inner: W,
}

impl<W: Write> MappedWriter<W> {
    /// Buffers up to `cap` bytes before writing to `inner`.
    pub(crate) fn with_capacity(cap: usize, inner: W) -> Self {
        MappedWriter {
            buf: MappedBuf::with_capacity(cap),
            inner,
        }
    }

    /// Writes what is buffered, then gives back the inner writer.
    pub(crate) fn into_inner(mut self) -> io::Result<W> {
        self.flush_buf()?;
        Ok(self.inner)
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        self.inner.write_all(&self.buf)?;
        self.buf.len = 0;
        Ok(())
    }
}

impl<W: Write> Write for MappedWriter<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.buf.len + b.len() > self.buf.capacity() {
            self.flush_buf()?;
        }
        if b.len() >= self.buf.capacity() {
            return self.inner.write(b);
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        self.inner.flush()
    }
}

impl Store {
    fn new(cap: usize) -> Store {
        if cap == 0 {
            return Store::Empty;
        }
        match MmapMut::map_anon(cap) {
            Ok(m) => Store::Map(m),
            Err(e) => {
                tracing::warn!(bytes = cap, error = %e,
                    "cannot map a snapshot buffer; using the heap (it may stay resident)");
                Store::Heap(vec![0; cap])
            }
        }
    }

    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Store::Empty => None,
            Store::Map(m) => Some(m),
            Store::Heap(v) => Some(v),
        }
    }

    fn bytes_mut(&mut self, r: std::ops::Range<usize>) -> Option<&mut [u8]> {
        match self {
            Store::Empty => None,
            Store::Map(m) => m.get_mut(r),
            Store::Heap(v) => v.get_mut(r),
        }
    }
}

impl Deref for MappedBuf {
    type Target = [u8];

    /// The bytes appended so far.
    fn deref(&self) -> &[u8] {
        self.store
            .bytes()
            .and_then(|b| b.get(..self.len))
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::MappedBuf;

    #[test]
    fn grows_past_its_capacity_keeping_every_byte() {
        let mut b = MappedBuf::with_capacity(3);
        let mut want = Vec::new();
        for i in 0..10_000u32 {
            let chunk = [i as u8, (i >> 8) as u8, 7];
            b.extend_from_slice(&chunk[..(i % 4) as usize]);
            want.extend_from_slice(&chunk[..(i % 4) as usize]);
            b.extend_from_slice(&i.to_le_bytes());
            want.extend_from_slice(&i.to_le_bytes());
        }
        assert!(b.is_mapped());
        assert!(b.capacity() >= want.len());
        assert_eq!(&b[..], &want[..]);
    }

    #[test]
    fn writer_passes_every_byte_in_order() {
        use std::io::Write;
        let mut w = super::MappedWriter::with_capacity(4096, Vec::new());
        let mut want = Vec::new();
        for i in 0..3_000usize {
            let b: Vec<u8> = (0..(i * 7) % 5_000).map(|k| (k + i) as u8).collect();
            w.write_all(&b).unwrap();
            want.extend_from_slice(&b);
        }
        assert_eq!(w.into_inner().unwrap(), want);
    }

    #[test]
    fn empty_buffer_maps_nothing_until_written() {
        let mut b = MappedBuf::with_capacity(0);
        assert!(!b.is_mapped());
        assert!(b.is_empty());
        b.extend_from_slice(&[]);
        assert!(b.is_empty());
        b.extend_from_slice(&[1, 2]);
        assert!(b.is_mapped());
        assert_eq!(&b[..], &[1, 2]);
        assert_eq!(&MappedBuf::default()[..], &[] as &[u8]);
    }
}
