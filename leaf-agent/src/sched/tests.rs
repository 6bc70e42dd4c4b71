//! scontrol parsing on recorded output, the asking policy, the worker.

use std::path::PathBuf;
use std::time::Duration;

use super::cache::{CachePolicy, MetaCache};
use super::worker::query_job;
use super::{parse_passwd, parse_scontrol_job, parse_slurm_size};
use crate::error::LeafError;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/scontrol")
        .join(name);
    std::fs::read_to_string(&p).expect("fixture")
}

#[test]
fn running_batch_job_recorded() {
    let m = parse_scontrol_job(&fixture("running-batch.txt"), 2).expect("parses");
    assert_eq!((m.user.as_str(), m.uid), ("canopytest", Some(1002)));
    assert_eq!(m.account, "", "(null) is no account");
    assert_eq!(m.partition, "debug");
    assert_eq!(m.state, "RUNNING");
    assert_eq!(m.cpus, Some(1));
    assert_eq!(m.memory_bytes, Some(512 << 20));
    assert_eq!(m.gpus, 0);
}

#[test]
fn job_name_with_spaces_and_node_memory() {
    let m = parse_scontrol_job(&fixture("running-2cpu-spaces.txt"), 3).expect("parses");
    assert_eq!(m.cpus, Some(2));
    assert_eq!(m.memory_bytes, Some(700 << 20));
    assert_eq!(m.partition, "debug");
}

#[test]
fn gpus_account_partition() {
    let m = parse_scontrol_job(&fixture("gpu-hand-edited.txt"), 2).expect("parses");
    assert_eq!(
        (m.account.as_str(), m.partition.as_str()),
        ("physics", "gpu")
    );
    assert_eq!((m.cpus, m.gpus), (Some(4), 2));
    assert_eq!(m.memory_bytes, Some(16 << 30));
    let done = parse_scontrol_job(&fixture("completed.txt"), 2).expect("parses");
    assert_eq!(done.state, "COMPLETED");
}

#[test]
fn garbage_and_wrong_job_are_errors() {
    assert!(parse_scontrol_job(&fixture("invalid-job.txt"), 99).is_err());
    assert!(parse_scontrol_job(&fixture("running-batch.txt"), 3).is_err());
    assert!(parse_scontrol_job("", 1).is_err());
    assert!(parse_scontrol_job("JobId=x UserId=a(1)", 1).is_err());
    assert!(parse_scontrol_job("JobId=1 Partition=p", 1).is_err());
    assert!(parse_scontrol_job("\u{0}\u{ff}=== ==", 1).is_err());
    assert_eq!(parse_slurm_size("1.5G"), Some(3 << 29));
    assert_eq!(parse_slurm_size("2048"), Some(2048 << 20));
    assert_eq!(parse_slurm_size("-1M"), None);
    assert_eq!(parse_slurm_size("1e300T"), None);
    assert_eq!(parse_slurm_size(""), None);
}

#[test]
fn passwd_fallback() {
    let u = parse_passwd(
        "root:x:0:0:root:/root:/bin/bash\nbad line\n:x:5:5::/:/\nalice:x:1001:1001::/home/a:/bin/sh\n",
    );
    assert_eq!(
        u,
        vec![(0, "root".to_string()), (1001, "alice".to_string())]
    );
}

#[test]
fn cache_asks_once_then_rarely_and_backs_off() {
    let pol = CachePolicy {
        refresh_ms: 300_000,
        retry_ms: 5_000,
        max_in_flight: 2,
    };
    let mut c = MetaCache::new(pol);
    assert_eq!(c.due(&[1, 2, 3], 0), vec![1, 2], "at most 2 outstanding");
    assert!(
        c.due(&[1, 2, 3], 1_000).is_empty(),
        "nothing while both are out"
    );
    let m = parse_scontrol_job(&fixture("running-batch.txt"), 2).expect("parses");
    c.answer(2, Some(m), 1_000);
    c.answer(1, None, 1_000);
    assert_eq!(c.due(&[1, 2, 3], 2_000), vec![3]);
    // Every tick for a minute: job 2 is never asked again, job 1 retried with backoff.
    let mut asked = Vec::new();
    for t in (3_000..60_000).step_by(1_000) {
        for id in c.due(&[1, 2, 3], t) {
            asked.push((id, t));
            c.answer(id, None, t);
        }
    }
    assert!(asked.iter().all(|(id, _)| *id != 2), "{asked:?}");
    let ones: Vec<i64> = asked
        .iter()
        .filter(|(id, _)| *id == 1)
        .map(|a| a.1)
        .collect();
    assert_eq!(ones, vec![6_000, 16_000, 36_000], "5 s, 10 s, 20 s");
    assert!(c.get(2).is_some() && c.failures(1) == 4);
    // After the refresh period, job 2 is asked again; ended jobs are forgotten.
    assert!(c.due(&[2], 301_000).contains(&2));
    assert_eq!(c.len(), 1);
    c.answer(7, None, 0); // an answer about a forgotten job is ignored
    assert_eq!(c.len(), 1);
}

fn script(dir: &std::path::Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p.to_string_lossy().into_owned()
}

#[test]
fn worker_query_ok_timeout_garbage_missing() {
    let d = crate::TestDir::new();
    let fx =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/scontrol/running-batch.txt");
    let ok = script(
        d.path(),
        "ok",
        &format!("[ \"$4\" = 2 ] && cat {}", fx.display()),
    );
    let m = query_job(&ok, 2, Duration::from_secs(5)).expect("answer");
    assert_eq!(m.user, "canopytest");

    let slow = script(d.path(), "slow", "exec sleep 30");
    let t0 = std::time::Instant::now();
    let e = query_job(&slow, 2, Duration::from_millis(200)).expect_err("times out");
    assert!(matches!(e, LeafError::Scheduler { job_id: 2, .. }), "{e}");
    assert!(e.to_string().contains("timed out"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10));

    let garbage = script(d.path(), "garbage", "head -c 100000 /dev/urandom");
    assert!(query_job(&garbage, 2, Duration::from_secs(5)).is_err());
    let fails = script(
        d.path(),
        "fails",
        "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1",
    );
    assert!(query_job(&fails, 2, Duration::from_secs(5)).is_err());
    let missing = d.path().join("no-such-scontrol");
    assert!(query_job(&missing.to_string_lossy(), 2, Duration::from_secs(5)).is_err());
}
