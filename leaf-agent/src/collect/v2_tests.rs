//! cgroup v2 parsers and scan on the `cgroup2/` fixture, and the job
//! collector on it (several slurmd scopes on one host).

use std::path::PathBuf;

use super::cgroup_v2::{self, job_of_path, parse_cpu_stat, parse_io_stat};
use super::{Collector, SlurmJobsCollector, SlurmJobsOptions};

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

#[test]
fn v2_file_parsers() {
    let real = std::fs::read_to_string(data(
        "cgroup2/system.slice/slurmstepd.scope/job_51/cpu.stat",
    ))
    .expect("fixture");
    let s = parse_cpu_stat(&real).expect("parses");
    assert_eq!(
        (s.usage_usec, s.user_usec, s.system_usec),
        (949_639, 949_639, 0)
    );
    assert!(parse_cpu_stat("user_usec 5\n").is_err(), "no usage_usec");
    assert!(parse_cpu_stat("usage_usec x\n").is_err());
    let io = parse_io_stat(
        "254:0 rbytes=1048576 wbytes=314572800 rios=12 wios=300 dbytes=0 dios=0\n259:0 rbytes=4096 wbytes=0 rios=1 wios=0\n",
    )
    .expect("parses");
    assert_eq!(
        (io.read_bytes, io.write_bytes, io.read_ops, io.write_ops),
        (1_052_672, 314_572_800, 13, 300)
    );
    assert_eq!(parse_io_stat("").expect("empty is zero").write_bytes, 0);
    assert!(parse_io_stat("254:0 rbytes\n").is_err());
    assert!(parse_io_stat("sda rbytes=1\n").is_err());
    assert!(parse_io_stat("8:0 wbytes=-1\n").is_err());
    assert_eq!(
        job_of_path("/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"),
        Some(42)
    );
    assert_eq!(
        job_of_path("/system.slice/n2_slurmstepd.scope/job_7"),
        Some(7)
    );
    assert_eq!(job_of_path("/system.slice/slurmstepd.scope/job_x"), None);
    assert_eq!(job_of_path("/user.slice/job_3"), None);
}

#[test]
fn v2_scan_sums_a_job_across_slurmd_scopes() {
    let (jobs, errors) = cgroup_v2::scan_jobs(&data("cgroup2"));
    assert!(errors.is_empty(), "{errors:?}");
    let ids: Vec<u64> = jobs.iter().map(|j| j.job.job_id).collect();
    assert_eq!(ids, [51, 52]);
    let j51 = &jobs[0];
    assert_eq!(j51.job.cpu_usage_ns, Some((949_639 + 50_000) * 1000));
    assert_eq!(j51.job.memory_usage_bytes, Some(123_461_632 + 1000));
    assert_eq!(j51.job.uid, None);
    assert_eq!(j51.pids, Some(7));
    assert_eq!(j51.io.map(|i| i.write_bytes), Some(314_572_800));
    assert_eq!(jobs[1].job.cpu_usage_ns, Some(2_000_000_000));
    let (none, errs) = cgroup_v2::scan_jobs(&data("no-such-root"));
    assert!(none.is_empty() && errs.is_empty());
}

#[test]
fn collector_reads_v2_jobs_and_their_processes_in_every_scope() {
    // The fixture's PIDs (200, 201, 202, 300) are not in the fake /proc:
    // they count as exited, and the job still reports I/O (zero) and CPU.
    let d = crate::TestDir::new();
    let opts = SlurmJobsOptions {
        scontrol: None,
        passwd: d.path().join("none"),
        ..SlurmJobsOptions::default()
    };
    let proc_root = d.path().join("proc");
    let s = |pid: u32, ppid: u32| {
        let dir = proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (x) S {ppid} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 77 0"),
        )
        .expect("stat");
        std::fs::write(
            dir.join("io"),
            "read_bytes: 0\nwrite_bytes: 1000\nsyscr: 1\nsyscw: 1\n",
        )
        .expect("io");
    };
    s(200, 1);
    s(202, 200);
    s(300, 1);
    let mut c = SlurmJobsCollector::new("n1", &proc_root, &data("cgroup2"), opts);
    let mut out = Vec::new();
    c.collect(&mut out).expect("collects");
    let get = |name: &str, job: &str| {
        out.iter()
            .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job))
            .map(|o| o.value)
    };
    assert_eq!(get("canopy_job_cpu_seconds_total", "51"), Some(0.999_639));
    // PIDs 200 and 202 (first scope) and 300 (second scope): 3 x 1000 bytes.
    assert_eq!(get("canopy_job_io_write_bytes_total", "51"), Some(3000.0));
    assert_eq!(get("canopy_job_cpu_seconds_total", "52"), Some(2.0));
    assert_eq!(get("canopy_job_io_write_bytes_total", "52"), Some(0.0));
}

#[test]
fn pressure_recorded_files_and_garbage() {
    use super::pressure::{PressureCollector, parse_pressure};
    let cpu = std::fs::read_to_string(data("proc/pressure/cpu")).expect("fixture");
    let p = parse_pressure(&cpu).expect("parses");
    assert!(p.some_usec > 0 && p.full_usec.is_some());
    let p = parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=1500000\n")
        .expect("old cpu file");
    assert_eq!((p.some_usec, p.full_usec), (1_500_000, None));
    assert!(
        parse_pressure("full avg10=0 total=5\n").is_err(),
        "no some line"
    );
    assert!(parse_pressure("some avg10=0.00\n").is_err());
    assert!(parse_pressure("some total=-3\n").is_err());

    let mut out = Vec::new();
    PressureCollector::new("n1", &data("proc"))
        .collect(&mut out)
        .expect("collects");
    let names: Vec<&str> = out.iter().map(|o| o.labels.name()).collect();
    assert_eq!(
        names,
        [
            "canopy_node_pressure_cpu_waiting_seconds_total",
            "canopy_node_pressure_io_waiting_seconds_total",
            "canopy_node_pressure_io_stalled_seconds_total",
            "canopy_node_pressure_memory_waiting_seconds_total",
            "canopy_node_pressure_memory_stalled_seconds_total",
        ]
    );
    // A kernel without PSI: nothing, no error, every tick.
    let mut c = PressureCollector::new("n1", &data("proc-hpc"));
    for _ in 0..3 {
        c.collect(&mut out).expect("absent is fine");
    }
    assert_eq!(out.len(), 5);
}

#[test]
fn linuxproc_jobs_from_proc_when_no_slurm_cgroup_exists() {
    use super::slurm_procs::parse_stat_line;
    let real = std::fs::read_to_string(data("pid/stat")).expect("fixture");
    let st = parse_stat_line(&real).expect("parses");
    assert_eq!(
        (st.comm.as_str(), st.id.ppid, st.cpu_ticks),
        ("cat", 5025, 0)
    );
    assert!(parse_stat_line("1 (x) S 0 1").is_err());
    assert!(parse_stat_line("1 x) S").is_err());

    let d = crate::TestDir::new();
    let proc_root = d.path().join("proc");
    let entry = |pid: u32, comm: &str, ppid: u32, ticks: u64, write: u64, cmdline: &str| {
        let dir = proc_root.join(pid.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        let stat = format!(
            "{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 {} 0 0",
            1000 + pid
        );
        std::fs::write(dir.join("stat"), stat).expect("stat");
        std::fs::write(
            dir.join("io"),
            format!("read_bytes: 0\nwrite_bytes: {write}\nsyscr: 0\nsyscw: 1\n"),
        )
        .expect("io");
        std::fs::write(dir.join("cmdline"), cmdline).expect("cmdline");
    };
    entry(1, "init", 0, 5, 0, "/sbin/init\0");
    entry(500, "slurmstepd", 1, 1, 10, "slurmstepd: [9.batch]\0");
    entry(501, "slurm_script", 500, 150, 0, "/bin/sh\0");
    entry(502, "dd", 501, 250, 4096, "dd\0");
    entry(600, "sshd", 1, 999, 999, "sshd\0");
    std::fs::create_dir_all(proc_root.join("self")).expect("non-numeric entry");
    let opts = SlurmJobsOptions {
        scontrol: None,
        passwd: d.path().join("none"),
        ..SlurmJobsOptions::default()
    };
    let mut c = SlurmJobsCollector::new("n1", &proc_root, &d.path().join("cg"), opts);
    let mut out = Vec::new();
    c.collect(&mut out).expect("collects");
    let get = |out: &[super::Observation], name: &str| {
        out.iter()
            .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some("9"))
            .map(|o| o.value)
    };
    assert_eq!(get(&out, "canopy_job_cpu_seconds_total"), Some(4.01));
    assert_eq!(get(&out, "canopy_job_io_write_bytes_total"), Some(4106.0));
    assert_eq!(
        out.iter()
            .filter(|o| o.labels.get("job_id").is_some())
            .count(),
        5,
        "CPU and the 4 I/O counters"
    );

    // dd exits and is reaped by the shell: its CPU moves to cutime, counted once.
    std::fs::remove_dir_all(proc_root.join("502")).expect("rm");
    entry(501, "slurm_script", 500, 410, 4096, "/bin/sh\0");
    let mut out = Vec::new();
    c.collect(&mut out).expect("collects");
    assert_eq!(get(&out, "canopy_job_cpu_seconds_total"), Some(4.11));
    assert_eq!(get(&out, "canopy_job_io_write_bytes_total"), Some(4106.0));

    // The job ends: no job series; /proc is then scanned every tenth tick.
    for pid in [500, 501] {
        std::fs::remove_dir_all(proc_root.join(pid.to_string())).expect("rm");
    }
    let mut out = Vec::new();
    c.collect(&mut out).expect("collects");
    assert!(out.iter().all(|o| o.labels.get("job_id").is_none()));
}
