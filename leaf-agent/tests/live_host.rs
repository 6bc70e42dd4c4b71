//! The host collectors on the machine running the tests (Linux only).
//!
//! With `CANOPY_EXPECT_SLURM_JOB=<id>` set while that Slurm job runs on this
//! host (see `shared/slurm/start-local-slurm.sh`), also checks that the cgroup
//! v1 scan finds it.

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
    let mut out = Vec::new();
    for mut c in host_collectors("self", Path::new("/proc"), Path::new("/sys/fs/cgroup")) {
        c.collect(&mut out)
            .unwrap_or_else(|e| panic!("{}: {e}", c.name()));
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

    if let Ok(job) = std::env::var("CANOPY_EXPECT_SLURM_JOB") {
        let of_job = |name: &str| {
            out.iter()
                .find(|o| o.labels.name() == name && o.labels.get("job_id") == Some(job.as_str()))
                .map(|o| o.value)
        };
        assert!(of_job("canopy_job_cpu_seconds_total").is_some_and(|v| v > 0.0));
        assert!(of_job("canopy_job_memory_bytes").is_some_and(|v| v > 0.0));
        assert!(of_job("canopy_job_memory_allocated_bytes").is_some());
        assert!(of_job("canopy_job_cpus_allocated").is_some_and(|v| v >= 1.0));
    }
}
