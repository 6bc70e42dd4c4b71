//! Parser tests on fixture copies of real files (`tests/data/`), and on garbage.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::error::LeafError;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn text(rel: &str) -> String {
    std::fs::read_to_string(data(rel)).unwrap()
}

/// The value of the one observation matching `name` and `labels`.
fn value(obs: &[Observation], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let hits: Vec<f64> = obs
        .iter()
        .filter(|o| {
            o.labels.name() == name && labels.iter().all(|(k, v)| o.labels.get(k) == Some(v))
        })
        .map(|o| o.value)
        .collect();
    assert!(hits.len() <= 1, "{name} {labels:?} matched {}", hits.len());
    hits.first().copied()
}

#[test]
fn proc_stat_real_fixture() {
    let st = stat::parse_stat(&text("proc/stat")).unwrap();
    assert_eq!(st.cpu_ticks, [22370, 0, 4678, 74979, 283, 0, 49, 15]);
    assert_eq!(st.cpus, 2);
    assert_eq!(st.context_switches, 290290);
    assert_eq!(st.procs_running, 1);
    assert_eq!(st.procs_blocked, 0);

    let mut out = Vec::new();
    StatCollector::new("n1", &data("proc"))
        .collect(&mut out)
        .unwrap();
    let cpu = |mode| value(&out, "canopy_node_cpu_seconds_total", &[("mode", mode)]);
    assert_eq!(cpu("user"), Some(223.70));
    assert_eq!(cpu("idle"), Some(749.79));
    assert_eq!(cpu("steal"), Some(0.15));
    assert_eq!(
        value(&out, "canopy_node_context_switches_total", &[]),
        Some(290290.0)
    );
    assert_eq!(value(&out, "canopy_node_cpus", &[]), Some(2.0));
    assert!(out.iter().all(|o| o.labels.get("node") == Some("n1")));
    assert_eq!(out[0].kind, canopy_proto::MetricKind::Counter);
}

#[test]
fn proc_stat_old_kernel_without_steal() {
    let st = stat::parse_stat("cpu 1 2 3 4 5\nctxt 9\n").unwrap();
    assert_eq!(st.cpu_ticks, [1, 2, 3, 4, 5, 0, 0, 0]);
}

/// Columns split at any ASCII whitespace, as `split_ascii_whitespace`
/// does, up to the array's length.
#[test]
fn split_cols_fills_the_first_columns() {
    let mut c = [""; 3];
    assert_eq!(super::split_cols(" a\tbb  c\r\n", &mut c), 3);
    assert_eq!(c, ["a", "bb", "c"]);
    let mut c = [""; 3];
    assert_eq!(super::split_cols("x y z w v", &mut c), 3);
    assert_eq!(c, ["x", "y", "z"]);
    let mut c = [""; 4];
    assert_eq!(super::split_cols("é 1", &mut c), 2);
    assert_eq!(c, ["é", "1", "", ""]);
    assert_eq!(super::split_cols(" \t ", &mut c), 0);
    assert_eq!(super::split_cols("", &mut c), 0);
    let line = "  259       0 nvme0n1 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17";
    let mut c = [""; 13];
    assert_eq!(super::split_cols(line, &mut c), 13);
    let want: Vec<&str> = line.split_ascii_whitespace().take(13).collect();
    assert_eq!(c.to_vec(), want);
}

/// The parse stops at the line that completes its seven fields: the real
/// file up to `SwapFree` gives what the whole file gives, and a line after
/// it is not read (before it, the same line is an error).
#[test]
fn meminfo_stops_after_its_fields() {
    let full = text("proc/meminfo");
    let end = full
        .find("SwapFree:")
        .and_then(|i| full[i..].find('\n').map(|j| i + j + 1))
        .expect("a SwapFree line");
    assert!(end < full.len(), "the fixture has lines after SwapFree");
    let head = meminfo::parse_meminfo(&full[..end]).unwrap();
    assert_eq!(head, meminfo::parse_meminfo(&full).unwrap());
    let tail = format!("{}a line without a colon\n", &full[..end]);
    assert_eq!(meminfo::parse_meminfo(&tail).unwrap(), head);
    let before = format!("a line without a colon\n{full}");
    assert!(meminfo::parse_meminfo(&before).is_err());
}

#[test]
fn meminfo_real_fixture() {
    let m = meminfo::parse_meminfo(&text("proc/meminfo")).unwrap();
    assert_eq!(m.total, 25_276_502_016);
    assert_eq!(m.free, Some(25_026_416_640));
    assert_eq!(m.available, Some(24_967_606_272));
    assert_eq!(m.buffers, Some(1_892_352));
    assert_eq!(m.cached, Some(97_370_112));
    assert_eq!((m.swap_total, m.swap_free), (Some(0), Some(0)));
    let mut out = Vec::new();
    meminfo::observations("n1", &m, &mut out);
    assert_eq!(out.len(), 7);
    assert_eq!(
        value(&out, "canopy_node_memory_available_bytes", &[]),
        Some(24_967_606_272.0)
    );
}

#[test]
fn loadavg_real_fixture() {
    let l = loadavg::parse_loadavg(&text("proc/loadavg")).unwrap();
    assert_eq!((l.load1, l.load5, l.load15), (0.20, 0.49, 0.27));
}

#[test]
fn net_dev_real_fixture_skips_lo() {
    let devs = netdev::parse_net_dev(&text("proc/net/dev")).unwrap();
    assert_eq!(devs.len(), 4);
    let eth0 = devs.iter().find(|d| d.device == "eth0").unwrap();
    assert_eq!(
        (
            eth0.rx_bytes,
            eth0.rx_packets,
            eth0.tx_bytes,
            eth0.tx_packets
        ),
        (65_330_974, 4257, 425_547, 2973)
    );
    let mut out = Vec::new();
    netdev::observations("n1", &devs, &mut out);
    assert_eq!(out.len(), 3 * 4);
    assert!(out.iter().all(|o| o.labels.get("device") != Some("lo")));
}

#[test]
fn net_dev_counter_touching_the_colon() {
    let devs = netdev::parse_net_dev(&text("proc-hpc/net/dev")).unwrap();
    let eno1 = devs.iter().find(|d| d.device == "eno1").unwrap();
    assert_eq!(eno1.rx_bytes, 18_446_744_073_709_551_000);
    assert_eq!(eno1.rx_packets, 4_294_967_296);
    let ib0 = devs.iter().find(|d| d.device == "ib0").unwrap();
    assert_eq!(
        (ib0.tx_bytes, ib0.tx_packets),
        (2_345_678_901_234, 876_543_210)
    );
}

#[test]
fn diskstats_real_fixture_whole_disks_only() {
    let disks = diskstats::parse_diskstats(&text("proc/diskstats")).unwrap();
    let mut out = Vec::new();
    diskstats::observations("n1", &disks, &mut out);
    let devices: std::collections::BTreeSet<_> =
        out.iter().filter_map(|o| o.labels.get("device")).collect();
    assert_eq!(devices.into_iter().collect::<Vec<_>>(), ["vda"]);
    let d = [("device", "vda")];
    assert_eq!(
        value(&out, "canopy_node_disk_read_bytes_total", &d),
        Some(1_389_708_288.0)
    );
    assert_eq!(
        value(&out, "canopy_node_disk_written_bytes_total", &d),
        Some(2_033_324_032.0)
    );
    assert_eq!(
        value(&out, "canopy_node_disk_reads_completed_total", &d),
        Some(17838.0)
    );
    assert_eq!(
        value(&out, "canopy_node_disk_writes_completed_total", &d),
        Some(3645.0)
    );
    assert_eq!(
        value(&out, "canopy_node_disk_io_time_seconds_total", &d),
        Some(4.708)
    );
}

#[test]
fn diskstats_partitions_and_virtual_devices_skipped() {
    let disks = diskstats::parse_diskstats(&text("proc-hpc/diskstats")).unwrap();
    let mut out = Vec::new();
    diskstats::observations("n1", &disks, &mut out);
    let devices: std::collections::BTreeSet<_> =
        out.iter().filter_map(|o| o.labels.get("device")).collect();
    assert_eq!(
        devices.into_iter().collect::<Vec<_>>(),
        ["dm-0", "md0", "mmcblk0", "nvme0n1", "sda"]
    );
    let nvme = [("device", "nvme0n1")];
    assert_eq!(
        value(&out, "canopy_node_disk_read_bytes_total", &nvme),
        Some(50_567_901_184.0)
    );
    assert_eq!(
        value(&out, "canopy_node_disk_written_bytes_total", &nvme),
        Some(448_790_123_520.0)
    );
    // 11-counter line (kernel < 4.18).
    let sda = [("device", "sda")];
    assert_eq!(
        value(&out, "canopy_node_disk_written_bytes_total", &sda),
        Some(104_857_600.0)
    );
    assert_eq!(
        value(&out, "canopy_node_disk_io_time_seconds_total", &sda),
        Some(4.0)
    );
}

#[test]
fn cgroup_v1_slurm_fixture() {
    let (jobs, errors) = cgroup_v1::scan_jobs(&data("cgroup"));
    assert!(errors.is_empty(), "{errors:?}");
    let ids: Vec<u64> = jobs.iter().map(|j| j.job_id).collect();
    assert_eq!(ids, [7, 42, 43, 44, 45]);
    let j42 = &jobs[1];
    assert_eq!(j42.uid, Some(1001));
    assert_eq!(j42.cpu_usage_ns, Some(7_254_000_123));
    assert_eq!(j42.memory_usage_bytes, Some(216_395_776));
    assert_eq!(j42.memory_limit_bytes, Some(2_147_483_648));
    assert_eq!(j42.memory_rss_bytes, Some(13_926_400));
    assert_eq!(j42.memory_cache_bytes, Some(311_865_344));
    assert_eq!(j42.cpus, Some(3));
    // Unlimited memory is not an allocation.
    assert_eq!(jobs[2].memory_limit_bytes, None);
    // Job 44 runs under two slurmd of this host: summed, reported once.
    let j44 = &jobs[3];
    assert_eq!(j44.cpu_usage_ns, Some(4_000_000_000));
    assert_eq!(j44.memory_usage_bytes, Some(300_004_352));
    assert_eq!(j44.cpus, Some(3));
    // Job 45's memory cgroup is already gone: CPU only.
    assert_eq!(
        (jobs[4].cpu_usage_ns, jobs[4].memory_usage_bytes),
        (Some(42), None)
    );

    let mut out = Vec::new();
    SlurmCgroupV1Collector::new("n1", &data("cgroup"))
        .collect(&mut out)
        .unwrap();
    let j = [("job_id", "42"), ("uid", "1001"), ("node", "n1")];
    assert_eq!(
        value(&out, "canopy_job_cpu_seconds_total", &j),
        Some(7.254_000_123)
    );
    assert_eq!(
        value(&out, "canopy_job_memory_bytes", &j),
        Some(216_395_776.0)
    );
    assert_eq!(value(&out, "canopy_job_cpus_allocated", &j), Some(3.0));
    let mut seen = std::collections::HashSet::new();
    assert!(
        out.iter().all(|o| seen.insert(o.labels.clone())),
        "duplicate series"
    );
}

#[test]
fn cgroup_v1_missing_root_is_no_jobs() {
    let mut out = Vec::new();
    SlurmCgroupV1Collector::new("n1", &data("no-such-dir"))
        .collect(&mut out)
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn host_collectors_on_fixtures() {
    let mut cs = host_collectors("n1", &data("proc"), &data("cgroup"));
    let mut out = Vec::new();
    for c in &mut cs {
        c.collect(&mut out)
            .unwrap_or_else(|e| panic!("{}: {e}", c.name()));
    }
    // Node series only: the job collector holds a new job back until the
    // scheduler answered or its label wait is over.
    assert!(out.len() > 30, "{}", out.len());
    assert!(
        out.iter()
            .any(|o| o.labels.name() == "canopy_node_network_receive_bytes_total")
    );
    let mut seen = std::collections::HashSet::new();
    assert!(
        out.iter().all(|o| seen.insert(o.labels.clone())),
        "duplicate series"
    );
}

#[test]
fn synthetic_ticks_counts_collects() {
    let mut t = SyntheticTicks::new("n1");
    let mut out = Vec::new();
    for _ in 0..3 {
        out.clear();
        t.collect(&mut out).unwrap();
    }
    assert_eq!(
        value(&out, "canopy_synthetic_ticks_total", &[("node", "n1")]),
        Some(3.0)
    );
}

#[test]
fn garbage_gives_typed_errors() {
    assert!(matches!(
        stat::parse_stat("hello world"),
        Err(LeafError::Missing { field: "cpu", .. })
    ));
    assert!(matches!(
        stat::parse_stat("cpu 1 2 x 4\nctxt 1"),
        Err(LeafError::Parse { line: 1, .. })
    ));
    assert!(matches!(
        stat::parse_stat("cpu 1 2\nctxt 1"),
        Err(LeafError::Parse { .. })
    ));
    assert!(matches!(
        meminfo::parse_meminfo("MemFree: 1 kB\n"),
        Err(LeafError::Missing {
            field: "MemTotal",
            ..
        })
    ));
    assert!(matches!(
        meminfo::parse_meminfo("MemTotal: lots kB\n"),
        Err(LeafError::Parse { line: 1, .. })
    ));
    assert!(meminfo::parse_meminfo("MemTotal: 1 MB\n").is_err());
    assert!(meminfo::parse_meminfo("MemTotal: 18446744073709551615 kB\n").is_err());
    assert!(loadavg::parse_loadavg("").is_err());
    assert!(loadavg::parse_loadavg("nan 1 1").is_err());
    assert!(loadavg::parse_loadavg("-1 1 1").is_err());
    assert!(netdev::parse_net_dev("eth0 1 2 3").is_err());
    assert!(netdev::parse_net_dev("eth0: 1 2 3").is_err());
    assert!(diskstats::parse_diskstats("8 0 sda 1 2 3").is_err());
    assert!(diskstats::parse_diskstats("x 0 sda 1 2 3 4 5 6 7 8 9 10").is_err());
    assert!(cgroup_v1::parse_cpu_list("3-1").is_err());
    assert!(cgroup_v1::parse_cpu_list("a").is_err());
    assert_eq!(cgroup_v1::parse_cpu_list("0-3,8,10-11\n").unwrap(), 7);
    assert_eq!(cgroup_v1::parse_cpu_list("\n").unwrap(), 0);
    assert!(cgroup_v1::parse_u64_file("cpuacct.usage", "-5").is_err());
    let e = stat::parse_stat("cpu 1 2 3 4\nctxt many").unwrap_err();
    assert_eq!(
        e.to_string(),
        "/proc/stat: line 2: ctxt: not a number: \"many\""
    );
}

#[test]
fn io_error_names_the_path() {
    let e = StatCollector::new("n1", &data("no-such-dir"))
        .collect(&mut Vec::new())
        .unwrap_err();
    assert!(matches!(e, LeafError::Io { ref path, .. } if path.ends_with("no-such-dir/stat")));
}

proptest! {
    #[test]
    fn parsers_never_panic(s in "\\PC*") {
        let _ = stat::parse_stat(&s);
        let _ = meminfo::parse_meminfo(&s);
        let _ = loadavg::parse_loadavg(&s);
        let _ = netdev::parse_net_dev(&s);
        let _ = diskstats::parse_diskstats(&s);
        let _ = cgroup_v1::parse_cpu_list(&s);
        let _ = cgroup_v1::parse_memory_stat(&s);
    }
}

#[test]
fn cgroup_v1_scan_reports_slurm_layout_without_jobs() {
    let (jobs, _, layout) = cgroup_v1::scan_jobs_layout(&data("cgroup"));
    assert!(!jobs.is_empty() && layout);
    let root = std::env::temp_dir().join(format!("canopy-layout-{}", std::process::id()));
    // A slurm root in cpuset only is not Slurm's layout for jobs' processes.
    std::fs::create_dir_all(root.join("cpuset/slurm")).expect("cpuset");
    let (jobs, errors, layout) = cgroup_v1::scan_jobs_layout(&root);
    assert!(
        jobs.is_empty() && errors.is_empty() && !layout,
        "{errors:?}"
    );
    // An empty slurm root under memory/ is (no job running yet).
    std::fs::create_dir_all(root.join("memory/slurm_n1")).expect("memory");
    let (jobs, _, layout) = cgroup_v1::scan_jobs_layout(&root);
    assert!(jobs.is_empty() && layout);
    let _ = std::fs::remove_dir_all(&root);
}

/// Runs one tick of `c` on the keyed path at `ts` and hands the sender's
/// table to `read`, checking what every keyed tick must hold: the values
/// are recorded by key (no observations) and no series is retired.
pub(super) fn keyed_tick(
    tx: &mut canopy_proto::codec::Sender,
    src: u32,
    ts: i64,
    c: &mut dyn Collector,
    read: impl FnOnce(&canopy_proto::codec::SeriesTable),
) {
    tx.begin_tick(ts);
    tx.tick_source(src, ts);
    let mut obs = Vec::new();
    c.collect_into(&mut Sink::new(tx, src, &mut obs)).unwrap();
    assert!(obs.is_empty(), "tick at {ts}: recorded by key");
    let (table, cs) = tx.finish_tick();
    assert!(
        cs.sections.iter().all(|s| s.retired.is_empty()),
        "tick at {ts}: nothing retired"
    );
    read(table);
    tx.end_tick();
}

/// The keyed path reads `/proc/loadavg` once per re-read interval and
/// repeats the last values in between (nothing retired, nothing moved);
/// a zero interval reads every tick.
#[test]
fn keyed_loadavg_reads_once_per_interval_and_repeats_between() {
    use canopy_proto::codec::{BoundsPolicy, Sender};
    use std::time::Duration;
    let d = crate::TestDir::new();
    let file = d.path().join("loadavg");
    // Per tick: the (load1) value the table holds after the tick.
    let run = |reread: Duration| -> Vec<f64> {
        let mut c = loadavg::LoadAvgCollector::with_reread("n1", d.path(), reread);
        let mut tx = Sender::new(BoundsPolicy::default());
        let src = tx.source("n1", 1000);
        let mut load1 = Vec::new();
        for t in 0..4i64 {
            std::fs::write(&file, format!("{t}.50 0.20 0.10 1/80 4242\n")).unwrap();
            keyed_tick(&mut tx, src, 1000 * (t + 1), &mut c, |table| {
                assert_eq!(table.iter().count(), 3, "tick {t}: load1, load5, load15");
                load1.extend(
                    table
                        .iter()
                        .filter(|(_, e)| e.labels.name() == "canopy_node_load1")
                        // The sender quantises gauges: one decimal is exact.
                        .map(|(_, e)| (e.value * 10.0).round() / 10.0),
                );
            });
        }
        load1
    };
    assert_eq!(
        run(Duration::from_secs(3600)),
        [0.5; 4],
        "read once, repeated"
    );
    assert_eq!(run(Duration::ZERO), [0.5, 1.5, 2.5, 3.5], "read every tick");
}
