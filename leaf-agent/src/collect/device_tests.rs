//! Tests of the optional-device collectors (RAPL, hwmon, InfiniBand, Lustre)
//! on fixtures of the real sysfs/procfs formats under `tests/data/sys-hpc`
//! and `tests/data/lustre`, and of the absent-device back-off.

#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::probe::{Probe, ProbeState};
use super::*;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn sys() -> PathBuf {
    data("sys-hpc")
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

fn count(obs: &[Observation], name: &str) -> usize {
    obs.iter().filter(|o| o.labels.name() == name).count()
}

fn collect_once(c: &mut dyn Collector) -> Vec<Observation> {
    let mut out = Vec::new();
    c.collect(&mut out).expect("collect");
    out
}

#[test]
fn rapl_zones_from_powercap_fixture() {
    let mut c = rapl::RaplCollector::new("n1", &sys());
    let out = collect_once(&mut c);
    let e = |z| value(&out, "canopy_node_energy_joules_total", &[("zone", z)]);
    assert_eq!(e("package-0"), Some(75_331.228_806));
    assert_eq!(e("package-0/dram"), Some(12_042.331_925));
    assert_eq!(e("package-1"), Some(70_114.062_22));
    assert_eq!(e("package-1/dram"), Some(11_877.049_303));
    // The MMIO duplicate of package-0 and the control-type dir are skipped.
    assert_eq!(out.len(), 4);
    assert_eq!(out[0].kind, canopy_proto::MetricKind::Counter);
    assert_eq!(c.probe().state(), ProbeState::Present);
}

#[test]
fn rapl_parent_and_label() {
    assert_eq!(rapl::parent_dir("intel-rapl:0:1"), Some("intel-rapl:0"));
    assert_eq!(rapl::parent_dir("intel-rapl:12:0"), Some("intel-rapl:12"));
    assert_eq!(rapl::parent_dir("intel-rapl:0"), None);
    assert_eq!(
        rapl::zone_label("dram", Some("package-1")),
        "package-1/dram"
    );
    assert!(rapl::parse_uj("12x").is_err());
    assert_eq!(rapl::parse_uj("42\n").unwrap(), 42);
}

#[test]
fn rapl_counter_wrap_uses_max_energy_range() {
    let max = 262_143_328_850;
    let mut w = rapl::WrappingEnergy::default();
    assert_eq!(
        w.update(max - 1_000_000, max),
        (max - 1_000_000) as f64 / 1e6
    );
    // Wrapped: 1 J before the top, then 2 J after zero = 3 J more.
    let after = w.update(2_000_000, max);
    assert!(
        (after - ((max + 2_000_000) as f64 / 1e6)).abs() < 1e-6,
        "{after}"
    );
    // No wrap: plain delta.
    let next = w.update(5_000_000, max);
    assert!((next - after - 3.0).abs() < 1e-6);
    // Unknown range (0): a drop is a reset, the total still does not fall.
    let mut r = rapl::WrappingEnergy::default();
    r.update(10_000_000, 0);
    assert_eq!(r.update(1_000_000, 0), 11.0);
}

proptest! {
    #[test]
    fn rapl_total_is_monotonic(readings in proptest::collection::vec(0u64..1_000_000, 1..50)) {
        let mut w = rapl::WrappingEnergy::default();
        let mut last = 0.0;
        for r in readings {
            let t = w.update(r, 1_000_000);
            prop_assert!(t >= last);
            last = t;
        }
    }
}

#[test]
fn rapl_node_energy_prefers_psys_else_packages_and_dram() {
    let z = |v: &[(&str, f64)]| {
        v.iter()
            .map(|(a, b)| (a.to_string(), *b))
            .collect::<Vec<_>>()
    };
    let zones = z(&[
        ("package-0", 10.0),
        ("package-0/core", 6.0),
        ("package-0/dram", 2.0),
    ]);
    assert_eq!(rapl::node_energy_joules(&zones), Some(12.0));
    let with_psys = z(&[("package-0", 10.0), ("psys", 30.0)]);
    assert_eq!(rapl::node_energy_joules(&with_psys), Some(30.0));
    assert_eq!(rapl::node_energy_joules(&[]), None);
}

#[test]
fn hwmon_fixture_temperatures_and_power() {
    let mut c = hwmon::HwmonCollector::new("n1", &sys());
    let out = collect_once(&mut c);
    let t = |s| value(&out, "canopy_node_temperature_celsius", &[("sensor", s)]);
    assert_eq!(t("coretemp.hwmon0/Package id 0"), Some(45.0));
    assert_eq!(t("coretemp.hwmon1/Package id 1"), Some(47.0));
    assert_eq!(t("coretemp.hwmon1/Core 0"), Some(44.0));
    assert_eq!(t("nvme/Composite"), Some(38.85));
    // Unlabelled channel named after the file; an empty input is skipped.
    assert_eq!(t("acpitz/temp1"), Some(27.8));
    assert_eq!(t("acpitz/temp2"), None);
    assert_eq!(
        value(
            &out,
            "canopy_node_power_watts",
            &[("sensor", "power_meter/power1")]
        ),
        Some(285.0)
    );
    // An old-style driver with its attributes under `device/`.
    assert_eq!(t("w83627dhg/SYSTIN"), Some(33.0));
    assert_eq!(count(&out, "canopy_node_temperature_celsius"), 9);
    assert_eq!(count(&out, "canopy_node_power_watts"), 1);
}

#[test]
fn hwmon_power_input_when_no_average() {
    let files = vec![
        ("name".to_string(), "amdgpu\n".to_string()),
        ("power1_input".to_string(), "120500000\n".to_string()),
        ("power1_label".to_string(), "PPT\n".to_string()),
        ("fan1_input".to_string(), "1200\n".to_string()),
    ];
    let r = hwmon::parse_chip(&files);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].label, "PPT");
    assert_eq!(r[0].value, 120.5);
    assert_eq!(r[0].kind, hwmon::SensorKind::Power);
}

#[test]
fn infiniband_fixture_counts_words_as_four_bytes() {
    let mut c = infiniband::InfinibandCollector::new("n1", &sys());
    let out = collect_once(&mut c);
    let l = [("device", "mlx5_0"), ("port", "1")];
    assert_eq!(
        value(&out, "canopy_node_infiniband_receive_bytes_total", &l),
        Some(2_733_158_400.0 * 4.0)
    );
    assert_eq!(
        value(&out, "canopy_node_infiniband_transmit_bytes_total", &l),
        Some(5_466_316_800.0 * 4.0)
    );
    assert_eq!(
        value(&out, "canopy_node_infiniband_receive_packets_total", &l),
        Some(10_342_815.0)
    );
    assert_eq!(
        value(&out, "canopy_node_infiniband_receive_errors_total", &l),
        Some(3.0)
    );
    assert_eq!(
        value(&out, "canopy_node_infiniband_transmit_discards_total", &l),
        Some(7.0)
    );
    assert_eq!(
        value(&out, "canopy_node_infiniband_link_downed_total", &l),
        Some(1.0)
    );
    assert_eq!(
        value(&out, "canopy_node_infiniband_port_state", &l),
        Some(4.0)
    );
    // iWARP: every PMA counter reads "N/A (no PMA)": only the state is exported.
    let iw = [("device", "rdmap0s31"), ("port", "1")];
    assert_eq!(
        value(&out, "canopy_node_infiniband_receive_bytes_total", &iw),
        None
    );
    assert_eq!(
        value(&out, "canopy_node_infiniband_port_state", &iw),
        Some(4.0)
    );
    assert_eq!(
        out.len(),
        9,
        "7 counters + state for mlx5_0, state for rdmap0s31"
    );
}

#[test]
fn infiniband_parsers() {
    assert_eq!(infiniband::parse_counter("N/A (no PMA)\n"), None);
    assert_eq!(
        infiniband::parse_counter("18446744073709551615\n"),
        Some(u64::MAX)
    );
    assert_eq!(infiniband::parse_state("1: DOWN\n"), Some(1));
    assert_eq!(infiniband::parse_state("garbage"), None);
    // A saturated 64-bit word counter does not overflow when scaled.
    let p = infiniband::parse_port(
        "d",
        "1",
        &[("port_rcv_data".into(), u64::MAX.to_string())],
        None,
    );
    assert_eq!(p.rx_bytes, Some(u64::MAX));
}

#[test]
fn lustre_llite_stats_both_layouts() {
    let rw = lustre::parse_llite_stats(
        &std::fs::read_to_string(data("lustre/llite/scratch-ffff9a0c3c2e8800/stats")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        rw,
        lustre::RwBytes {
            read: 3_221_225_472,
            write: 10_737_418_240
        }
    );
    let rw = lustre::parse_llite_stats(
        &std::fs::read_to_string(data("lustre/llite/home-ffff9a0c41b3a000/stats")).unwrap(),
    )
    .unwrap();
    // No write yet: Lustre omits the line.
    assert_eq!(
        rw,
        lustre::RwBytes {
            read: 4_212_736,
            write: 0
        }
    );
    assert!(lustre::parse_llite_stats("read_bytes 3 samples [bytes] 1 2").is_err());
}

#[test]
fn lustre_job_stats_both_formats() {
    let text = std::fs::read_to_string(data("lustre/obdfilter/scratch-OST0000/job_stats")).unwrap();
    let jobs = lustre::parse_job_stats(&text).unwrap();
    let ids: Vec<&str> = jobs.iter().map(|(j, _)| j.as_str()).collect();
    assert_eq!(ids, ["4321", "4322:1000:node01", "dd.0"]);
    assert_eq!(
        jobs[0].1,
        lustre::RwBytes {
            read: 314_572_800,
            write: 41_951_232
        }
    );
    // Lustre 2.4: `read`/`write` in bytes.
    let old = std::fs::read_to_string(data("lustre/obdfilter/scratch-OST0001/job_stats")).unwrap();
    let jobs = lustre::parse_job_stats(&old).unwrap();
    assert_eq!(
        jobs,
        vec![(
            "4321".to_string(),
            lustre::RwBytes {
                read: 12_288,
                write: 10
            }
        )]
    );
    assert!(lustre::parse_job_stats("job_stats:\n  read_bytes: { sum: 1 }\n").is_err());
}

#[test]
fn lustre_slurm_job_ids() {
    assert_eq!(lustre::slurm_job_id("4321"), Some("4321"));
    assert_eq!(lustre::slurm_job_id("4322:1000:node01"), Some("4322"));
    assert_eq!(lustre::slurm_job_id("4323.batch"), Some("4323"));
    assert_eq!(lustre::slurm_job_id("dd.0"), None);
    assert_eq!(lustre::slurm_job_id("123abc"), None);
    assert_eq!(lustre::slurm_job_id(""), None);
    assert_eq!(lustre::fs_name("scratch-OST0001"), "scratch");
    assert_eq!(lustre::fs_name("my-fs-ffff9a0c3c2e8800"), "my-fs");
}

#[test]
fn lustre_collector_node_and_job_series() {
    // The same tree twice (procfs and debugfs views): counted once.
    let mut c = lustre::LustreCollector::with_roots(
        "n1",
        vec![data("lustre"), data("absent"), data("lustre")],
    );
    let out = collect_once(&mut c);
    let n = |name, fs| value(&out, name, &[("fs", fs)]);
    assert_eq!(
        n("canopy_node_lustre_read_bytes_total", "scratch"),
        Some(3_221_225_472.0)
    );
    assert_eq!(n("canopy_node_lustre_write_bytes_total", "home"), Some(0.0));
    let j = |name, job| {
        out.iter()
            .find(|o| {
                o.labels.name() == name
                    && o.labels.get("job_id") == job
                    && o.labels.get("fs") == Some("scratch")
            })
            .map(|o| o.value)
    };
    // Summed over both OSTs.
    assert_eq!(
        j("canopy_job_lustre_read_bytes_total", Some("4321")),
        Some(314_585_088.0)
    );
    assert_eq!(
        j("canopy_job_lustre_write_bytes_total", Some("4321")),
        Some(41_951_242.0)
    );
    assert_eq!(
        j("canopy_job_lustre_write_bytes_total", Some("4322")),
        Some(104_857_600.0)
    );
    // `dd.0` is outside any job: the series without `job_id`.
    assert_eq!(
        j("canopy_job_lustre_write_bytes_total", None),
        Some(8_388_608.0)
    );
    assert_eq!(count(&out, "canopy_job_lustre_read_bytes_total"), 3);
}

#[test]
fn probe_absent_device_logs_once_and_backs_off() {
    let mut p = Probe::new("x", 10);
    let mut tries = 0;
    for _ in 0..100 {
        if p.should_try() {
            tries += 1;
            p.missing(&"not here");
        }
    }
    assert_eq!(p.notices(), 1);
    assert_eq!(tries, 10, "first call then once every 10");
    assert!(p.should_try());
    p.found();
    assert_eq!(p.notices(), 2);
    assert!(p.should_try() && p.should_try(), "present: every call");
    p.missing(&"gone");
    assert_eq!(p.notices(), 3);
    assert_eq!(p.state(), ProbeState::Absent);
}

#[test]
fn absent_devices_degrade_quietly() {
    let nowhere = data("no-such-sys");
    let mut cs: Vec<Box<dyn Collector>> = vec![
        Box::new(rapl::RaplCollector::new("n1", &nowhere)),
        Box::new(hwmon::HwmonCollector::new("n1", &nowhere)),
        Box::new(infiniband::InfinibandCollector::new("n1", &nowhere)),
        Box::new(lustre::LustreCollector::new("n1", &nowhere, &nowhere)),
        Box::new(gpu::amd::AmdGpuCollector::new("n1", &nowhere)),
    ];
    for c in &mut cs {
        for _ in 0..1000 {
            let mut out = Vec::new();
            c.collect(&mut out)
                .unwrap_or_else(|e| panic!("{}: {e}", c.name()));
            assert!(out.is_empty(), "{}", c.name());
        }
    }
    let mut r = rapl::RaplCollector::new("n1", &nowhere);
    for _ in 0..1000 {
        r.collect(&mut Vec::new()).unwrap();
    }
    assert_eq!(r.probe().notices(), 1);
    assert_eq!(r.probe().attempts(), 4, "calls 1, 301, 601, 901");
}
