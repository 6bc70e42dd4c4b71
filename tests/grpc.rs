//! The scheduler gRPC API and the terminal commands against `canopy up` as
//! a real process: every RPC through a tonic client built from the same
//! proto, gRPC health and reflection through their own clients, and
//! `canopy jobs` / `canopy query` output, all checked against the
//! Prometheus HTTP API of the same gateway (one source of truth).

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{canopy_up, urlencode};

use canopy_proto::api::scheduler_client::SchedulerClient;
use canopy_proto::api::{
    ClusterIoShareRequest, JobFilter, JobState, JobStressRequest, ListJobsRequest,
    NodeStressRequest, Verdict, WatchJobsRequest, job_event,
};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

/// GET `path` on 127.0.0.1:`port`; the body when the status is 200.
fn get(port: u16, path: &str) -> Option<String> {
    support::get(port, path)
        .filter(|(status, _)| *status == 200)
        .map(|(_, body)| body)
}

/// One value of an instant PromQL query through the HTTP API.
fn promql_value(port: u16, q: &str) -> Option<f64> {
    let enc = urlencode(q);
    let body = get(port, &format!("/api/v1/query?query={enc}"))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    guard: Duration,
    mut f: impl FnMut() -> F,
) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(t0.elapsed() < guard, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn user_of(s: &canopy_proto::api::JobStress) -> String {
    s.job.as_ref().map(|j| j.user.clone()).unwrap_or_default()
}

/// Runs the `canopy` binary; (success, stdout, stderr).
fn canopy(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(args)
        .output()
        .expect("canopy runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canopy_up_serves_the_scheduler_grpc_api_and_the_terminal_commands() {
    let up = canopy_up(&["--nodes", "8", "--subtrees", "4", "--tick-ms", "500"]);
    let (http, grpc) = (up.http, up.grpc);
    let url = format!("http://127.0.0.1:{grpc}");
    let channel: Channel = wait_for("the gRPC port", Duration::from_secs(60), || {
        let url = url.clone();
        async move { Channel::from_shared(url).ok()?.connect().await.ok() }
    })
    .await;

    // Health: the service and the server as a whole are SERVING.
    let mut health = HealthClient::new(channel.clone());
    for service in ["canopy.api.v1.Scheduler", ""] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner();
        assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
    }

    // Reflection lists the service and serves its file.
    let mut refl = ServerReflectionClient::new(channel.clone());
    let reqs = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "canopy.api.v1.Scheduler".into(),
            )),
        },
    ];
    let mut answers = refl
        .server_reflection_info(tokio_stream::iter(reqs))
        .await
        .expect("reflection stream")
        .into_inner();
    let first = answers
        .message()
        .await
        .expect("reflection answer")
        .expect("one");
    match first.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => {
            let names: Vec<&str> = l.service.iter().map(|s| s.name.as_str()).collect();
            assert!(names.contains(&"canopy.api.v1.Scheduler"), "{names:?}");
            assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");
        }
        other => panic!("expected a service list, got {other:?}"),
    }
    let second = answers
        .message()
        .await
        .expect("reflection answer")
        .expect("two");
    match second.message_response {
        Some(MessageResponse::FileDescriptorResponse(f)) => {
            assert!(!f.file_descriptor_proto.is_empty());
            let bytes = &f.file_descriptor_proto[0];
            let text = String::from_utf8_lossy(bytes);
            assert!(
                text.contains("api.proto") && text.contains("JobStress"),
                "descriptor"
            );
        }
        other => panic!("expected a file descriptor, got {other:?}"),
    }

    let mut api = SchedulerClient::new(channel.clone());

    // Watch from the start: the first events are the running jobs.
    let mut watch = api
        .watch_jobs(WatchJobsRequest {
            filter: None,
            share_threshold: 0.0,
        })
        .await
        .expect("watch")
        .into_inner();

    // ListJobs finds running jobs carrying their attribution.
    let jobs = wait_for("running jobs", Duration::from_secs(60), || {
        let mut api = api.clone();
        async move {
            let r = api
                .list_jobs(ListJobsRequest {
                    filter: Some(JobFilter {
                        state: JobState::Running as i32,
                        ..JobFilter::default()
                    }),
                })
                .await
                .ok()?
                .into_inner();
            (!r.jobs.is_empty()).then_some(r.jobs)
        }
    })
    .await;
    for j in &jobs {
        let info = j.job.as_ref().expect("job info");
        assert_eq!(info.state, JobState::Running as i32);
        assert!(!info.user.is_empty() && !info.partition.is_empty() && !info.nodes.is_empty());
    }

    // JobStress on a listed job, once its CPU rate exists.
    let stress = wait_for("a job with a CPU rate", Duration::from_secs(60), || {
        let mut api = api.clone();
        let ids: Vec<String> = jobs
            .iter()
            .filter_map(|j| j.job.as_ref().map(|i| i.job_id.clone()))
            .collect();
        async move {
            for id in ids {
                let Ok(r) = api.job_stress(JobStressRequest { job_id: id }).await else {
                    continue;
                };
                let s = r.into_inner().stress?;
                if s.cores_used.is_some() {
                    return Some(s);
                }
            }
            None
        }
    })
    .await;
    let id = stress.job.as_ref().expect("job").job_id.clone();
    assert!(
        stress.cores_allocated.is_some_and(|c| c >= 1.0),
        "{stress:?}"
    );
    assert!(stress.memory_allocated_bytes.is_some_and(|m| m > 0.0));
    assert!(stress.cores_used.is_some_and(|c| c >= 0.0));
    assert!(!stress.reasons.is_empty());
    // The fabric is seconds old: every job is observed for less than the
    // rate window, so it is not judged underusing yet, and says so.
    let observed = stress.observed_seconds.expect("observed seconds");
    assert!(observed < 50.0, "{observed}");
    assert_ne!(stress.verdict, Verdict::Underusing as i32);
    if stress.verdict == Verdict::Unspecified as i32 {
        assert!(
            stress
                .reasons
                .iter()
                .any(|r| r.contains("not judged for underuse")),
            "{:?}",
            stress.reasons
        );
    }
    let io = stress.io.expect("io");
    assert!(io.read_bytes_per_second.is_some());
    // The simulator reports no ops counters: absent, not zero.
    assert_eq!(io.read_ops_per_second, None);
    assert_eq!(io.write_ops_per_second, None);
    let share = stress.io_share.expect("share");
    if let Some(s) = share.write_bytes {
        assert!((0.0..=1.0).contains(&s));
    }
    // Same number as PromQL over the HTTP API of the same gateway.
    let alloc = promql_value(
        http,
        &format!("sum(canopy_job_cpus_allocated{{job_id=\"{id}\"}})"),
    )
    .expect("PromQL answer");
    assert_eq!(stress.cores_allocated, Some(alloc));

    let err = api
        .job_stress(JobStressRequest {
            job_id: "no-such-job".into(),
        })
        .await
        .expect_err("unknown job");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    // NodeStress on a node the job runs on; NOT_FOUND for a stranger.
    let node = stress.job.as_ref().expect("job").nodes[0].clone();
    let n = api
        .node_stress(NodeStressRequest { node: node.clone() })
        .await
        .expect("node stress")
        .into_inner()
        .stress
        .expect("node");
    assert!(n.up);
    assert!(n.cpus.is_some_and(|c| c >= 1.0));
    assert!(n.memory_total_bytes.is_some_and(|m| m > 0.0));
    let err = api
        .node_stress(NodeStressRequest {
            node: "no-such-node".into(),
        })
        .await
        .expect_err("unknown node");
    assert_eq!(err.code(), Code::NotFound);

    // ClusterIoShare: at most top_n, largest first, shares within [0, 1].
    let io = api
        .cluster_io_share(ClusterIoShareRequest { top_n: 3 })
        .await
        .expect("io share")
        .into_inner();
    assert!(io.jobs.len() <= 3 && !io.jobs.is_empty());
    assert!(io.jobs_total as usize >= io.jobs.len());
    let key = |j: &canopy_proto::api::JobIoShare| {
        let s = j.share.expect("share");
        s.read_bytes
            .unwrap_or(0.0)
            .max(s.write_bytes.unwrap_or(0.0))
    };
    for w in io.jobs.windows(2) {
        assert!(key(&w[0]) >= key(&w[1]));
    }
    assert!(io.jobs.iter().all(|j| (0.0..=1.0).contains(&key(j))));
    assert!(io.total.and_then(|t| t.read_bytes_per_second).is_some());

    // WatchJobs: the jobs running when the watch began (a snapshot, or
    // their start if the fabric had not reported them yet) arrive.
    let ev = tokio::time::timeout(Duration::from_secs(20), watch.message())
        .await
        .expect("an event within 20 s")
        .expect("stream ok")
        .expect("an event");
    assert!(
        [
            job_event::Kind::JobRunning as i32,
            job_event::Kind::JobStarted as i32
        ]
        .contains(&ev.kind),
        "{ev:?}"
    );
    assert!(ev.job.is_some_and(|j| !j.job_id.is_empty()));
    // A watch begun now gets the snapshot of the jobs already running.
    let mut late = api
        .watch_jobs(WatchJobsRequest {
            filter: Some(JobFilter {
                user: user_of(&stress),
                ..JobFilter::default()
            }),
            share_threshold: 0.5,
        })
        .await
        .expect("second watch")
        .into_inner();
    let ev = tokio::time::timeout(Duration::from_secs(20), late.message())
        .await
        .expect("a snapshot event within 20 s")
        .expect("stream ok")
        .expect("an event");
    assert_eq!(ev.kind, job_event::Kind::JobRunning as i32, "{ev:?}");
    assert_eq!(ev.job.map(|j| j.user), Some(user_of(&stress)));

    // `canopy jobs`: the table lists the job, with its user and verdict.
    let gw = format!("http://127.0.0.1:{http}");
    let (ok, out, err) = canopy(&["jobs", "--gateway", &gw, "--sort", "waste"]);
    assert!(ok, "canopy jobs failed: {err}");
    let header = out.lines().next().expect("a header");
    for col in [
        "JOBID", "USER", "CORES", "CPU%", "MEM%", "GPUS", "IO%", "VERDICT",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let user = stress.job.as_ref().expect("job").user.clone();
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().next() == Some(id.as_str()) && l.contains(&user)),
        "job {id} in:\n{out}"
    );
    let (ok, out, err) = canopy(&["jobs", "--gateway", &gw, "--user", &user, "--running"]);
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .skip(1)
            .all(|l| l.contains(&user) && l.contains("running")),
        "{out}"
    );

    // `canopy query 'up'`: one row per node (8 simulated + this host), all 1,
    // once every node's first frame is in (the test gets here within ~2 s).
    wait_for("9 nodes up", Duration::from_secs(60), || {
        let r = support::results(http, "up == 1");
        async move { (r.len() == 9).then_some(()) }
    })
    .await;
    let (ok, out, err) = canopy(&["query", "up", "--gateway", &gw]);
    assert!(ok, "canopy query failed: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        vec!["NAME", "node", "TIME", "VALUE"]
    );
    assert_eq!(lines.len(), 1 + 9, "{out}");
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.starts_with("up") && l.ends_with(" 1")),
        "{out}"
    );
    wait_for(
        "2.5 s of sim0001 (0.5 s ticks)",
        Duration::from_secs(60),
        || {
            let r = support::results(http, "count_over_time(up{node=\"sim0001\"}[4s]) >= 6");
            async move { (!r.is_empty()).then_some(()) }
        },
    )
    .await;
    let (ok, out, _) = canopy(&[
        "query",
        "up{node=\"sim0001\"}",
        "--gateway",
        &gw,
        "--range",
        "4s",
        "--step",
        "1s",
    ]);
    assert!(ok);
    // One row per point: at least 2 (waited for above).
    assert!(out.lines().count() >= 3, "header and 2 points: {out}");
    assert!(
        out.lines()
            .skip(1)
            .all(|l| l.starts_with("up") && l.ends_with(" 1")),
        "{out}"
    );
    let (ok, _, err) = canopy(&["query", "sum(", "--gateway", &gw]);
    assert!(!ok);
    assert!(err.contains("bad_data"), "{err}");
}
