//! `statvfs(2)` off the sampler's thread, with a timeout: a hung NFS or
//! Lustre mount blocks the calling thread in the kernel (uninterruptible
//! sleep) until the server answers, possibly forever, so the call runs on a
//! worker thread. When it does not answer in time, the mount is marked
//! stale, that worker is abandoned (it exits once the call returns) and the
//! next mount gets a fresh worker. A stale mount is not asked again until
//! its hung call returns, as node_exporter does with its stuck mounts.
//!
//! Race-free hand-over: a worker clears its mount from the stale set and
//! sends the answer while holding the set's lock; the caller, on timeout,
//! takes the lock, looks for a late answer, and only then marks the mount
//! stale. So a mount is never left marked after its call returned.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What `statvfs` says about one filesystem, in bytes and inodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStat {
    /// `f_blocks x f_frsize`.
    pub size_bytes: u64,
    /// `f_bfree x f_frsize` (reserved blocks included).
    pub free_bytes: u64,
    /// `f_bavail x f_frsize` (what unprivileged users can still write).
    pub avail_bytes: u64,
    /// `f_files`: inodes.
    pub files: u64,
    /// `f_ffree`: free inodes.
    pub files_free: u64,
}

impl FsStat {
    /// From raw `statvfs` fields; the fragment size is the unit of the block
    /// counts (`f_bsize` when a filesystem reports a zero `f_frsize`).
    pub fn from_raw(frsize: u64, bsize: u64, blocks: u64, bfree: u64, bavail: u64) -> Self {
        let unit = if frsize == 0 { bsize } else { frsize };
        FsStat {
            size_bytes: blocks.saturating_mul(unit),
            free_bytes: bfree.saturating_mul(unit),
            avail_bytes: bavail.saturating_mul(unit),
            files: 0,
            files_free: 0,
        }
    }
}

/// The real `statvfs(2)`, through rustix (no unsafe in Canopy).
pub fn statvfs(path: &Path) -> io::Result<FsStat> {
    let s = rustix::fs::statvfs(path).map_err(io::Error::from)?;
    Ok(FsStat {
        files: s.f_files,
        files_free: s.f_ffree,
        ..FsStat::from_raw(s.f_frsize, s.f_bsize, s.f_blocks, s.f_bfree, s.f_bavail)
    })
}

/// The function that stats one path (the real one, or a fake in tests).
pub type StatFn = Arc<dyn Fn(&Path) -> io::Result<FsStat> + Send + Sync>;

/// The answer for one path.
#[derive(Debug)]
pub enum StatOutcome {
    /// `statvfs` answered.
    Done(FsStat),
    /// `statvfs` failed (permission, gone, I/O error...).
    Failed(io::Error),
    /// No answer within the timeout: the mount is now stale.
    TimedOut,
    /// Still stale from an earlier hung call: not asked.
    Stale,
    /// Too many calls are already hung: not asked.
    TooManyHung,
}

struct Worker {
    tx: Sender<PathBuf>,
    rx: Receiver<io::Result<FsStat>>,
}

/// Runs `statvfs` calls on a worker thread, one at a time, each with a
/// timeout; see the module docs.
pub struct StatPool {
    stat: StatFn,
    timeout: Duration,
    max_hung: usize,
    worker: Option<Worker>,
    stale: Arc<Mutex<HashSet<PathBuf>>>,
}

impl std::fmt::Debug for StatPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatPool")
            .field("timeout", &self.timeout)
            .field("stale", &self.stale_paths())
            .finish()
    }
}

impl StatPool {
    /// A pool calling `stat`, waiting `timeout` per call, with at most
    /// `max_hung` abandoned threads at a time.
    pub fn new(stat: StatFn, timeout: Duration, max_hung: usize) -> Self {
        StatPool {
            stat,
            timeout,
            max_hung: max_hung.max(1),
            worker: None,
            stale: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// The paths whose call is still hung.
    pub fn stale_paths(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self
            .stale
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        v.sort();
        v
    }

    fn spawn(&self) -> io::Result<Worker> {
        let (req_tx, req_rx) = mpsc::channel::<PathBuf>();
        let (res_tx, res_rx) = mpsc::channel();
        let stat = Arc::clone(&self.stat);
        let stale = Arc::clone(&self.stale);
        std::thread::Builder::new()
            .name("canopy-statvfs".into())
            .spawn(move || {
                while let Ok(path) = req_rx.recv() {
                    let r = stat(&path);
                    let mut set = stale.lock().unwrap_or_else(PoisonError::into_inner);
                    set.remove(&path);
                    // The caller gave up on this worker: exit.
                    if res_tx.send(r).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Worker {
            tx: req_tx,
            rx: res_rx,
        })
    }

    /// Stats `path`, waiting at most the timeout.
    pub fn stat(&mut self, path: &Path) -> StatOutcome {
        let stale_count = {
            let set = self.stale.lock().unwrap_or_else(PoisonError::into_inner);
            if set.contains(path) {
                return StatOutcome::Stale;
            }
            set.len()
        };
        if stale_count >= self.max_hung {
            return StatOutcome::TooManyHung;
        }
        if self.worker.is_none() {
            match self.spawn() {
                Ok(w) => self.worker = Some(w),
                Err(e) => return StatOutcome::Failed(e),
            }
        }
        let Some(w) = self.worker.as_ref() else {
            return StatOutcome::Failed(io::Error::other("no statvfs worker"));
        };
        if w.tx.send(path.to_path_buf()).is_err() {
            self.worker = None;
            return StatOutcome::Failed(io::Error::other("statvfs worker exited"));
        }
        match w.rx.recv_timeout(self.timeout) {
            Ok(r) => to_outcome(r),
            Err(RecvTimeoutError::Disconnected) => {
                self.worker = None;
                StatOutcome::Failed(io::Error::other("statvfs worker exited"))
            }
            Err(RecvTimeoutError::Timeout) => {
                let mut set = self.stale.lock().unwrap_or_else(PoisonError::into_inner);
                // The answer may have come in just now (sent under the lock).
                if let Ok(r) = w.rx.try_recv() {
                    return to_outcome(r);
                }
                set.insert(path.to_path_buf());
                drop(set);
                // Abandon the hung thread; it exits when its call returns.
                self.worker = None;
                StatOutcome::TimedOut
            }
        }
    }
}

fn to_outcome(r: io::Result<FsStat>) -> StatOutcome {
    match r {
        Ok(s) => StatOutcome::Done(s),
        Err(e) => StatOutcome::Failed(e),
    }
}
