//! The host collectors on the machine running the tests (Linux only).
//!
//! With `CANOPY_EXPECT_SLURM_JOB=<id>` set while that Slurm job runs on this
//! host (see `scripts/local-slurm.sh`), also checks that the job collector
//! finds it (ticking until the scheduler's labels arrived).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)] // Tests may panic on the unexpected.

use std::collections::HashSet;
use std::path::Path;

use canopy_leaf::host_collectors;

#[test]
fn host_collectors_read_this_machine() {
    if !Path::new("/proc/stat").exists() {
        return;
    }
    let job = std::env::var("CANOPY_EXPECT_SLURM_JOB").ok();
    let mut cs = host_collectors("self", Path::new("/proc"), Path::new("/sys/fs/cgroup"));
    let mut out = Vec::new();
    // One tick, or with an expected job up to 15 ticks of 1 s until it shows.
    for tick in 0..15 {
        out.clear();
        for c in &mut cs {
            c.set_tick_time(1_000 * tick);
            c.collect(&mut out)
                .unwrap_or_else(|e| panic!("{}: {e}", c.name()));
        }
        // The job collector's series (it waits for the scheduler's labels);
        // device collectors such as perf report a job sooner.
        let found = |j: &String| {
            out.iter().any(|o| {
                o.labels.name() == "canopy_job_cpu_seconds_total"
                    && o.labels.get("job_id") == Some(j.as_str())
            })
        };
        if job.as_ref().is_none_or(found) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let mut seen = HashSet::new();
    assert!(
        out.iter().all(|o| seen.insert(o.labels.clone())),
        "duplicate series"
    );
    assert!(
        out.iter()
            .any(|o| o.labels.name() == "canopy_node_memory_total_bytes")
    );

    if let Some(job) = job {
        let of_job = |name: &str| {
            out.iter()
                .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job.as_str()))
                .map(|o| o.value)
        };
        assert!(of_job("canopy_job_cpu_seconds_total").is_some_and(|v| v > 0.0));
        assert!(of_job("canopy_job_memory_bytes").is_some_and(|v| v > 0.0));
        assert!(of_job("canopy_job_memory_allocated_bytes").is_some());
        assert!(of_job("canopy_job_cpus_allocated").is_some_and(|v| v >= 1.0));
        assert!(of_job("canopy_job_io_write_bytes_total").is_some());
        assert!(
            out.iter()
                .filter(|o| o.labels.get("job_id") == Some(job.as_str()))
                .all(|o| o.labels.get("user").is_some_and(|u| !u.is_empty())),
            "every job series has a user"
        );
        // Per-job perf counters: cgroup v2 (perf's cgroup mode) or, on a
        // cgroup v1 Slurm, per task with inherit. Counters are read every
        // 10 ticks, so tick 11 more times before comparing with the job's
        // own CPU time.
        for tick in 15..26 {
            out.clear();
            for c in &mut cs {
                c.set_tick_time(1_000 * tick);
                let _ = c.collect(&mut out);
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let of_job = |name: &str| {
            out.iter()
                .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job.as_str()))
                .map(|o| o.value)
        };
        let cpu = of_job("canopy_job_cpu_seconds_total").unwrap_or(0.0);
        let tc = of_job("canopy_job_perf_task_clock_seconds_total")
            .expect("a perf task-clock series for the job");
        assert!(
            tc > 0.0 && tc <= cpu * 1.15 + 0.5,
            "perf task-clock {tc} s vs the job's CPU {cpu} s"
        );
    }
}
