//! The write-ahead log and snapshots of the live store (file shell).
//!
//! Every store op is written to the current segment (one write per batch,
//! so a `kill -9` loses nothing already applied) before it is applied;
//! `fsync` follows the [`FsyncPolicy`]. A checkpoint writes a snapshot of
//! the live window and deletes the segments it covers, so the log stays
//! about as big as `checkpoint_bytes`.
//!
//! ```text
//! DIR/snapshot-<N>     the store before segment N (absent: empty store)
//! DIR/wal-<M>          segments M >= N, each self-contained (own dictionaries)
//! ```
//!
//! Recovery streams: the newest snapshot, then each segment record by
//! record, so memory stays the store's own size. A torn or corrupt last
//! record (a crash mid-write) is logged and cut off; a corrupt record in an
//! older segment loses the rest of that segment, with an error log.

pub mod record;

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::store::codec::{CodecError, crc32c, read_frame};
use crate::store::cold::ColdFiles;
use crate::store::mapped::MappedWriter;
use crate::store::{
    Journal, LiveStore, LiveStoreConfig, Op, PendingCheckpoint, SeriesHint, SnapshotCut, StoreError,
};

use crate::remote_write::receiver::{ReplayScratch, replay_body};
use record::{Decoder, Encoder, Item};

/// Largest WAL record accepted when reading.
const MAX_RECORD: usize = 256 << 20;

/// Errors opening or recovering the data directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// A file or directory operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The snapshot cannot be read.
    #[error("snapshot {path} is unreadable ({source}); move it aside to start from the log alone")]
    Snapshot {
        /// The snapshot file.
        path: PathBuf,
        /// Why.
        source: CodecError,
    },
}

/// When the log is flushed to stable storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FsyncPolicy {
    /// After each batch: nothing acknowledged is lost even if the machine fails.
    Always,
    /// Once per tick (default): a machine failure loses at most one tick;
    /// a process crash loses nothing.
    #[default]
    Tick,
    /// Never explicitly (the OS writes back): a process crash loses nothing.
    Never,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "tick" => Ok(FsyncPolicy::Tick),
            "never" => Ok(FsyncPolicy::Never),
            _ => Err(format!(
                "fsync policy {s:?}: expected \"always\", \"tick\" or \"never\""
            )),
        }
    }
}

/// Typed settings of the write-ahead log.
#[derive(Clone, Debug)]
pub struct WalConfig {
    /// The data directory.
    pub dir: PathBuf,
    /// When to fsync.
    pub fsync: FsyncPolicy,
    /// A new segment starts past this size (default 64 MiB).
    pub segment_bytes: u64,
    /// Checkpoint once this much log was written since the last one (default 256 MiB).
    pub checkpoint_bytes: u64,
    /// ...or when this much time passed, ms (default 15 min).
    pub checkpoint_interval_ms: i64,
    /// Sealed chunks go to a cold tier of files this size in `DIR/cold`
    /// (default 128 MiB); `None` keeps them in memory.
    pub cold_file_bytes: Option<u32>,
}

impl WalConfig {
    /// Defaults for `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        WalConfig {
            dir: dir.into(),
            fsync: FsyncPolicy::Tick,
            segment_bytes: 64 << 20,
            checkpoint_bytes: 256 << 20,
            checkpoint_interval_ms: 15 * 60 * 1000,
            cold_file_bytes: Some(crate::store::cold::DEFAULT_FILE_BYTES),
        }
    }
}

/// Counters of the log, shared with the `/metrics` endpoint.
#[derive(Debug, Default)]
pub struct WalStats {
    /// Bytes written to segments since start.
    pub bytes_written: AtomicU64,
    /// Bytes of segments currently on disk.
    pub bytes_on_disk: AtomicU64,
    /// fsync calls on segments and snapshots.
    pub fsyncs: AtomicU64,
    /// Checkpoints completed.
    pub checkpoints: AtomicU64,
    /// Write or sync failures.
    pub errors: AtomicU64,
    /// Ops replayed at start-up.
    pub replayed_ops: AtomicU64,
    /// Torn or corrupt records found at start-up.
    pub bad_records: AtomicU64,
}

/// What recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Index of the snapshot loaded, if any.
    pub snapshot: Option<u64>,
    /// Segments replayed.
    pub segments: usize,
    /// Ops replayed.
    pub ops: u64,
    /// Torn or corrupt records cut off.
    pub bad_records: u64,
}

/// The open log: implements [`Journal`] for a [`SharedStore`](crate::store::SharedStore).
#[derive(Debug)]
pub struct Wal {
    cfg: WalConfig,
    seg: u64,
    file: File,
    seg_bytes: u64,
    since_checkpoint: u64,
    last_checkpoint_ms: Option<i64>,
    dirty: bool,
    broken: bool,
    encoder: Encoder,
    frame: Vec<u8>,
    stats: Arc<WalStats>,
    /// When a failure was last logged (one line per minute, not a flood).
    last_error_log: Option<std::time::Instant>,
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> WalError + 'a {
    move |source| WalError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn seg_path(dir: &Path, i: u64) -> PathBuf {
    dir.join(format!("wal-{i:010}"))
}

fn snap_path(dir: &Path, i: u64) -> PathBuf {
    dir.join(format!("snapshot-{i:010}"))
}

/// Indexes of `prefix-<N>` files in `dir`, ascending.
fn list(dir: &Path, prefix: &str) -> Result<Vec<u64>, WalError> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).map_err(io_err("listing", dir))? {
        let e = e.map_err(io_err("listing", dir))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name.strip_prefix(prefix).and_then(|r| r.parse().ok()) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing directory", dir))
}

/// Replays one segment into `store`; cuts a bad tail when `last`.
fn replay_segment(
    path: &Path,
    last: bool,
    store: &mut LiveStore,
    rec: &mut Recovery,
) -> Result<(), WalError> {
    let f = File::open(path).map_err(io_err("opening", path))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut dec = Decoder::default();
    let mut bodies = ReplayScratch::default();
    let mut buf = Vec::new();
    let mut offset = 0u64;
    loop {
        let res = read_frame(&mut r, &mut buf, MAX_RECORD).and_then(|more| {
            if !more {
                return Ok(None);
            }
            // Refusals (limits, out of order) replay as they happened live.
            dec.decode_items(&buf, |item| match item {
                Item::Op(op) => {
                    let _ = op.apply(store);
                    Ok(1)
                }
                // Found in the store's index by its label bytes, as live.
                Item::Body(body) => replay_body(store, body, &record::REPLAY_LIMITS, &mut bodies)
                    .map_err(|_| CodecError::Malformed("unreadable remote_write body")),
            })
            .map(Some)
        });
        match res {
            Ok(None) => break,
            Ok(Some(n)) => {
                rec.ops += n as u64;
                offset += 8 + buf.len() as u64;
            }
            Err(CodecError::Io(e)) => return Err(io_err("reading", path)(e)),
            Err(e) => {
                rec.bad_records += 1;
                let len = fs::metadata(path).map(|m| m.len()).unwrap_or(offset);
                if last {
                    tracing::warn!(segment = %path.display(), offset, dropped_bytes = len - offset, error = %e,
                        "torn or corrupt last record in the write-ahead log (a crash mid-write); cutting it off");
                    OpenOptions::new()
                        .write(true)
                        .open(path)
                        .and_then(|f| f.set_len(offset))
                        .map_err(io_err("truncating", path))?;
                } else {
                    tracing::error!(segment = %path.display(), offset, lost_bytes = len - offset, error = %e,
                        "corrupt record inside the write-ahead log; the rest of this segment is lost");
                }
                break;
            }
        }
    }
    Ok(())
}

impl Wal {
    /// Opens (creating if needed) the data directory, rebuilds the store
    /// from the newest snapshot and the log, and starts a new segment.
    pub fn open(
        cfg: WalConfig,
        store_cfg: LiveStoreConfig,
    ) -> Result<(LiveStore, Wal, Recovery), WalError> {
        let dir = cfg.dir.clone();
        fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
        for e in fs::read_dir(&dir)
            .map_err(io_err("listing", &dir))?
            .flatten()
        {
            if e.file_name().to_str().is_some_and(|n| n.ends_with(".tmp")) {
                let _ = fs::remove_file(e.path());
            }
        }
        let cold = match cfg.cold_file_bytes {
            Some(bytes) => {
                let p = dir.join("cold");
                Some(ColdFiles::open(&p, bytes).map_err(io_err("opening the cold tier in", &p))?)
            }
            None => None,
        };
        let mut rec = Recovery::default();
        let snaps = list(&dir, "snapshot-")?;
        let (mut store, base) = match snaps.last() {
            Some(&n) => {
                let p = snap_path(&dir, n);
                let f = File::open(&p).map_err(io_err("opening", &p))?;
                let mut r = BufReader::with_capacity(1 << 20, f);
                let s = LiveStore::read_snapshot_with(store_cfg, cold, &mut r)
                    .map_err(|source| WalError::Snapshot { path: p, source })?;
                rec.snapshot = Some(n);
                (s, n)
            }
            None => {
                let mut s = LiveStore::new(store_cfg);
                if let Some(c) = cold {
                    s.attach_cold(c);
                }
                (s, 0)
            }
        };
        let segs = list(&dir, "wal-")?;
        let mut on_disk = 0;
        for (i, &n) in segs.iter().enumerate() {
            let p = seg_path(&dir, n);
            if n < base {
                // Covered by the snapshot (a checkpoint interrupted before cleanup).
                let _ = fs::remove_file(&p);
                continue;
            }
            replay_segment(&p, i + 1 == segs.len(), &mut store, &mut rec)?;
            rec.segments += 1;
            on_disk += fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        }
        for &n in &snaps[..snaps.len().saturating_sub(1)] {
            let _ = fs::remove_file(snap_path(&dir, n));
        }
        let seg = segs.last().map_or(base, |&l| (l + 1).max(base));
        let p = seg_path(&dir, seg);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map_err(io_err("creating", &p))?;
        sync_dir(&dir)?;
        let stats = Arc::new(WalStats::default());
        stats.bytes_on_disk.store(on_disk, Ordering::Relaxed);
        stats.replayed_ops.store(rec.ops, Ordering::Relaxed);
        stats.bad_records.store(rec.bad_records, Ordering::Relaxed);
        tracing::info!(dir = %dir.display(), snapshot = ?rec.snapshot, segments = rec.segments,
            ops = rec.ops, bad_records = rec.bad_records, series = store.stats().series,
            "live store recovered from the data directory");
        let wal = Wal {
            cfg,
            seg,
            file,
            seg_bytes: 0,
            since_checkpoint: on_disk,
            last_checkpoint_ms: None,
            dirty: false,
            broken: false,
            encoder: Encoder::default(),
            frame: Vec::new(),
            stats,
            last_error_log: None,
        };
        Ok((store, wal, rec))
    }

    /// The log's counters (shared; they keep updating).
    pub fn stats(&self) -> Arc<WalStats> {
        Arc::clone(&self.stats)
    }

    fn fail(&mut self, what: &str, e: std::io::Error) -> StoreError {
        let total = self.stats.errors.fetch_add(1, Ordering::Relaxed) + 1;
        self.broken = true;
        let now = std::time::Instant::now();
        if self
            .last_error_log
            .is_none_or(|t| now.duration_since(t).as_secs() >= 60)
        {
            self.last_error_log = Some(now);
            tracing::error!(segment = self.seg, error = %e, errors_total = total,
                "write-ahead log {what} failed; ops are refused until it works again");
        }
        StoreError::Journal {
            reason: format!("{what} segment {}: {e}", self.seg),
        }
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if self.dirty {
            self.file
                .sync_data()
                .map_err(|e| self.fail("fsync of", e))?;
            self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
            self.dirty = false;
        }
        Ok(())
    }

    /// Closes the current segment and starts the next one.
    fn rotate(&mut self) -> Result<(), StoreError> {
        if self.cfg.fsync != FsyncPolicy::Never {
            self.sync()?;
        }
        let next = self.seg + 1;
        let p = seg_path(&self.cfg.dir, next);
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p)
            .map_err(|e| self.fail("creating", e))?;
        self.file = f;
        self.seg = next;
        self.seg_bytes = 0;
        self.encoder.reset();
        self.broken = false;
        Ok(())
    }

    /// Starts a checkpoint: a new segment and a cut of `store`, under the
    /// caller's locks; the returned job writes the snapshot and deletes
    /// what it covers without them.
    fn checkpoint(&mut self, store: &LiveStore) -> Result<PendingCheckpoint, StoreError> {
        self.rotate()?;
        let n = self.seg;
        let dir = self.cfg.dir.clone();
        // Ingest waits for the cut (taken under the store's lock).
        let started = std::time::Instant::now();
        let cut = store.snapshot_cut();
        let cut_us = started.elapsed().as_micros() as u64;
        let stats = Arc::clone(&self.stats);
        self.since_checkpoint = 0;
        self.last_checkpoint_ms = Some(store.now_ms());
        Ok(Box::new(move || {
            write_checkpoint(&dir, n, &cut, cut_us, &stats)
        }))
    }
}

/// Writes snapshot `n` from `cut` (taken in `cut_us` µs), then deletes the
/// segments and snapshots it covers. Runs with no lock held.
fn write_checkpoint(
    dir: &Path,
    n: u64,
    cut: &SnapshotCut,
    cut_us: u64,
    stats: &WalStats,
) -> Result<(), StoreError> {
    let tmp = dir.join(format!("snapshot-{n:010}.tmp"));
    let res = (|| -> std::io::Result<u64> {
        let mut w = MappedWriter::with_capacity(1 << 20, File::create(&tmp)?);
        let size = cut.write(&mut w)?;
        let f = w.into_inner()?;
        f.sync_all()?;
        fs::rename(&tmp, snap_path(dir, n))?;
        File::open(dir)?.sync_all()?;
        Ok(size)
    })();
    let size = match res {
        Ok(s) => s,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            stats.errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(error = %e, "checkpoint failed; the log keeps growing until one succeeds");
            return Err(StoreError::Journal {
                reason: format!("checkpoint: {e}"),
            });
        }
    };
    stats.fsyncs.fetch_add(2, Ordering::Relaxed);
    let mut freed = 0u64;
    for old in list(dir, "wal-").unwrap_or_default() {
        if old < n {
            let p = seg_path(dir, old);
            freed += fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            let _ = fs::remove_file(p);
        }
    }
    for old in list(dir, "snapshot-").unwrap_or_default() {
        if old < n {
            let _ = fs::remove_file(snap_path(dir, old));
        }
    }
    let _ = stats
        .bytes_on_disk
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
            Some(b.saturating_sub(freed))
        });
    stats.checkpoints.fetch_add(1, Ordering::Relaxed);
    let (cut_bytes, cut_mapped) = cut.buffer_bytes();
    tracing::info!(
        snapshot = n,
        bytes = size,
        series = cut.series(),
        cut_us,
        cut_bytes,
        cut_mapped,
        "checkpoint written"
    );
    Ok(())
}

impl Journal for Wal {
    fn log(&mut self, ops: &[Op]) -> Result<(), StoreError> {
        self.log_hinted(ops, &[])
    }

    fn log_hinted(&mut self, ops: &[Op], hints: &[SeriesHint]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        self.write_record(|enc, frame| enc.encode_hinted(ops, hints, frame))
    }

    fn log_raw_body(&mut self, body: &[u8]) -> Result<bool, StoreError> {
        // Bodies past what replay decodes take the op encoding.
        if body.len() > record::MAX_LOGGED_BODY
            || snap::raw::decompress_len(body).map_or(true, |n| n > record::MAX_LOGGED_DECODED)
        {
            return Ok(false);
        }
        self.write_record(|enc, frame| enc.encode_body(body, frame))?;
        Ok(true)
    }

    fn tick(&mut self, store: &LiveStore) -> Result<Option<PendingCheckpoint>, StoreError> {
        if self.cfg.fsync == FsyncPolicy::Tick {
            self.sync()?;
        }
        let now = store.now_ms();
        let last = *self.last_checkpoint_ms.get_or_insert(now);
        let due = self.since_checkpoint >= self.cfg.checkpoint_bytes
            || (now - last >= self.cfg.checkpoint_interval_ms && self.since_checkpoint > 0);
        if due {
            return self.checkpoint(store).map(Some);
        }
        Ok(None)
    }

    fn checkpoint_failed(&mut self) {
        self.since_checkpoint = self.since_checkpoint.max(self.cfg.checkpoint_bytes);
    }
}

impl Wal {
    /// Writes one record whose payload `encode` appends (then syncs or
    /// rotates per the config).
    fn write_record(
        &mut self,
        encode: impl FnOnce(&mut Encoder, &mut Vec<u8>),
    ) -> Result<(), StoreError> {
        if self.broken {
            // A failed write may have left dictionary entries unwritten.
            self.rotate()?;
        }
        // The record is encoded straight after its 8-byte header (length,
        // CRC-32C), filled in once the payload is known: no second buffer.
        self.frame.clear();
        self.frame.extend_from_slice(&[0; 8]);
        encode(&mut self.encoder, &mut self.frame);
        let payload = self.frame.get(8..).unwrap_or_default();
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let crc = crc32c(payload);
        if let Some(head) = self.frame.get_mut(..8) {
            head[..4].copy_from_slice(&len.to_le_bytes());
            head[4..].copy_from_slice(&crc.to_le_bytes());
        }
        if let Err(e) = self.file.write_all(&self.frame) {
            return Err(self.fail("write to", e));
        }
        let n = self.frame.len() as u64;
        self.seg_bytes += n;
        self.since_checkpoint += n;
        self.dirty = true;
        self.stats.bytes_written.fetch_add(n, Ordering::Relaxed);
        self.stats.bytes_on_disk.fetch_add(n, Ordering::Relaxed);
        if self.cfg.fsync == FsyncPolicy::Always {
            self.sync()?;
        }
        if self.seg_bytes >= self.cfg.segment_bytes {
            self.rotate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
