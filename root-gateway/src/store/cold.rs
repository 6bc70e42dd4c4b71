//! The cold tier: sealed chunks in append-only files, read through
//! read-only memory maps, so the live window's bulk is not anonymous
//! memory (issue 5: resident memory a series).
//!
//! A chunk is never written again once sealed, so with a data directory the
//! store writes it here when it seals and keeps only a reference (file and
//! offset) to the newest one in the series' entry; each record names its
//! predecessor, so a series' cold chunks form a list from newest to oldest.
//! A read walks that list back to the window's first chunk. Prometheus
//! keeps its head's full chunks in memory-mapped files for the same reason;
//! the pages are the kernel's page cache, resident only while read and
//! given back under memory pressure.
//!
//! ```text
//! file   DIR/cold-<N>: "canopy-cold-v1\0\0" then records, preallocated sparse
//! record first_ts i64 | span u32 | count u8 | bit_len u16 | prev u64 | bit_len/8 bytes
//! ```
//!
//! All little-endian. `prev` is the reference of the series' previous cold
//! chunk (0: none); a reference is `file << 32 | offset`. A file is deleted
//! once every chunk in it has a successor older than the retention cutoff
//! (`until` below): no read can reach such a chunk (see
//! [`crate::store::chunk::ColdWalk`]). The files are not durable state: the
//! snapshot and the write-ahead log are, and a start empties the directory
//! and writes the chunks it loads again.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::chunk::{ChunkView, MAX_CHUNK_SAMPLES};

/// Bytes of a file's header.
const HEAD: usize = 16;
/// A file's header.
const MAGIC: &[u8; HEAD] = b"canopy-cold-v1\0\0";
/// Bytes of a record's header.
pub(crate) const RECORD_HEAD: usize = 23;
/// Default size of a file (sparse: only what is written takes disk).
pub const DEFAULT_FILE_BYTES: u32 = 128 << 20;
/// Smallest file (tests use small ones; a record that does not fit a
/// file is refused, and its chunk stays in memory).
const MIN_FILE_BYTES: u32 = 1024;
/// A span that is not known (as in [`crate::store::chunk::Sealed`]).
const UNKNOWN_SPAN: u32 = u32::MAX;

/// A cold chunk as read back: its view and its predecessor's reference.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColdChunk<'a> {
    /// The chunk.
    pub(crate) view: ChunkView<'a>,
    /// The series' previous cold chunk (0: none).
    pub(crate) prev: u64,
}

impl ColdChunk<'_> {
    /// Where a walk back to `from` goes after this chunk: its predecessor,
    /// or `None` when this one begins at or before `from`. Every walk stops
    /// there: with `from` at or past the retention cutoff, what lies older
    /// may be in a file already deleted.
    #[inline]
    pub(crate) fn next_back(&self, from: i64) -> Option<u64> {
        (self.view.first_ts() > from).then_some(self.prev)
    }
}

/// The mapped files, oldest first: what a read needs, shared with a
/// snapshot cut (which keeps the files it may read mapped while the store
/// moves on; a deleted file's pages go when its last map does).
#[derive(Clone, Debug, Default)]
pub struct ColdMaps {
    /// Number of the first file in `maps`.
    first: u32,
    /// From file `first` on; `None` for one deleted while an older one
    /// stays.
    maps: Vec<Option<Arc<Mapped>>>,
}

/// One file: its read-only map for queries, and the file for reads that
/// must not map its pages into the process (a checkpoint reads every
/// chunk; through the map they would all stay resident).
#[derive(Debug)]
struct Mapped {
    map: Mmap,
    file: File,
}

impl ColdMaps {
    /// No files (a store without a cold tier reads through it).
    pub const fn empty() -> ColdMaps {
        ColdMaps {
            first: 0,
            maps: Vec::new(),
        }
    }

    /// The chunk at reference `r`, `None` when it is not one (a file
    /// already deleted, or damage).
    pub(crate) fn get(&self, r: u64) -> Option<ColdChunk<'_>> {
        let (m, at) = self.file_of(r)?;
        parse(m.map.get(at..)?)
    }

    /// The file of reference `r` and the offset in it.
    fn file_of(&self, r: u64) -> Option<(&Mapped, usize)> {
        let file = u32::try_from(r >> 32).ok()?;
        let at = (r & u64::from(u32::MAX)) as usize;
        let m = self.maps.get(file.checked_sub(self.first)? as usize)?;
        Some((m.as_deref()?, at))
    }

    /// Reads the record at `r` with `pread`, not through the map (its
    /// pages are not mapped into the process), appending it to `out`;
    /// returns where it starts in `out` (parse it with [`parse`]).
    pub(crate) fn read_into(&self, r: u64, out: &mut Vec<u8>) -> Option<usize> {
        let (m, at) = self.file_of(r)?;
        let start = out.len();
        // Most records are a few hundred bytes: one read.
        const GUESS: usize = 512;
        out.resize(start + GUESS, 0);
        let n = read_some(&m.file, &mut out[start..], at as u64)?;
        if n < RECORD_HEAD {
            out.truncate(start);
            return None;
        }
        let bit_len = u16::from_le_bytes([out[start + 13], out[start + 14]]);
        let len = RECORD_HEAD + usize::from(bit_len).div_ceil(8);
        if len > n {
            out.resize(start + len, 0);
            m.file
                .read_exact_at(&mut out[start + n..start + len], (at + n) as u64)
                .ok()?;
        }
        out.truncate(start + len);
        Some(start)
    }

    /// Number of files mapped.
    pub fn files(&self) -> usize {
        self.maps.iter().flatten().count()
    }
}

/// Reads into `buf` at `at` until it is full or the file ends; returns
/// how many bytes.
fn read_some(f: &File, buf: &mut [u8], at: u64) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(n)
}

/// The record at the start of `b` (a map from its offset on, or a record
/// read by [`ColdMaps::read_into`]), `None` when it is not one.
pub(crate) fn parse(b: &[u8]) -> Option<ColdChunk<'_>> {
    let h = b.get(..RECORD_HEAD)?;
    let le8 = |b: &[u8]| <[u8; 8]>::try_from(b).ok();
    let first_ts = i64::from_le_bytes(le8(&h[..8])?);
    let span = u32::from_le_bytes(<[u8; 4]>::try_from(&h[8..12]).ok()?);
    let count = usize::from(h[12]);
    let bit_len = u32::from(u16::from_le_bytes([h[13], h[14]]));
    let prev = u64::from_le_bytes(le8(&h[15..23])?);
    let bytes = b.get(RECORD_HEAD..RECORD_HEAD + bit_len.div_ceil(8) as usize)?;
    if span == UNKNOWN_SPAN {
        return None;
    }
    let last_ts = first_ts.checked_add(i64::from(span))?;
    let view = ChunkView::sealed(bytes, bit_len, count, first_ts, last_ts)?;
    Some(ColdChunk { view, prev })
}

/// What a file holds, beside its map.
#[derive(Clone, Copy, Debug, Default)]
struct FileMeta {
    /// Deleted (kept in place while an older file stays).
    gone: bool,
    /// Bytes written (the next record's offset).
    len: u32,
    /// The newest timestamp at which one of its chunks was succeeded:
    /// past the retention cutoff, none of them is read again.
    until: i64,
    chunks: u64,
    samples: u64,
}

/// Counters of the cold tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ColdStats {
    /// Chunks written.
    pub chunks_written: u64,
    /// Bytes written (records with their headers).
    pub bytes_written: u64,
    /// Files held now.
    pub files: u64,
    /// Bytes written to the files held now.
    pub bytes_held: u64,
    /// Chunks in the files held now (some past retention, until their
    /// file goes).
    pub chunks_held: u64,
    /// Samples of those chunks.
    pub samples_held: u64,
    /// Files deleted past retention.
    pub files_deleted: u64,
    /// Chunks that could not be written (kept in memory instead).
    pub write_errors: u64,
}

/// The cold tier's files: appends to the newest, deletes those past
/// retention (see the module docs).
#[derive(Debug)]
pub struct ColdFiles {
    dir: PathBuf,
    file_bytes: u32,
    maps: Arc<ColdMaps>,
    meta: Vec<FileMeta>,
    /// The file appended to (the last of `maps`).
    active: Option<File>,
    stats: ColdStats,
    /// A write error was logged since the last write that worked: one
    /// line per run of failures.
    logged_error: bool,
}

impl ColdFiles {
    /// Opens the tier in `dir` (created; files left by an earlier run are
    /// deleted: the snapshot and log hold the data), with files of
    /// `file_bytes` each (at least 1 KiB).
    pub fn open(dir: &Path, file_bytes: u32) -> io::Result<ColdFiles> {
        fs::create_dir_all(dir)?;
        for e in fs::read_dir(dir)?.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("cold-"))
            {
                fs::remove_file(e.path())?;
            }
        }
        Ok(ColdFiles {
            dir: dir.to_path_buf(),
            file_bytes: file_bytes.max(MIN_FILE_BYTES),
            maps: Arc::default(),
            meta: Vec::new(),
            active: None,
            stats: ColdStats::default(),
            logged_error: false,
        })
    }

    /// The mapped files, for reads.
    #[inline]
    pub fn maps(&self) -> &ColdMaps {
        &self.maps
    }

    /// A handle on the mapped files for a snapshot cut.
    pub fn share(&self) -> Arc<ColdMaps> {
        Arc::clone(&self.maps)
    }

    /// The tier's counters.
    pub fn stats(&self) -> ColdStats {
        let mut s = self.stats;
        let held = || self.meta.iter().filter(|m| !m.gone);
        s.files = held().count() as u64;
        s.bytes_held = held().map(|m| u64::from(m.len)).sum();
        s.chunks_held = held().map(|m| m.chunks).sum();
        s.samples_held = held().map(|m| m.samples).sum();
        s
    }

    fn path(&self, n: u32) -> PathBuf {
        self.dir.join(format!("cold-{n:010}"))
    }

    /// Starts file number `n`: created at full size (sparse), its header
    /// written, mapped.
    fn start_file(&mut self, n: u32) -> io::Result<()> {
        let p = self.path(n);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)?;
        let made = (|| {
            f.set_len(u64::from(self.file_bytes))?;
            f.write_all_at(MAGIC, 0)?;
            Ok::<_, io::Error>((map_file(&f)?, f.try_clone()?))
        })();
        let (map, file) = match made {
            Ok(m) => m,
            Err(e) => {
                // Gone, so the next try can make it again.
                let _ = fs::remove_file(&p);
                return Err(e);
            }
        };
        let maps = Arc::make_mut(&mut self.maps);
        if maps.maps.is_empty() {
            maps.first = n;
        }
        maps.maps.push(Some(Arc::new(Mapped { map, file })));
        self.meta.push(FileMeta {
            gone: false,
            len: HEAD as u32,
            until: i64::MIN,
            chunks: 0,
            samples: 0,
        });
        self.active = Some(f);
        Ok(())
    }

    /// Writes `view` as a series' newest cold chunk after `prev` (0: its
    /// first); `succeeded_at` is the first timestamp of the chunk that
    /// follows it. Returns its reference, or `None` when it could not be
    /// written (counted, logged once until a write succeeds): the caller
    /// keeps it in memory.
    pub(crate) fn append(
        &mut self,
        view: &ChunkView<'_>,
        prev: u64,
        succeeded_at: i64,
    ) -> Option<u64> {
        match self.try_append(view, prev, succeeded_at) {
            Ok(r) => {
                self.logged_error = false;
                Some(r)
            }
            Err(e) => {
                self.stats.write_errors += 1;
                if !self.logged_error {
                    self.logged_error = true;
                    tracing::warn!(dir = %self.dir.display(), error = %e,
                        "cold tier: cannot write sealed chunks, keeping them in memory");
                }
                None
            }
        }
    }

    fn try_append(
        &mut self,
        view: &ChunkView<'_>,
        prev: u64,
        succeeded_at: i64,
    ) -> io::Result<u64> {
        let bytes = view.bytes();
        let span = u32::try_from(view.last_ts().saturating_sub(view.first_ts()))
            .ok()
            .filter(|&s| s != UNKNOWN_SPAN)
            .ok_or_else(|| io::Error::other("chunk span out of range"))?;
        let (Ok(count), Ok(bit_len)) = (u8::try_from(view.len()), u16::try_from(view.bit_len()))
        else {
            return Err(io::Error::other("chunk too large for a cold record"));
        };
        debug_assert!(view.len() <= MAX_CHUNK_SAMPLES);
        let need = (RECORD_HEAD + bytes.len()) as u64;
        if need + HEAD as u64 > u64::from(self.file_bytes) {
            return Err(io::Error::other("chunk larger than a cold file"));
        }
        let fits = self
            .meta
            .last()
            .is_some_and(|m| u64::from(m.len) + need <= u64::from(self.file_bytes));
        if !fits || self.active.is_none() {
            let n = self
                .maps
                .first
                .checked_add(self.maps.maps.len() as u32)
                .ok_or_else(|| io::Error::other("cold file numbers exhausted"))?;
            self.active = None;
            self.start_file(n)?;
        }
        let mut rec = [0u8; RECORD_HEAD];
        rec[..8].copy_from_slice(&view.first_ts().to_le_bytes());
        rec[8..12].copy_from_slice(&span.to_le_bytes());
        rec[12] = count;
        rec[13..15].copy_from_slice(&bit_len.to_le_bytes());
        rec[15..23].copy_from_slice(&prev.to_le_bytes());
        let (Some(f), Some(m)) = (&self.active, self.meta.last_mut()) else {
            return Err(io::Error::other("no cold file"));
        };
        let at = m.len;
        let mut buf = Vec::with_capacity(need as usize);
        buf.extend_from_slice(&rec);
        buf.extend_from_slice(bytes);
        f.write_all_at(&buf, u64::from(at))?;
        m.len += need as u32;
        m.until = m.until.max(succeeded_at);
        m.chunks += 1;
        m.samples += u64::from(count);
        self.stats.chunks_written += 1;
        self.stats.bytes_written += need;
        let file = u64::from(self.maps.first) + self.maps.maps.len() as u64 - 1;
        Ok(file << 32 | u64::from(at))
    }

    /// Deletes the files whose every chunk was succeeded before `cutoff`
    /// (never the one appended to). Any file, not only the oldest: a chunk
    /// succeeded far in the future (a remote_write client's clock) holds
    /// its own file, not every file after it.
    pub fn expire(&mut self, cutoff: i64) {
        let last = self.meta.len().saturating_sub(1);
        for i in 0..last {
            let Some(m) = self.meta.get_mut(i) else { break };
            if m.gone || m.until >= cutoff {
                continue;
            }
            m.gone = true;
            let maps = Arc::make_mut(&mut self.maps);
            if let Some(slot) = maps.maps.get_mut(i) {
                *slot = None;
            }
            let n = maps.first + i as u32;
            self.stats.files_deleted += 1;
            let p = self.path(n);
            if let Err(e) = fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "cold tier: cannot delete an expired file");
            }
        }
        // Deleted files at the front go from the lists.
        let k = self.meta.iter().take(last).take_while(|m| m.gone).count();
        if k > 0 {
            self.meta.drain(..k);
            let maps = Arc::make_mut(&mut self.maps);
            maps.maps.drain(..k);
            maps.first += k as u32;
        }
    }
}

/// Maps `f` read-only.
///
/// The one `unsafe` of the gateway: the map is undefined behaviour if the
/// file changes under it in bytes a read can see. The files are this
/// process's own, created here with `create_new`, in its data directory;
/// bytes are only ever appended past every published reference (a
/// reference is stored only after its record is written), never
/// rewritten or truncated while mapped. Deleting a file leaves its pages
/// mapped until the last map goes.
#[allow(unsafe_code)]
fn map_file(f: &File) -> io::Result<Mmap> {
    // SAFETY: see the doc comment: the file is ours, append-only, never
    // truncated while mapped.
    unsafe { Mmap::map(f) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::chunk::Chunk;
    use super::*;

    fn chunk(from: i64, n: i64) -> Chunk {
        let mut c = Chunk::default();
        for k in 0..n {
            c.push((from + k) * 1000, (k * 3) as f64);
        }
        c
    }

    #[test]
    fn chunks_read_back_and_files_roll_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("cold-0000000007"), b"old").unwrap();
        let mut c = ColdFiles::open(dir.path(), 16 * 1024).unwrap();
        assert!(!dir.path().join("cold-0000000007").exists());
        let mut refs = Vec::new();
        let mut prev = 0;
        for i in 0..200 {
            let ch = chunk(i * 120, 120);
            let r = c.append(&ch.view(), prev, (i + 1) * 120_000).unwrap();
            let got = c.maps().get(r).unwrap();
            assert_eq!(got.prev, prev);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            got.view.decode(&mut a);
            ch.view().decode(&mut b);
            assert_eq!(a, b);
            assert_eq!(got.view.last_ts(), ch.last_ts());
            refs.push(r);
            prev = r;
        }
        let s = c.stats();
        assert!(s.files > 2, "{s:?}");
        assert_eq!(s.chunks_written, 200);
        assert_eq!(s.chunks_held, 200);
        // A cut's handle keeps an expired file readable.
        let held = c.share();
        c.expire(100 * 120_000);
        let s = c.stats();
        assert!(s.files_deleted > 0 && s.chunks_held < 200, "{s:?}");
        assert!(c.maps().get(refs[0]).is_none());
        assert!(held.get(refs[0]).is_some());
        assert!(c.maps().get(refs[199]).is_some());
        // Chunks succeeded at or after the cutoff stay.
        assert!(c.maps().get(refs[100]).is_some());
        let on_disk = fs::read_dir(dir.path()).unwrap().count() as u64;
        assert_eq!(on_disk, s.files);
        // Bad references are no chunk.
        for r in [0, 1, u64::MAX, refs[5] + 1, (9999u64 << 32) | 16] {
            assert!(c.maps().get(r).is_none(), "{r:x}");
        }
    }

    #[test]
    fn a_chunk_succeeded_in_the_future_holds_only_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = ColdFiles::open(dir.path(), 1024).unwrap();
        // File 0 holds a chunk succeeded at a far future time; each
        // later file holds chunks succeeded within the hour.
        let far = c.append(&chunk(0, 60).view(), 0, i64::MAX / 2).unwrap();
        let mut refs = Vec::new();
        for i in 0..40 {
            refs.push(
                c.append(&chunk(i * 60, 60).view(), 0, (i + 1) * 60_000)
                    .unwrap(),
            );
        }
        let files = c.stats().files;
        assert!(files > 5, "{files}");
        c.expire(3_600_000);
        let s = c.stats();
        assert_eq!(s.files, 2, "{s:?}");
        assert_eq!(s.files_deleted, files - 2);
        assert!(c.maps().get(far).is_some());
        let (far_file, last_file) = (far >> 32, refs[39] >> 32);
        for &r in &refs {
            let kept = r >> 32 == far_file || r >> 32 == last_file;
            assert_eq!(c.maps().get(r).is_some(), kept, "{r:x}");
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
        // New chunks keep going to new files.
        let r = c.append(&chunk(9_000, 60).view(), 0, 9_999_999).unwrap();
        assert!(c.maps().get(r).is_some());
    }

    #[test]
    fn reads_without_the_map_match_reads_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = ColdFiles::open(dir.path(), 1 << 20).unwrap();
        // A short chunk and one of noisy floats (over 512 bytes: two reads).
        let mut noisy = Chunk::default();
        for k in 0..120 {
            noisy.push(k * 1000, (k as f64 * 0.731).sin() * 1e9);
        }
        assert!(noisy.view().byte_len() > 600, "{}", noisy.view().byte_len());
        let a = c.append(&chunk(0, 7).view(), 0, 7_000).unwrap();
        let b = c.append(&noisy.view(), a, 200_000).unwrap();
        let mut out = vec![1, 2, 3];
        for r in [a, b] {
            let at = c.maps().read_into(r, &mut out).unwrap();
            let (x, y) = (parse(&out[at..]).unwrap(), c.maps().get(r).unwrap());
            let (mut p, mut q) = (Vec::new(), Vec::new());
            x.view.decode(&mut p);
            y.view.decode(&mut q);
            assert_eq!((p, x.prev), (q, y.prev));
            assert_eq!(out.len(), at + RECORD_HEAD + x.view.byte_len());
        }
        assert_eq!(&out[..3], &[1, 2, 3]);
        assert!(
            c.maps()
                .read_into(b + 8, &mut out)
                .is_none_or(|at| parse(&out[at..]).is_none())
        );
    }

    #[test]
    fn a_failed_write_is_counted_and_the_chunk_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = ColdFiles::open(&dir.path().join("cold"), 16 * 1024).unwrap();
        // The directory goes: no new file can be made.
        fs::remove_dir_all(dir.path().join("cold")).unwrap();
        assert!(c.append(&chunk(0, 10).view(), 0, 10_000).is_none());
        assert_eq!(c.stats().write_errors, 1);
    }
}
