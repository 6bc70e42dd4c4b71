//! Says whether any of a set of directories gained or lost an entry since
//! the last look (inotify), so the job directory listings are made again
//! only then instead of every tick.
//!
//! Slurm makes and removes its job cgroups with `mkdir`/`rmdir`, which
//! inotify reports on the parent directory of cgroupfs (v1 and v2) as on
//! any file system; the parent's mtime does not change, so it cannot be
//! used instead. Checking costs one non-blocking `read` a tick. Events are
//! not parsed: any event (an entry made, removed or moved, a watched
//! directory gone, the queue overflowed) means "list again".

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

/// Most directories watched; past it, listings are made every tick again.
pub const MAX_WATCHES: usize = 1024;

/// One inotify instance watching directories for entries made or removed.
#[derive(Debug)]
pub struct DirWatch {
    fd: OwnedFd,
    watches: usize,
    buf: Vec<u8>,
}

impl DirWatch {
    /// A watcher with nothing watched; `None` when inotify is unavailable
    /// (then the caller lists every tick, as without it).
    pub fn new() -> Option<Self> {
        match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
            Ok(fd) => Some(Self {
                fd,
                watches: 0,
                buf: vec![0; 4096],
            }),
            Err(e) => {
                tracing::info!(error = %e, "no inotify: job directories are listed every tick");
                None
            }
        }
    }

    /// Watches `dir` (again: the kernel keeps one watch per directory);
    /// false when it cannot be watched (missing, not a directory, the
    /// limit reached), so a listing of it must not be reused.
    pub fn watch(&mut self, dir: &Path) -> bool {
        if self.watches >= MAX_WATCHES {
            return false;
        }
        let mask = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        match inotify::add_watch(&self.fd, dir, mask) {
            Ok(_) => {
                self.watches += 1;
                true
            }
            Err(_) => false,
        }
    }

    /// Forgets the count of watches (a full relisting re-adds them).
    pub fn reset_count(&mut self) {
        self.watches = 0;
    }

    /// Whether anything happened in a watched directory since the last
    /// call (drains the events). An error other than "nothing queued"
    /// counts as a change.
    pub fn changed(&mut self) -> io::Result<bool> {
        let mut any = false;
        loop {
            match rustix::io::read(&self.fd, &mut self.buf[..]) {
                Ok(0) => return Ok(any),
                Ok(_) => any = true,
                Err(rustix::io::Errno::AGAIN) => return Ok(any),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes the directory at the end of the test.
    struct Root(std::path::PathBuf);
    impl Root {
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn sees_directories_made_and_removed_below_a_watched_one() {
        let root = std::env::temp_dir().join(format!("canopy-dirwatch-{}", std::process::id()));
        std::fs::create_dir_all(&root).expect("tmp");
        let dir = Root(root);
        let mut w = DirWatch::new().expect("inotify on Linux");
        assert!(w.watch(dir.path()));
        assert!(
            !w.watch(&dir.path().join("missing")),
            "missing: not watched"
        );
        assert!(!w.changed().expect("read"), "nothing yet");
        std::fs::create_dir(dir.path().join("job_1")).expect("mkdir");
        assert!(w.changed().expect("read"), "mkdir seen");
        assert!(!w.changed().expect("read"), "drained");
        // A file written inside an unwatched subdirectory is not a change.
        std::fs::write(dir.path().join("job_1").join("cpuacct.usage"), "1").expect("write");
        assert!(!w.changed().expect("read"));
        std::fs::remove_dir_all(dir.path().join("job_1")).expect("rmdir");
        assert!(w.changed().expect("read"), "rmdir seen");
    }
}
