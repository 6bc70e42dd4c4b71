//! Filesystem usage: `mountinfo` fixtures (this machine's, and a compute
//! node's written in the kernel's format), a hung mount through a fake
//! `statvfs`, and the real `statvfs` of `/` against `df`.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use super::filesystem::{
    FilesystemCollector, FilesystemOptions, FsFilter, is_local_fstype, parse_mountinfo,
    unescape_octal,
};
use super::fs_worker::FsStat;
use super::*;
use crate::TestDir;

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mountinfo")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn value(obs: &[Observation], name: &str, mountpoint: &str) -> Option<f64> {
    let hits: Vec<f64> = obs
        .iter()
        .filter(|o| o.labels.name() == name && o.labels.get("mountpoint") == Some(mountpoint))
        .map(|o| o.value)
        .collect();
    assert!(
        hits.len() <= 1,
        "{name} {mountpoint} matched {}",
        hits.len()
    );
    hits.first().copied()
}

fn errors(obs: &[Observation], kind: &str) -> Option<f64> {
    obs.iter()
        .find(|o| {
            o.labels.name() == "canopy_leaf_collector_errors_total"
                && o.labels.get("collector") == Some("filesystem")
                && o.labels.get("kind") == Some(kind)
        })
        .map(|o| o.value)
}

#[test]
fn filesystem_this_hosts_mountinfo_keeps_only_real_filesystems() {
    let mounts = parse_mountinfo(&fixture("this-host.mountinfo")).unwrap();
    assert_eq!(mounts.len(), 20);
    let root = mounts.iter().find(|m| m.mountpoint == "/").unwrap();
    assert_eq!(
        (root.fstype.as_str(), root.source.as_str()),
        ("ext4", "/dev/vda")
    );
    let kept: Vec<String> = FsFilter::default()
        .select(mounts)
        .into_iter()
        .map(|m| m.mountpoint)
        .collect();
    // proc, sysfs, devtmpfs, devpts, cgroup*, and /dev, /sys are left out;
    // tmpfs is kept (node_exporter does the same).
    assert_eq!(kept, ["/", "/mnt/sandboxing/model_tools_env/v1/python"]);
}

#[test]
fn filesystem_compute_node_mountinfo_unescapes_and_filters() {
    let mounts = parse_mountinfo(&fixture("hpc-node.mountinfo")).unwrap();
    let sel = FsFilter::default().select(mounts);
    let kept: Vec<&str> = sel.iter().map(|m| m.mountpoint.as_str()).collect();
    assert_eq!(
        kept,
        [
            "/",
            "/boot/efi",
            "/gpfs/projects",
            "/home",
            "/lustre/scratch",
            "/mnt/user data",
            "/run",
            "/scratch\tlocal",
            "/srv/projects-a",
            "/tmp",
        ]
    );
    let by = |p: &str| sel.iter().find(|m| m.mountpoint == p).unwrap();
    assert_eq!(by("/lustre/scratch").fstype, "lustre");
    assert_eq!(
        by("/lustre/scratch").source,
        "10.2.0.1@o2ib:10.2.0.2@o2ib:/scratch"
    );
    assert_eq!(by("/home").fstype, "nfs4");
    assert_eq!(by("/mnt/user data").fstype, "fuse.sshfs");
    // /tmp was mounted over: the tmpfs on top hides the ext4 below.
    assert_eq!(by("/tmp").fstype, "tmpfs");
    assert!(sel.iter().all(|m| !m.read_only));
    // A configurable exclude: tmpfs and /boot out.
    let mut f = FsFilter::default();
    f.exclude_fstypes.push("tmpfs".into());
    f.exclude_mountpoints.push("/boot".into());
    let mounts = parse_mountinfo(&fixture("hpc-node.mountinfo")).unwrap();
    let kept: Vec<String> = f.select(mounts).into_iter().map(|m| m.mountpoint).collect();
    assert!(
        !kept
            .iter()
            .any(|m| m == "/run" || m == "/tmp" || m == "/boot/efi")
    );
    assert!(kept.iter().any(|m| m == "/home"));
    // Read-only comes from the per-mount options.
    let ro = parse_mountinfo(&fixture("hpc-node.mountinfo")).unwrap();
    assert!(
        ro.iter()
            .find(|m| m.mountpoint == "/apps")
            .unwrap()
            .read_only
    );
}

#[test]
fn filesystem_mountinfo_garbage_is_an_error_not_a_panic() {
    assert_eq!(unescape_octal(r"a\040b\134c\011"), "a b\\c\t");
    assert_eq!(unescape_octal(r"trail\04"), r"trail\04");
    assert_eq!(unescape_octal(r"\9999\"), r"\9999\");
    assert_eq!(unescape_octal("plain"), "plain");
    for bad in [
        "1 2 3:4 / /x rw shared:1 ext4 /dev/a rw",
        "1 2 3:4 / /x",
        "1 2 3:4 / /x rw - ext4",
    ] {
        assert!(parse_mountinfo(bad).is_err(), "{bad:?}");
    }
    // A mount with many optional fields, and an empty line.
    let ok =
        parse_mountinfo("\n9 1 0:9 / /d rw shared:1 master:2 propagate_from:3 - xfs /dev/x rw\n")
            .unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].fstype, "xfs");
}

/// A fake `statvfs`: `/lustre/scratch` hangs until released, `/home` is
/// refused, the rest answer 1 MiB.
struct FakeStat {
    release: Mutex<mpsc::Receiver<()>>,
    lustre_calls: AtomicU32,
}

fn proc_with_mountinfo(dir: &TestDir) -> PathBuf {
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(proc_root.join("self")).unwrap();
    std::fs::write(
        proc_root.join("self/mountinfo"),
        fixture("hpc-node.mountinfo"),
    )
    .unwrap();
    proc_root
}

#[test]
fn filesystem_hung_mount_is_marked_stale_and_does_not_block_the_tick() {
    let dir = TestDir::new();
    let proc_root = proc_with_mountinfo(&dir);
    let (release_tx, release_rx) = mpsc::channel();
    let fake = Arc::new(FakeStat {
        release: Mutex::new(release_rx),
        lustre_calls: AtomicU32::new(0),
    });
    let f2 = Arc::clone(&fake);
    let stat = Arc::new(move |p: &Path| -> io::Result<FsStat> {
        if p == Path::new("/lustre/scratch") {
            f2.lustre_calls.fetch_add(1, Ordering::SeqCst);
            // Blocks like a hung Lustre client until the test releases it.
            let _ = f2.release.lock().unwrap().recv();
        }
        if p == Path::new("/home") {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        Ok(FsStat {
            files: 10,
            files_free: 4,
            ..FsStat::from_raw(4096, 4096, 256, 128, 64)
        })
    });
    let opts = FilesystemOptions {
        timeout: Duration::from_millis(50),
        ..FilesystemOptions::default()
    };
    let mut c = FilesystemCollector::with_stat("n1", &proc_root, opts, stat);

    let mut first = Vec::new();
    c.collect(&mut first).unwrap();
    assert_eq!(
        value(
            &first,
            "canopy_node_filesystem_device_error",
            "/lustre/scratch"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &first,
            "canopy_node_filesystem_size_bytes",
            "/lustre/scratch"
        ),
        None
    );
    // The mounts after the hung one were still asked, on a fresh worker.
    assert_eq!(
        value(&first, "canopy_node_filesystem_size_bytes", "/tmp"),
        Some(1_048_576.0)
    );
    assert_eq!(
        value(&first, "canopy_node_filesystem_avail_bytes", "/tmp"),
        Some(262_144.0)
    );
    assert_eq!(
        value(&first, "canopy_node_filesystem_files_free", "/tmp"),
        Some(4.0)
    );
    assert_eq!(
        value(&first, "canopy_node_filesystem_device_error", "/home"),
        Some(1.0)
    );
    assert_eq!(errors(&first, "stale"), Some(1.0));
    assert_eq!(errors(&first, "statvfs"), Some(1.0));
    assert_eq!(c.stale_paths(), [PathBuf::from("/lustre/scratch")]);

    // Still hung: not asked again, not counted again; the refusal is.
    let mut second = Vec::new();
    c.collect(&mut second).unwrap();
    assert_eq!(fake.lustre_calls.load(Ordering::SeqCst), 1);
    assert_eq!(errors(&second, "stale"), Some(1.0));
    assert_eq!(errors(&second, "statvfs"), Some(2.0));
    assert_eq!(
        value(
            &second,
            "canopy_node_filesystem_device_error",
            "/lustre/scratch"
        ),
        Some(1.0)
    );

    // The server answers: the hung call returns, the mount is asked again.
    release_tx.send(()).unwrap();
    let mut waited = 0;
    while !c.stale_paths().is_empty() {
        assert!(
            waited < 500,
            "the released call never cleared the stale mark"
        );
        std::thread::sleep(Duration::from_millis(10));
        waited += 1;
    }
    drop(release_tx); // Later calls return at once.
    let mut third = Vec::new();
    c.collect(&mut third).unwrap();
    assert_eq!(
        value(
            &third,
            "canopy_node_filesystem_size_bytes",
            "/lustre/scratch"
        ),
        Some(1_048_576.0)
    );
    assert_eq!(
        value(
            &third,
            "canopy_node_filesystem_device_error",
            "/lustre/scratch"
        ),
        Some(0.0)
    );
    assert_eq!(fake.lustre_calls.load(Ordering::SeqCst), 2);
}

#[test]
fn filesystem_unreadable_mountinfo_degrades_with_a_count() {
    let dir = TestDir::new();
    let mut c = FilesystemCollector::new("n1", dir.path(), FilesystemOptions::default());
    let mut out = Vec::new();
    assert!(c.collect(&mut out).is_err());
    assert_eq!(errors(&out, "mountinfo"), Some(1.0));
    assert!(
        !out.iter()
            .any(|o| o.labels.name().starts_with("canopy_node_filesystem"))
    );
}

fn df(args: &[&str]) -> u64 {
    let out = std::process::Command::new("df")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("`df` (coreutils) is needed by this test: {e}"));
    assert!(out.status.success(), "df {args:?}: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn filesystem_real_statvfs_of_root_matches_df() {
    let mut c = FilesystemCollector::new("n1", Path::new("/proc"), FilesystemOptions::default());
    let mut out = Vec::new();
    c.collect(&mut out).unwrap();
    let size = value(&out, "canopy_node_filesystem_size_bytes", "/").expect("/ is reported");
    assert_eq!(size, df(&["-B1", "--output=size", "/"]) as f64);
    let files = value(&out, "canopy_node_filesystem_files", "/").unwrap();
    assert_eq!(files, df(&["--output=itotal", "/"]) as f64);
    assert_eq!(
        value(&out, "canopy_node_filesystem_device_error", "/"),
        Some(0.0)
    );
    // No pseudo filesystem leaks through.
    assert!(out.iter().all(|o| {
        !matches!(
            o.labels.get("fstype"),
            Some("proc" | "sysfs" | "cgroup" | "cgroup2" | "devpts")
        )
    }));
}

#[test]
fn only_filesystems_that_cannot_hang_are_asked_inline() {
    for local in ["ext4", "xfs", "btrfs", "tmpfs", "vfat"] {
        assert!(is_local_fstype(local), "{local}");
    }
    // Network, cluster and FUSE filesystems, and anything unknown, keep
    // the worker thread and its timeout.
    for remote in [
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "cifs",
        "ceph",
        "fuse.sshfs",
        "fuse",
        "beegfs",
        "9p",
        "overlay",
        "",
        "ext4x",
    ] {
        assert!(!is_local_fstype(remote), "{remote}");
    }
}

#[test]
fn a_changed_mountinfo_is_parsed_again() {
    let dir = TestDir::new();
    let proc_root = proc_with_mountinfo(&dir);
    let stat =
        Arc::new(|_: &Path| -> io::Result<FsStat> { Ok(FsStat::from_raw(4096, 4096, 8, 4, 2)) });
    let mut c =
        FilesystemCollector::with_stat("n1", &proc_root, FilesystemOptions::default(), stat);
    let points = |c: &mut FilesystemCollector| {
        let mut out = Vec::new();
        c.collect(&mut out).unwrap();
        let mut p: Vec<String> = out
            .iter()
            .filter(|o| o.labels.name() == "canopy_node_filesystem_size_bytes")
            .filter_map(|o| o.labels.get("mountpoint").map(str::to_string))
            .collect();
        p.sort();
        p
    };
    let before = points(&mut c);
    assert!(before.contains(&"/home".to_string()), "{before:?}");
    assert_eq!(points(&mut c), before, "unchanged text, same mounts");
    // /home is unmounted: its line goes.
    let text: String = fixture("hpc-node.mountinfo")
        .lines()
        .filter(|l| !l.contains(" /home "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(proc_root.join("self/mountinfo"), text).unwrap();
    let after = points(&mut c);
    assert!(!after.contains(&"/home".to_string()), "{after:?}");
    assert_eq!(after.len() + 1, before.len());
}

/// The sampler's keyed path reads the mounts once every `every_ticks`
/// ticks and repeats the last values in between: no series is retired and
/// no value moves until the next read.
#[test]
fn keyed_ticks_between_reads_repeat_the_last_values() {
    use canopy_proto::codec::{BoundsPolicy, Sender};
    let dir = TestDir::new();
    let proc_root = proc_with_mountinfo(&dir);
    let calls = Arc::new(AtomicU32::new(0));
    let c2 = Arc::clone(&calls);
    // Every call sees a larger filesystem, so a read shows in the values.
    let stat = Arc::new(move |_: &Path| -> io::Result<FsStat> {
        let n = u64::from(c2.fetch_add(1, Ordering::SeqCst));
        Ok(FsStat::from_raw(4096, 4096, 8 + n, 4, 2))
    });
    // A generous timeout: a slow worker under load must not turn a read
    // into a stale mark (the test counts reads, not timeouts).
    let opts = FilesystemOptions {
        every_ticks: 3,
        timeout: Duration::from_secs(10),
        ..FilesystemOptions::default()
    };
    let mut c = FilesystemCollector::with_stat("n1", &proc_root, opts, stat);
    let mut tx = Sender::new(BoundsPolicy::default());
    let src = tx.source("n1", 1000);
    // Per tick: statvfs calls so far, and the table's (labels, value).
    let mut ticks: Vec<(u32, Vec<(String, f64)>)> = Vec::new();
    for t in 0..7i64 {
        super::tests::keyed_tick(&mut tx, src, 1000 * (t + 1), &mut c, |table| {
            let mut rows: Vec<(String, f64)> = table
                .iter()
                .map(|(_, e)| (format!("{:?}", e.labels), e.value))
                .collect();
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            ticks.push((calls.load(Ordering::SeqCst), rows));
        });
    }
    let mounts = ticks[0].0;
    assert!(mounts > 0, "the fixture has mounts to ask");
    let asked: Vec<u32> = ticks.iter().map(|t| t.0 / mounts).collect();
    assert_eq!(asked, [1, 1, 1, 2, 2, 2, 3], "read at ticks 0, 3 and 6");
    for t in [1, 2, 4, 5] {
        assert_eq!(ticks[t].1, ticks[t - 1].1, "tick {t} repeats");
    }
    for t in [3, 6] {
        assert_eq!(
            ticks[t].1.len(),
            ticks[t - 1].1.len(),
            "tick {t}: same series"
        );
        assert_ne!(ticks[t].1, ticks[t - 1].1, "tick {t} read anew");
    }
}
