//! Access control against real processes: `canopy up --tokens FILE` with
//! tokens made by `canopy token`, and proof that a user token reads its own
//! jobs and nobody else's on every HTTP path, the federate body, every
//! scheduler RPC and the WatchJobs stream; that missing or wrong tokens get
//! 401 / UNAUTHENTICATED; that only admin writes and reads `/metrics`; and
//! the start-up rule for gateways listening beyond loopback.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use canopy_proto::api::scheduler_client::SchedulerClient;
use canopy_proto::api::{
    ClusterIoShareRequest, JobFilter, JobStressRequest, ListJobsRequest, NodeStressRequest,
    WatchJobsRequest,
};
use serde_json::Value as J;
use support::{BIN, Procs, canopy, canopy_up, free_port, request, urlencode, wait_for};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// The users of the simulated Slurm jobs (leaf-agent/src/sim/jobs.rs).
const SIM_USERS: [&str; 10] = [
    "alice", "bob", "chen", "dana", "emil", "fatima", "goran", "hiro", "ines", "jamal",
];

/// `canopy token ... --append file`: the secret it printed.
fn mint(file: &std::path::Path, role: &str, user: Option<&str>) -> String {
    let f = file.to_str().expect("UTF-8 path");
    let mut args = vec!["token", "--role", role, "--append", f];
    if let Some(u) = user {
        args.extend(["--user", u]);
    }
    let out = canopy(&args);
    out.lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("a secret line")
        .trim()
        .to_string()
}

/// GET with `Authorization: Bearer <token>` (none when `token` is None).
fn get_as(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let h = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = h.iter().map(|v| ("Authorization", v.as_str())).collect();
    request(port, "GET", path, &headers, b"").expect("the gateway answers")
}

/// A 200 JSON answer's `data`.
fn data(port: u16, path: &str, token: &str) -> J {
    let (st, body) = get_as(port, path, Some(token));
    assert_eq!(st, 200, "{path}: {body}");
    let j: J = serde_json::from_str(&body).expect("JSON");
    j["data"].clone()
}

fn query(port: u16, q: &str, token: &str) -> Vec<J> {
    data(
        port,
        &format!("/api/v1/query?query={}", urlencode(q)),
        token,
    )["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Values of label `l` over result or series objects (absent: "<none>").
fn label_values(items: &[J], l: &str) -> BTreeSet<String> {
    items
        .iter()
        .map(|x| {
            let m = if x["metric"].is_object() {
                &x["metric"]
            } else {
                x
            };
            m[l].as_str().unwrap_or("<none>").to_string()
        })
        .collect()
}

fn strings(j: &J) -> BTreeSet<String> {
    j.as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn assert_denied(st: u16, body: &str, code: u16, kind: &str, what: &str) {
    assert_eq!(st, code, "{what}: {body}");
    let j: J = serde_json::from_str(body).unwrap_or_else(|_| panic!("{what}: JSON: {body}"));
    assert_eq!(j["status"], "error", "{what}");
    assert_eq!(j["errorType"], kind, "{what}");
}

fn authed<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ASCII metadata"),
    );
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_token_reads_only_its_own_jobs_on_every_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens");
    let admin = mint(&file, "admin", None);
    let sched = mint(&file, "scheduler", None);
    let users: BTreeMap<&str, String> = SIM_USERS
        .iter()
        .map(|u| (*u, mint(&file, "user", Some(u))))
        .collect();
    let text = std::fs::read_to_string(&file).expect("tokens file");
    assert!(
        !text.contains(&admin) && users.values().all(|s| !text.contains(s)),
        "the file holds hashes, never secrets"
    );
    let tokens = file.to_str().expect("UTF-8");
    let up = canopy_up(&[
        "--nodes",
        "16",
        "--subtrees",
        "4",
        "--tick-ms",
        "500",
        "--tokens",
        tokens,
    ]);
    let port = up.http;

    // Admin sees the jobs of at least two users; pick one as "me".
    let by_user = wait_for("jobs of two users", Duration::from_secs(90), || {
        let bearer = format!("Bearer {admin}");
        let (st, body) = request(
            port,
            "GET",
            &format!(
                "/api/v1/query?query={}",
                urlencode("count by (user, job_id) (canopy_job_cpus_allocated)")
            ),
            &[("Authorization", bearer.as_str())],
            b"",
        )?;
        if st != 200 {
            return None;
        }
        let j: J = serde_json::from_str(&body).ok()?;
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in j["data"]["result"].as_array()? {
            let u = r["metric"]["user"].as_str()?.to_string();
            m.entry(u)
                .or_default()
                .insert(r["metric"]["job_id"].as_str()?.to_string());
        }
        (m.len() >= 2).then_some(m)
    });
    let (me, my_jobs) = by_user.iter().next().expect("a user");
    let me = me.clone();
    let tok = users
        .get(me.as_str())
        .expect("a token for every sim user")
        .clone();
    let others: BTreeSet<String> = by_user.keys().filter(|u| **u != me).cloned().collect();
    let other_jobs: BTreeSet<String> = by_user
        .iter()
        .filter(|(u, _)| **u != me)
        .flat_map(|(_, j)| j.iter().cloned())
        .collect();
    let only_me: BTreeSet<String> = [me.clone()].into();

    // --- No token, a wrong token: 401 on every data path; assets stay open.
    for path in [
        "/api/v1/query?query=up",
        "/api/v1/query_range?query=up&start=0&end=1&step=1",
        "/api/v1/series?match[]=up",
        "/api/v1/labels",
        "/api/v1/label/user/values",
        "/api/v1/metadata",
        "/federate?match[]=up",
        "/metrics",
        "/api/v1/status/buildinfo",
        "/api/v1/rules",
    ] {
        let (st, body) = get_as(port, path, None);
        assert_denied(st, &body, 401, "unauthorized", path);
        let (st, body) = get_as(port, path, Some("canopy_not_a_token"));
        assert_denied(st, &body, 401, "unauthorized", path);
    }
    for path in [
        "/",
        "/assets/app.js",
        "/assets/api.js",
        "/-/healthy",
        "/-/ready",
    ] {
        assert_eq!(get_as(port, path, None).0, 200, "{path} is open");
    }

    // --- Instant queries: every widening trick ends at my own series.
    for q in [
        r#"{__name__=~".+"}"#,
        r#"{user=~".+"}"#,
        r#"{__name__=~"canopy_job_.+", user!=""}"#,
        r#"label_replace({__name__=~"canopy_job_.+"}, "user", "x", "", "")"#,
    ] {
        let r = query(port, q, &tok);
        assert!(!r.is_empty(), "{q}: I see my own series");
        let seen: BTreeSet<String> = label_values(&r, "job_id");
        assert!(seen.is_disjoint(&other_jobs), "{q}: others' jobs {seen:?}");
        if !q.starts_with("label_replace") {
            assert_eq!(label_values(&r, "user"), only_me, "{q}");
        }
    }
    for o in &others {
        let q = format!("canopy_job_cpus_allocated{{user=\"{o}\"}}");
        assert!(query(port, &q, &tok).is_empty(), "{q}");
    }
    assert!(
        query(port, "up", &tok).is_empty(),
        "node data has no user label"
    );
    assert!(
        !query(port, "up", &sched).is_empty(),
        "the scheduler sees nodes"
    );
    let mine = label_values(&query(port, "canopy_job_cpus_allocated", &tok), "job_id");
    assert!(
        mine.iter().any(|j| my_jobs.contains(j)),
        "{mine:?} vs {my_jobs:?}"
    );

    // --- Range query.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let d = data(
        port,
        &format!(
            "/api/v1/query_range?query={}&start={}&end={}&step=5",
            urlencode("count by (user) ({__name__=~\"canopy_job_.+\"})"),
            now - 120,
            // Past now: the first samples may be younger than a second.
            now + 5
        ),
        &tok,
    );
    let r = d["result"].as_array().cloned().unwrap_or_default();
    assert_eq!(label_values(&r, "user"), only_me, "query_range");

    // --- Series, labels, label values, metadata.
    let s = data(
        port,
        &format!(
            "/api/v1/series?match[]={}",
            urlencode(r#"{__name__=~".+"}"#)
        ),
        &tok,
    );
    let s = s.as_array().cloned().unwrap_or_default();
    assert!(!s.is_empty());
    assert_eq!(label_values(&s, "user"), only_me, "series");
    let names = strings(&data(port, "/api/v1/labels", &tok));
    assert!(
        names.contains("user") && names.contains("job_id"),
        "{names:?}"
    );
    let all_names = strings(&data(port, "/api/v1/labels", &admin));
    assert!(all_names.contains("mode"), "node CPU series carry `mode`");
    assert!(
        !names.contains("mode"),
        "node-only labels are invisible: {names:?}"
    );
    assert_eq!(
        strings(&data(port, "/api/v1/label/user/values", &tok)),
        only_me
    );
    assert!(strings(&data(port, "/api/v1/label/user/values", &sched)).len() >= 2);
    let ids = strings(&data(port, "/api/v1/label/job_id/values", &tok));
    assert!(!ids.is_empty() && ids.is_disjoint(&other_jobs), "{ids:?}");
    let nodes = strings(&data(port, "/api/v1/label/node/values", &tok));
    let all_nodes = strings(&data(port, "/api/v1/label/node/values", &admin));
    assert!(
        nodes.len() < all_nodes.len(),
        "only the nodes my jobs run on"
    );
    let md = data(port, "/api/v1/metadata", &tok);
    let md: BTreeSet<String> = md.as_object().expect("object").keys().cloned().collect();
    assert!(md.iter().all(|n| n.starts_with("canopy_job_")), "{md:?}");
    let md_all = data(port, "/api/v1/metadata", &admin);
    assert!(md_all["canopy_node_load1"].is_array() && md_all["up"].is_array());

    // --- Federate: every sample line is mine.
    let (st, body) = get_as(
        port,
        &format!("/federate?match[]={}", urlencode(r#"{__name__=~".+"}"#)),
        Some(&tok),
    );
    assert_eq!(st, 200, "{body}");
    let samples: Vec<&str> = body.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(!samples.is_empty());
    for l in &samples {
        assert!(l.contains(&format!("user=\"{me}\"")), "federate: {l}");
    }
    for o in &others {
        assert!(
            !body.contains(&format!("user=\"{o}\"")),
            "federate leaks {o}"
        );
    }

    // --- The dashboard's data path: POST form bodies, Basic auth too.
    let form = format!("query={}", urlencode(r#"{__name__=~".+"}"#));
    let bearer = format!("Bearer {tok}");
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("grafana:{tok}"))
    );
    for auth in [bearer.as_str(), basic.as_str()] {
        let (st, body) = request(
            port,
            "POST",
            "/api/v1/query",
            &[
                ("Authorization", auth),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            form.as_bytes(),
        )
        .expect("answer");
        assert_eq!(st, 200, "{body}");
        let j: J = serde_json::from_str(&body).expect("JSON");
        let r = j["data"]["result"].as_array().cloned().unwrap_or_default();
        assert!(!r.is_empty());
        assert_eq!(label_values(&r, "user"), only_me, "dashboard path");
    }

    // --- Roles: /metrics and remote_write in are admin only.
    for path in ["/metrics", "/api/v1/status/tsdb"] {
        for (t, code) in [(&tok, 403), (&sched, 403)] {
            let (st, body) = get_as(port, path, Some(t));
            assert_denied(st, &body, code, "forbidden", path);
        }
        assert_eq!(get_as(port, path, Some(&admin)).0, 200, "{path}");
    }
    // An empty remote_write 1.0 request: snappy of zero bytes is one 0x00.
    let write = |t: Option<&str>| {
        let h = t.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "snappy"),
            ("X-Prometheus-Remote-Write-Version", "0.1.0"),
        ];
        if let Some(h) = &h {
            headers.push(("Authorization", h.as_str()));
        }
        request(port, "POST", "/api/v1/write", &headers, &[0u8]).expect("answer")
    };
    let (st, body) = write(Some(&sched));
    assert_denied(st, &body, 403, "forbidden", "scheduler write");
    let (st, body) = write(Some(&tok));
    assert_denied(st, &body, 403, "forbidden", "user write");
    let (st, body) = write(None);
    assert_denied(st, &body, 401, "unauthorized", "anonymous write");
    let (st, body) = write(Some(&admin));
    assert!((200..300).contains(&st), "admin writes: {st} {body}");

    // --- gRPC: the scheduler service needs a token; health stays open.
    let url = format!("http://127.0.0.1:{}", up.grpc);
    let channel: Channel = Channel::from_shared(url)
        .expect("url")
        .connect()
        .await
        .expect("gRPC connects");
    let mut health = HealthClient::new(channel.clone());
    health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health needs no token");
    let mut api = SchedulerClient::new(channel.clone());
    let e = api
        .list_jobs(ListJobsRequest { filter: None })
        .await
        .expect_err("no token");
    assert_eq!(e.code(), Code::Unauthenticated);
    let e = api
        .list_jobs(authed(ListJobsRequest { filter: None }, "canopy_wrong"))
        .await
        .expect_err("wrong token");
    assert_eq!(e.code(), Code::Unauthenticated);

    let listed = api
        .list_jobs(authed(ListJobsRequest { filter: None }, &tok))
        .await
        .expect("list")
        .into_inner()
        .jobs;
    assert!(!listed.is_empty());
    let job_user = |j: &canopy_proto::api::JobStress| {
        j.job.as_ref().map(|i| i.user.clone()).unwrap_or_default()
    };
    assert!(listed.iter().all(|j| job_user(j) == me), "ListJobs");
    let other = others.iter().next().expect("another user").clone();
    let theirs = api
        .list_jobs(authed(
            ListJobsRequest {
                filter: Some(JobFilter {
                    user: other.clone(),
                    ..JobFilter::default()
                }),
            },
            &tok,
        ))
        .await
        .expect("list")
        .into_inner()
        .jobs;
    assert!(theirs.is_empty(), "a filter cannot widen the scope");
    let all = api
        .list_jobs(authed(ListJobsRequest { filter: None }, &sched))
        .await
        .expect("list")
        .into_inner()
        .jobs;
    let all_users: BTreeSet<String> = all.iter().map(job_user).collect();
    assert!(all_users.len() >= 2, "the scheduler sees every user");

    let other_id = other_jobs.iter().next().expect("a job of another user");
    let e = api
        .job_stress(authed(
            JobStressRequest {
                job_id: other_id.clone(),
            },
            &tok,
        ))
        .await
        .expect_err("another user's job");
    assert_eq!(e.code(), Code::NotFound, "indistinguishable from no job");
    api.job_stress(authed(
        JobStressRequest {
            job_id: other_id.clone(),
        },
        &sched,
    ))
    .await
    .expect("the scheduler reads any job");
    let my_id = listed[0].job.as_ref().expect("job").job_id.clone();
    let s = api
        .job_stress(authed(JobStressRequest { job_id: my_id }, &tok))
        .await
        .expect("my own job")
        .into_inner();
    assert_eq!(s.stress.as_ref().map(job_user), Some(me.clone()));

    let node = all_nodes.iter().next().expect("a node").clone();
    let e = api
        .node_stress(authed(NodeStressRequest { node: node.clone() }, &tok))
        .await
        .expect_err("a user reads no node");
    assert_eq!(e.code(), Code::PermissionDenied);
    api.node_stress(authed(NodeStressRequest { node }, &sched))
        .await
        .expect("the scheduler reads nodes");

    let io = api
        .cluster_io_share(authed(ClusterIoShareRequest { top_n: 10_000 }, &tok))
        .await
        .expect("io share")
        .into_inner();
    assert!(!io.jobs.is_empty());
    assert!(
        io.jobs
            .iter()
            .all(|j| j.job.as_ref().is_some_and(|i| i.user == me)),
        "ClusterIoShare"
    );
    assert_eq!(io.jobs_total as usize, io.jobs.len());

    // WatchJobs: the opening snapshot and whatever follows is mine only.
    let mut watch = api
        .watch_jobs(authed(
            WatchJobsRequest {
                filter: None,
                share_threshold: 0.0,
            },
            &tok,
        ))
        .await
        .expect("watch")
        .into_inner();
    let mut seen = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(4) {
        match tokio::time::timeout(Duration::from_secs(2), watch.message()).await {
            Ok(Ok(Some(ev))) => {
                let u = ev.job.as_ref().map(|j| j.user.clone()).unwrap_or_default();
                assert_eq!(u, me, "WatchJobs event {ev:?}");
                seen += 1;
            }
            Ok(other) => panic!("watch ended: {other:?}"),
            Err(_) => {}
        }
    }
    assert!(seen > 0, "the snapshot of my running jobs arrived");

    // --- The terminal commands send --token / CANOPY_TOKEN.
    let gw = format!("http://127.0.0.1:{port}");
    let out = Command::new(BIN)
        .args(["jobs", "--gateway", &gw, "--running"])
        .env("CANOPY_TOKEN", &tok)
        .output()
        .expect("canopy jobs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert!(!rows.is_empty(), "{table}");
    for r in rows {
        assert_eq!(r.split_whitespace().nth(1), Some(me.as_str()), "{table}");
    }
    let out = Command::new(BIN)
        .args(["query", "count(up)", "--gateway", &gw])
        .env_remove("CANOPY_TOKEN")
        .output()
        .expect("canopy query");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unauthorized"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = canopy(&["query", "count(up)", "--gateway", &gw, "--token", &admin]);
    assert!(out.lines().count() >= 2, "{out}");
}

/// Waits until `canopy` at `i` has exited; its status code.
fn exit_code(procs: &mut Procs, i: usize, guard: Duration) -> Option<i32> {
    let t0 = Instant::now();
    while t0.elapsed() < guard {
        if let Some(s) = procs.0[i].try_wait().expect("wait") {
            return s.code();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[test]
fn a_gateway_beyond_loopback_needs_tokens_or_insecure() {
    let (http, grpc) = (free_port(), free_port());
    let (h, g) = (format!("0.0.0.0:{http}"), format!("127.0.0.1:{grpc}"));
    let out = Command::new(BIN)
        .args(["gateway", "--http", &h, "--grpc", &g])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("canopy gateway runs");
    assert!(!out.status.success(), "refused to start");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("beyond loopback without tokens")
            && err.contains("--tokens")
            && err.contains("--insecure"),
        "{err}"
    );

    // --insecure: it starts (and answers without a token).
    let mut procs = Procs::default();
    let i = procs.spawn(&["gateway", "--http", &h, "--grpc", &g, "--insecure"]);
    wait_for("the insecure gateway", Duration::from_secs(30), || {
        support::get(http, "/api/v1/query?query=1").filter(|(s, _)| *s == 200)
    });
    procs.kill9(i);

    // With tokens: starts beyond loopback, and asks for one.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens");
    let sched = mint(&file, "scheduler", None);
    let (http, grpc) = (free_port(), free_port());
    let (h, g) = (format!("0.0.0.0:{http}"), format!("0.0.0.0:{grpc}"));
    let f = file.to_str().expect("UTF-8");
    let j = procs.spawn(&["gateway", "--http", &h, "--grpc", &g, "--tokens", f]);
    let (st, _) = wait_for("the gateway with tokens", Duration::from_secs(30), || {
        support::get(http, "/api/v1/query?query=1")
    });
    assert_eq!(st, 401);
    assert_eq!(get_as(http, "/api/v1/query?query=1", Some(&sched)).0, 200);
    assert_eq!(exit_code(&mut procs, j, Duration::from_millis(10)), None);

    // A malformed tokens file stops the start with the line at fault.
    std::fs::write(&file, "sha256:abc admin\n").expect("write");
    let out = Command::new(BIN)
        .args([
            "gateway",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--tokens",
            f,
        ])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn canopy_up_says_it_runs_open_on_loopback() {
    let (http, grpc) = (free_port(), free_port());
    let (h, g) = (format!("127.0.0.1:{http}"), format!("127.0.0.1:{grpc}"));
    let mut child = Command::new(BIN)
        .args([
            "up",
            "--nodes",
            "1",
            "--subtrees",
            "1",
            "--http",
            &h,
            "--grpc",
            &g,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("canopy up starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut procs = Procs::default();
    procs.0.push(child);
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.trim_start().starts_with("Access:"));
    procs.kill9(0);
    let line = line.expect("an Access: line");
    assert!(line.contains("open on loopback"), "{line}");
}
