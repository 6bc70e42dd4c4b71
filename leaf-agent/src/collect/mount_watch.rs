//! Whether the mount table may have changed, without reading it.
//!
//! The kernel renders `/proc/self/mountinfo` afresh on every read: every
//! mount's path, options and (for cgroup v1 mounts) controller list. On a
//! leaf with a few dozen mounts that rendering was ~8 % of the leaf's CPU
//! (perf, 1 s tick), for a table that changes a few times a day. A
//! descriptor of the file open on procfs reports `POLLPRI` once after each
//! change of the mount namespace (proc(5), "/proc/pid/mounts"): polled with
//! no wait each tick (one cheap syscall), it says when to read again.
//!
//! Anything else (a fixture file in tests, a kernel without the event)
//! never reports `POLLPRI`, so the watch trusts `poll` only on procfs, and
//! even there asks for a read at least every [`MAX_QUIET`] ticks.

use std::fs::File;
use std::path::PathBuf;

use rustix::event::{PollFd, PollFlags, Timespec, poll};

/// Most ticks a watched table goes without a read, whatever `poll` says.
pub const MAX_QUIET: u32 = 60;

/// `PROC_SUPER_MAGIC`: the filesystem type of procfs (statfs(2)).
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// A poll-only descriptor of a mount table file.
#[derive(Debug)]
pub struct MountWatch {
    path: PathBuf,
    /// Open on procfs (else `None`: every tick reads).
    file: Option<File>,
    /// Opened (or tried) once.
    tried: bool,
    /// Ticks since the last read.
    quiet: u32,
}

impl MountWatch {
    /// A watch of `path` (opened at the first [`MountWatch::must_read`]).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            file: None,
            tried: false,
            quiet: 0,
        }
    }

    /// True when the table must be read this tick: the first time, after
    /// the kernel reported a change, when the file is not a procfs mount
    /// table, or [`MAX_QUIET`] ticks after the last read. The caller reads
    /// when told to (or when it holds no table), then calls
    /// [`MountWatch::read_done`].
    pub fn must_read(&mut self) -> bool {
        if !self.tried {
            self.tried = true;
            // Opened before the first read: a change after it is reported.
            self.file = File::open(&self.path).ok().filter(is_procfs);
            return true;
        }
        let Some(f) = self.file.as_ref() else {
            return true;
        };
        if self.quiet + 1 >= MAX_QUIET {
            return true;
        }
        let mut fds = [PollFd::new(f, PollFlags::PRI)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&zero)) {
            Ok(_) => fds[0]
                .revents()
                .intersects(PollFlags::PRI | PollFlags::ERR | PollFlags::NVAL),
            Err(_) => true,
        }
    }

    /// The table was read this tick (or the tick skipped it): counts the
    /// ticks since the last read.
    pub fn tick(&mut self, read: bool) {
        self.quiet = if read { 0 } else { self.quiet + 1 };
    }

    /// Whether `poll` is trusted (the file is open on procfs).
    pub fn is_watching(&self) -> bool {
        self.file.is_some()
    }
}

// `f_type` is an i64 on x86_64 but narrower on other targets.
#[allow(clippy::useless_conversion)]
fn is_procfs(f: &File) -> bool {
    rustix::fs::fstatfs(f).is_ok_and(|s| i64::from(s.f_type) == PROC_SUPER_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_file_is_read_every_tick() {
        let dir = std::env::temp_dir().join(format!("canopy-mount-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("mountinfo");
        std::fs::write(&path, "x").expect("write");
        let mut w = MountWatch::new(&path);
        for _ in 0..5 {
            assert!(w.must_read());
            w.tick(true);
        }
        assert!(!w.is_watching());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn the_real_table_is_read_at_first_then_when_it_changes_or_at_the_cap() {
        let mut w = MountWatch::new("/proc/self/mountinfo");
        assert!(w.must_read(), "the first tick reads");
        w.tick(true);
        if !w.is_watching() {
            return; // no procfs here: every tick reads, as tested above
        }
        // No mount changes in this test's namespace (a change in between
        // would only make a tick read early): quiet ticks skip the read,
        // and the cap forces one.
        let mut reads = 0;
        for _ in 0..(2 * MAX_QUIET) {
            let r = w.must_read();
            reads += usize::from(r);
            w.tick(r);
        }
        assert!(reads >= 2, "the cap forces a read every {MAX_QUIET} ticks");
        assert!(
            reads < 2 * MAX_QUIET as usize / 2,
            "quiet ticks skip the read: {reads}"
        );
    }

    #[test]
    fn a_missing_file_is_read_every_tick() {
        let mut w = MountWatch::new("/nonexistent/canopy/mountinfo");
        assert!(w.must_read());
        w.tick(true);
        assert!(w.must_read());
        assert!(!w.is_watching());
    }
}
