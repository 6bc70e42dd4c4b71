//! Per-job attribution on a real Slurm: real jobs submitted by an
//! unprivileged user, observed by `canopy up`'s real node (this host's /proc
//! and cgroups), checked through the gateway's Prometheus API.
//!
//! Needs root and the single-node Slurm of `scripts/local-slurm.sh` (the
//! test runs `scripts/local-slurm.sh start`, which installs and starts it and
//! returns at once when it is already up). Fails, naming the script, when
//! that is not possible.

#![cfg(target_os = "linux")]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{canopy_up, get, query_json, value_of, wait_for};

const SCRIPT: &str = "scripts/local-slurm.sh";
const USER: &str = "canopytest";
const MIB: f64 = 1024.0 * 1024.0;

/// Cancels the test's jobs and removes its directory on drop.
struct Cleanup {
    dir: PathBuf,
    jobs: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for j in &self.jobs {
            let _ = Command::new("scancel").arg(j).output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Instant query; the result vector.
fn query(port: u16, q: &str) -> Vec<serde_json::Value> {
    query_json(port, q)["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    match Command::new(cmd).args(args).stdin(Stdio::null()).output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, format!("cannot run {cmd}: {e}")),
    }
}

/// Starts (or checks) the local Slurm; panics naming the script otherwise.
fn slurm_up() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (ok, uid) = run("id", &["-u"]);
    assert!(
        ok && uid.trim() == "0",
        "this test needs root to run `{SCRIPT} start` (a real single-node Slurm); run the tests as root"
    );
    let script = root.join(SCRIPT);
    let (ok, out) = run("bash", &[&script.to_string_lossy(), "start"]);
    assert!(
        ok,
        "Slurm is not up and `{SCRIPT} start` failed; run `bash {SCRIPT} start` as root and see its output:\n{out}"
    );
}

/// Submits `wrap` as the test user; the job id.
fn submit(dir: &Path, name: &str, wrap: &str) -> String {
    let out = dir.join(format!("{name}-%j.out"));
    let (ok, text) = run(
        "runuser",
        &[
            "-u",
            USER,
            "--",
            "sbatch",
            "--parsable",
            "-A",
            "canopyacct",
            "-J",
            name,
            "--chdir",
            &dir.to_string_lossy(),
            "-o",
            &out.to_string_lossy(),
            "--wrap",
            wrap,
        ],
    );
    assert!(
        ok,
        "sbatch as {USER} failed (is `{SCRIPT} start` done?): {text}"
    );
    let id = text.trim().to_string();
    assert!(
        id.chars().all(|c| c.is_ascii_digit()) && !id.is_empty(),
        "{text}"
    );
    id
}

fn job_state(id: &str) -> String {
    let (_, out) = run("scontrol", &["show", "job", "-o", id]);
    out.split_whitespace()
        .find_map(|w| w.strip_prefix("JobState="))
        .unwrap_or("GONE")
        .to_string()
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && !s.chars().any(char::is_whitespace) && s != "gateway")
        .unwrap_or_else(|| "localhost".into())
}

#[test]
fn real_slurm_jobs_are_attributed_through_the_gateway() {
    slurm_up();
    let node = this_host();
    let up = canopy_up(&["--nodes", "2", "--subtrees", "1", "--tick-ms", "500"]);
    let http = up.http;
    wait_for("the HTTP API", Duration::from_secs(60), || {
        get(http, "/api/v1/status/buildinfo")
    });
    wait_for("the real node's series", Duration::from_secs(60), || {
        let r = query(
            http,
            &format!("canopy_node_memory_total_bytes{{node=\"{node}\"}}"),
        );
        (!r.is_empty()).then_some(())
    });

    // A directory the unprivileged user can write.
    let dir = std::env::temp_dir().join(format!("canopy-slurm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test dir");
    let (ok, text) = run("chown", &[USER, &dir.to_string_lossy()]);
    assert!(ok, "chown {USER}: {text}");
    let mut cleanup = Cleanup {
        dir: dir.clone(),
        jobs: Vec::new(),
    };

    // Outside any job: what the node's processes outside jobs wrote so far.
    let outside_sel = format!("{{job_id=\"\",node=\"{node}\"}}");
    let outside_q = format!("canopy_job_io_write_bytes_total{outside_sel}");
    let outside_before = wait_for("the I/O outside jobs", Duration::from_secs(60), || {
        query(http, &outside_q).first().map(value_of)
    });

    let dd = submit(
        &dir,
        "dd",
        "dd if=/dev/zero of=f bs=1M count=300 conv=fsync; rm -f f; sleep 4",
    );
    cleanup.jobs.push(dd.clone());
    // Burns ~10 s of CPU, then prints its own CPU time (children) with `times`.
    let cpu = submit(
        &dir,
        "burn",
        "timeout 10 sh -c 'while :; do :; done'; times; sleep 4",
    );
    cleanup.jobs.push(cpu.clone());

    // The dd job: >= 300 MiB written, attributed to its job, user, account,
    // partition and this node.
    let sel = |job: &str| format!("{{job_id=\"{job}\",node=\"{node}\"}}");
    let io_q = format!("canopy_job_io_write_bytes_total{}", sel(&dd));
    let written = wait_for("the dd job's 300 MiB", Duration::from_secs(90), || {
        let r = query(http, &io_q);
        r.first().filter(|x| value_of(x) >= 300.0 * MIB).cloned()
    });
    let m = &written["metric"];
    assert_eq!(m["user"], USER, "{written}");
    assert_eq!(m["account"], "canopyacct", "{written}");
    assert_eq!(m["partition"], "debug", "{written}");
    let w = value_of(&written);
    assert!(
        w <= 300.0 * MIB + 32.0 * MIB,
        "dd job wrote {:.1} MiB, expected 300 MiB plus a little",
        w / MIB
    );
    eprintln!("dd job {dd}: {:.2} MiB written as seen by canopy", w / MIB);
    let ops = query(http, &format!("canopy_job_io_write_ops_total{}", sel(&dd)));
    assert!(
        ops.first().map(value_of).is_some_and(|v| v >= 300.0),
        "300 write calls at least: {ops:?}"
    );
    let alloc = query(http, &format!("canopy_job_cpus_allocated{}", sel(&dd)));
    assert_eq!(alloc.first().map(value_of), Some(1.0), "{alloc:?}");
    let mem = query(
        http,
        &format!("canopy_job_memory_allocated_bytes{}", sel(&dd)),
    );
    assert!(
        mem.first().map(value_of).is_some_and(|v| v > 0.0),
        "{mem:?}"
    );

    // The CPU job: follow its counter while it runs; its final value matches
    // what the job itself reports with `times`.
    let cpu_q = format!("canopy_job_cpu_seconds_total{}", sel(&cpu));
    let mut seen_max = 0.0f64;
    let mut first_seen: Option<f64> = None;
    let t0 = Instant::now();
    loop {
        if let Some(r) = query(http, &cpu_q).first() {
            assert_eq!(r["metric"]["user"], USER, "{r}");
            let v = value_of(r);
            first_seen.get_or_insert(v);
            seen_max = seen_max.max(v);
        }
        let st = job_state(&cpu);
        if st != "RUNNING" && st != "PENDING" && st != "CONFIGURING" {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "CPU job still {st}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = std::fs::read_to_string(dir.join(format!("burn-{cpu}.out"))).expect("job output");
    // `times`: shell user/sys, then children user/sys, as `0m9.93s 0m0.02s`.
    let secs = |t: &str| -> f64 {
        let (m, s) = t.trim_end_matches('s').split_once('m').expect("NmS.SSs");
        m.parse::<f64>().expect("minutes") * 60.0 + s.parse::<f64>().expect("seconds")
    };
    let own: f64 = out
        .lines()
        .filter(|l| l.split_whitespace().count() == 2 && l.contains('m'))
        .flat_map(|l| l.split_whitespace().map(secs).collect::<Vec<_>>())
        .sum();
    assert!(
        own >= 1.0,
        "the CPU job burned only {own} s (busy machine?): {out}"
    );
    let grew = seen_max - first_seen.unwrap_or(seen_max);
    eprintln!(
        "CPU job {cpu}: canopy saw {seen_max:.2} s (grew {grew:.2} s while running), the job reports {own:.2} s"
    );
    assert!(
        (seen_max - own).abs() <= 0.1 * own + 1.0,
        "canopy saw {seen_max:.2} s of CPU for job {cpu}, the job reports {own:.2} s"
    );
    assert!(
        grew >= 0.5 * own,
        "the counter grew by {grew:.2} s while the job ran (job reports {own:.2} s)"
    );

    // Both jobs ended: their series go stale (absent from an instant query).
    for job in [&dd, &cpu] {
        wait_for(
            &format!("job {job} to end"),
            Duration::from_secs(120),
            || {
                let st = job_state(job);
                (st != "RUNNING" && st != "PENDING" && st != "COMPLETING").then_some(())
            },
        );
        wait_for(
            &format!("job {job}'s series to go stale"),
            Duration::from_secs(30),
            || {
                let r = query(
                    http,
                    &format!("{{__name__=~\"canopy_job_.*\",{}", &sel(job)[1..]),
                );
                r.is_empty().then_some(())
            },
        );
    }
    eprintln!("both jobs' series went stale after the jobs ended");

    // Last (the jobs' series are checked while the jobs run): 64 MiB
    // written by this test, outside any job, counted under job_id="",
    // and the dd job's 300 MiB, written since `outside_before`, not
    // counted there again.
    let (ok, text) = run(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={}", dir.join("outside").to_string_lossy()),
            "bs=1M",
            "count=64",
            "conv=fsync",
        ],
    );
    assert!(ok, "dd outside jobs: {text}");
    let outside_after = wait_for("64 MiB outside jobs", Duration::from_secs(60), || {
        query(http, &outside_q)
            .first()
            .map(value_of)
            .filter(|v| *v >= outside_before + 64.0 * MIB)
    });
    let outside = outside_after - outside_before;
    eprintln!(
        "outside jobs: {:.2} MiB written while the test wrote 64 MiB there and the dd job 300 MiB",
        outside / MIB
    );
    assert!(
        outside < 300.0 * MIB,
        "the dd job's bytes were counted outside jobs too: {:.1} MiB",
        outside / MIB
    );
    let outside_mem = query(http, &format!("canopy_job_memory_bytes{outside_sel}"));
    assert!(
        outside_mem.first().map(value_of).is_some_and(|v| v > 0.0),
        "memory outside jobs: {outside_mem:?}"
    );
    drop(cleanup);
}
