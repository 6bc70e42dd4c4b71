use super::queries::{quote, selector};
use super::verdict::{judge_job, judge_node};
use super::watch::{EventKind, diff, snapshot};
use super::*;
use crate::promql::{Engine, EngineOpts};
use crate::store::{Appender, Labels, LiveStore, LiveStoreConfig};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const END_S: i64 = 120;

fn never() -> bool {
    false
}

/// One job's series on one node, fed as a leaf would (change points plus
/// heartbeats), for `secs` seconds from 0.
struct JobFeed {
    id: &'static str,
    user: &'static str,
    account: &'static str,
    partition: &'static str,
    node: &'static str,
    cores_busy: f64,
    cpus: f64,
    mem_used: f64,
    mem_alloc: f64,
    read_bps: f64,
    write_bps: f64,
    gpus: Option<(f64, f64)>,
    ipc: Option<f64>,
    until_s: i64,
}

impl JobFeed {
    fn labels(&self, name: &str) -> Labels {
        Labels::metric(
            name,
            [
                ("job_id", self.id),
                ("user", self.user),
                ("account", self.account),
                ("partition", self.partition),
                ("node", self.node),
            ],
        )
    }

    fn series(&self, t: f64) -> Vec<(Labels, f64)> {
        let mut v = vec![
            (
                self.labels("canopy_job_cpu_seconds_total"),
                self.cores_busy * t,
            ),
            (self.labels("canopy_job_cpus_allocated"), self.cpus),
            (self.labels("canopy_job_memory_bytes"), self.mem_used),
            (
                self.labels("canopy_job_memory_allocated_bytes"),
                self.mem_alloc,
            ),
            (
                self.labels("canopy_job_io_read_bytes_total"),
                self.read_bps * t,
            ),
            (
                self.labels("canopy_job_io_write_bytes_total"),
                self.write_bps * t,
            ),
        ];
        if let Some((n, util)) = self.gpus {
            v.push((self.labels("canopy_job_gpus_allocated"), n));
            for g in 0..n as usize {
                let mut l = self.labels("canopy_job_gpu_sm_utilization_ratio");
                l.set("gpu", &g.to_string());
                v.push((l, util));
            }
        }
        if let Some(ipc) = self.ipc {
            v.push((self.labels("canopy_job_cycles_total"), 1e9 * t));
            v.push((self.labels("canopy_job_instructions_total"), ipc * 1e9 * t));
        }
        v
    }
}

fn base(id: &'static str, node: &'static str) -> JobFeed {
    JobFeed {
        id,
        user: "alice",
        account: "physics",
        partition: "cpu",
        node,
        cores_busy: 7.0,
        cpus: 8.0,
        mem_used: 10.0 * GIB,
        mem_alloc: 16.0 * GIB,
        read_bps: 100e6,
        write_bps: 1e6,
        gpus: None,
        ipc: None,
        until_s: END_S,
    }
}

/// Job 7: alice on n1+n2, busy, reads 200 MB/s of the cluster's 210.
/// Job 12: bob on n2, 1 of 8 cores, 2 idle GPUs, IPC 2.
/// Job 3: chen on n1, ended at 60 s.
fn cluster() -> LiveStore {
    let jobs = vec![
        base("7", "n1"),
        base("7", "n2"),
        JobFeed {
            user: "bob",
            account: "climate",
            partition: "gpu",
            cores_busy: 1.0,
            read_bps: 10e6,
            gpus: Some((2.0, 0.03)),
            ipc: Some(2.0),
            ..base("12", "n2")
        },
        JobFeed {
            user: "chen",
            account: "bio",
            read_bps: 0.0,
            until_s: 60,
            ..base("3", "n1")
        },
    ];
    let mut s = LiveStore::new(LiveStoreConfig::default());
    for sec in 0..=END_S {
        let ts = sec * 1000;
        for node in ["n1", "n2"] {
            let n = |name: &str| Labels::metric(name, [("node", node)]);
            let mut node_series = vec![
                (n("canopy_node_cpus"), 16.0),
                (n("canopy_node_load1"), 9.0),
                (n("canopy_node_memory_total_bytes"), 64.0 * GIB),
                (n("canopy_node_memory_available_bytes"), 30.0 * GIB),
            ];
            for (mode, rate) in [("user", 10.0), ("system", 2.0), ("idle", 4.0)] {
                let mut l = n("canopy_node_cpu_seconds_total");
                l.set("mode", mode);
                node_series.push((l, rate * sec as f64));
            }
            for (l, v) in node_series {
                s.append(Some(node), &l, ts, v).expect("append node");
            }
        }
        for j in &jobs {
            if sec == j.until_s + 1 {
                for (l, _) in j.series(0.0) {
                    s.retire(&l, ts);
                }
            }
            if sec > j.until_s {
                continue;
            }
            for (l, v) in j.series(sec as f64) {
                s.append(Some(j.node), &l, ts, v).expect("append job");
            }
        }
        for node in ["n1", "n2"] {
            s.heartbeat(node, ts, 1000);
        }
    }
    s.maintain(END_S * 1000);
    s
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() <= 1e-6 * b.abs().max(1.0))
}

#[test]
fn job_stress_sums_nodes_and_judges_from_promql_answers() {
    let store = cluster();
    let engine = Engine::new(EngineOpts::default());
    let th = Thresholds::default();
    let ev = Evaluator::new(&engine, &store, END_S * 1000, &never, &th);

    let j7 = ev.job("7").expect("job 7");
    assert_eq!(j7.job.user, "alice");
    assert_eq!(j7.job.nodes, vec!["n1".to_string(), "n2".to_string()]);
    assert!(j7.job.running);
    assert!(close(j7.cores_used, 14.0), "{:?}", j7.cores_used);
    assert!(close(j7.cores_allocated, 16.0));
    assert!(close(j7.memory_used_bytes, 20.0 * GIB));
    assert!(close(j7.memory_allocated_bytes, 32.0 * GIB));
    assert!(close(j7.io.read_bytes, 200e6), "{:?}", j7.io);
    // Ops counters are not reported by these nodes: absent, not zero.
    assert_eq!(j7.io.read_ops, None);
    assert_eq!(j7.io.write_ops, None);
    assert_eq!(j7.gpus_allocated, None);
    assert_eq!(j7.ipc, None);
    assert!(close(j7.io_share.read_bytes, 200.0 / 210.0));
    // Samples at 61..=120 s lie in the 1 m window ending at 120 s.
    assert!(close(j7.observed_secs, 59.0), "{:?}", j7.observed_secs);
    assert_eq!(j7.verdict, Verdict::Overloading, "{:?}", j7.reasons);
    assert!(
        j7.reasons.iter().any(|r| r.contains("cluster reads")),
        "{:?}",
        j7.reasons
    );

    let j12 = ev.job("12").expect("job 12");
    assert!(close(j12.cores_used, 1.0));
    assert!(close(j12.gpus_allocated, 2.0));
    assert!(close(j12.gpu_sm_utilization, 0.03));
    assert!(close(j12.ipc, 2.0), "{:?}", j12.ipc);
    assert_eq!(j12.verdict, Verdict::Underusing);
    assert!(j12.reasons.iter().any(|r| r.starts_with("CPU underused")));
    assert!(j12.reasons.iter().any(|r| r.starts_with("GPUs idle")));
}

#[test]
fn ended_and_unknown_jobs() {
    let store = cluster();
    let engine = Engine::default();
    let th = Thresholds::default();
    let ev = Evaluator::new(&engine, &store, END_S * 1000, &never, &th);
    let j3 = ev.job("3").expect("job 3 is recent");
    assert!(!j3.job.running);
    assert_eq!(j3.job.user, "chen");
    assert_eq!(j3.cores_used, None);
    assert_eq!(ev.job("999"), Err(StressError::JobNotFound("999".into())));
    assert!(matches!(ev.job(""), Err(StressError::InvalidArgument(_))));
    // A quote in an id is escaped, not injected.
    assert_eq!(
        ev.job("7\"} or up{x=\""),
        Err(StressError::JobNotFound("7\"} or up{x=\"".into()))
    );

    let view = ev.running(&[]).expect("view");
    let ids: Vec<&str> = view.jobs.keys().map(String::as_str).collect();
    assert_eq!(ids, vec!["12", "7"]);
    assert!(close(view.total.read_bytes, 210e6));
    assert_eq!(view.total.read_ops, None);
    let ended = ev.ended(&[], &view).expect("ended");
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].job_id, "3");

    let scoped = ev
        .running(&[("user", "bob".to_string())])
        .expect("scoped view");
    assert_eq!(scoped.jobs.len(), 1);
    // Shares stay relative to the whole cluster when the view is narrowed.
    assert!(close(scoped.jobs["12"].io_share.read_bytes, 10.0 / 210.0));
}

#[test]
fn node_stress_from_node_series() {
    let store = cluster();
    let engine = Engine::default();
    let th = Thresholds::default();
    let ev = Evaluator::new(&engine, &store, END_S * 1000, &never, &th);
    let n2 = ev.node("n2").expect("n2");
    assert!(n2.up);
    assert!(close(n2.cpus, 16.0));
    assert!(close(n2.cores_busy, 12.0), "{:?}", n2.cores_busy);
    assert!(close(n2.cores_allocated, 16.0));
    assert_eq!(n2.job_ids, vec!["7".to_string(), "12".to_string()]);
    assert_eq!(n2.disk.read_bytes, None);
    assert_eq!(n2.verdict, Verdict::Ok, "{:?}", n2.reasons);
    assert_eq!(
        ev.node("nope"),
        Err(StressError::NodeNotFound("nope".into()))
    );
    assert_eq!(ev.nodes(&[]).expect("all nodes").len(), 2);
}

fn job(cores: (f64, f64), mem: (f64, f64)) -> JobStress {
    JobStress {
        cores_used: Some(cores.0),
        cores_allocated: Some(cores.1),
        memory_used_bytes: Some(mem.0),
        memory_allocated_bytes: Some(mem.1),
        ..JobStress::default()
    }
}

#[test]
fn verdict_rules() {
    let t = Thresholds::default();
    let (v, r) = judge_job(&job((7.0, 8.0), (8.0 * GIB, 16.0 * GIB)), &t);
    assert_eq!(v, Verdict::Ok);
    assert_eq!(r.len(), 1);
    assert!(r[0].contains("CPU 88% of 8 cores"), "{r:?}");

    let (v, r) = judge_job(&job((1.0, 8.0), (8.0 * GIB, 16.0 * GIB)), &t);
    assert_eq!(v, Verdict::Underusing);
    assert_eq!(
        r,
        vec!["CPU underused: 1.0 of 8 allocated cores busy (12%)"]
    );

    let (v, r) = judge_job(&job((1.0, 8.0), (15.5 * GIB, 16.0 * GIB)), &t);
    assert_eq!(v, Verdict::Overloading);
    assert!(r[0].starts_with("memory near its limit"), "{r:?}");
    assert!(r[1].starts_with("CPU underused"), "{r:?}");

    let (v, _) = judge_job(&job((9.5, 8.0), (8.0 * GIB, 16.0 * GIB)), &t);
    assert_eq!(v, Verdict::Overloading);

    // Too young for a rate, nothing else known: no judgement.
    let young = JobStress {
        cores_allocated: Some(4.0),
        ..JobStress::default()
    };
    let (v, r) = judge_job(&young, &t);
    assert_eq!(v, Verdict::Unknown);
    assert!(r[0].contains("no CPU rate yet"));

    // Observed for less than the window: not called underusing yet, but a
    // limit still counts.
    let young = JobStress {
        observed_secs: Some(20.0),
        ..job((1.0, 8.0), (8.0 * GIB, 16.0 * GIB))
    };
    let (v, r) = judge_job(&young, &t);
    assert_eq!(v, Verdict::Unknown);
    assert_eq!(
        r,
        vec!["observed for 20 s only: not judged for underuse before 50 s"]
    );
    let young_full = JobStress {
        observed_secs: Some(20.0),
        ..job((1.0, 8.0), (15.9 * GIB, 16.0 * GIB))
    };
    assert_eq!(judge_job(&young_full, &t).0, Verdict::Overloading);

    // Heavy I/O share below the absolute floor is not overloading.
    let small = JobStress {
        io: Io {
            read_bytes: Some(1e6),
            ..Io::default()
        },
        io_share: Io {
            read_bytes: Some(0.9),
            ..Io::default()
        },
        ..job((7.0, 8.0), (8.0 * GIB, 16.0 * GIB))
    };
    assert_eq!(judge_job(&small, &t).0, Verdict::Ok);

    let down = NodeStress {
        up: false,
        ..NodeStress::default()
    };
    assert_eq!(judge_node(&down, &t).0, Verdict::Unknown);
    let idle = NodeStress {
        up: true,
        cpus: Some(64.0),
        cores_busy: Some(2.0),
        cores_allocated: Some(32.0),
        ..NodeStress::default()
    };
    let (v, r) = judge_node(&idle, &t);
    assert_eq!(v, Verdict::Underusing);
    assert!(
        r[0].contains("jobs hold 32 cores but only 2.0 are busy"),
        "{r:?}"
    );
}

fn view(t: i64, jobs: &[(&str, &str, Verdict, f64)]) -> ClusterView {
    ClusterView {
        time_ms: t,
        jobs: jobs
            .iter()
            .map(|(id, user, v, share)| {
                (
                    id.to_string(),
                    JobStress {
                        job: JobIdentity {
                            job_id: id.to_string(),
                            user: user.to_string(),
                            running: true,
                            nodes: vec!["n1".into()],
                            ..JobIdentity::default()
                        },
                        verdict: *v,
                        io_share: Io {
                            read_bytes: Some(*share),
                            ..Io::default()
                        },
                        ..JobStress::default()
                    },
                )
            })
            .collect(),
        total: Io::default(),
    }
}

#[test]
fn watch_diff_reports_each_change_once() {
    let any = JobFilter::default();
    let a = view(
        1000,
        &[
            ("1", "alice", Verdict::Ok, 0.1),
            ("2", "bob", Verdict::Ok, 0.1),
        ],
    );
    let b = view(
        2000,
        &[
            ("2", "bob", Verdict::Underusing, 0.6),
            ("3", "alice", Verdict::Ok, 0.3),
        ],
    );
    let ev = diff(&a, &b, &any, 0.25);
    let kinds: Vec<(EventKind, &str)> =
        ev.iter().map(|e| (e.kind, e.job.job_id.as_str())).collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::Ended, "1"),
            (EventKind::VerdictChanged, "2"),
            (EventKind::ShareOverThreshold, "2"),
            (EventKind::Started, "3"),
            (EventKind::ShareOverThreshold, "3"),
        ]
    );
    assert_eq!(ev[1].previous_verdict, Verdict::Ok);
    assert_eq!(ev[1].verdict, Verdict::Underusing);
    assert!(!ev[0].job.running);
    assert!(ev.iter().all(|e| e.time_ms == 2000));

    // Nothing changed: nothing reported (the share stays above: no repeat).
    assert!(diff(&b, &b, &any, 0.25).is_empty());

    // A filter narrows both the snapshot and the diff.
    let bob = JobFilter {
        user: Some("bob".into()),
        ..JobFilter::default()
    };
    assert_eq!(snapshot(&b, &bob).len(), 1);
    assert_eq!(snapshot(&b, &bob)[0].kind, EventKind::Running);
    let ev = diff(&a, &b, &bob, 0.9);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].kind, EventKind::VerdictChanged);
    let on_n2 = JobFilter {
        node: Some("n2".into()),
        ..JobFilter::default()
    };
    assert!(diff(&a, &b, &on_n2, 0.25).is_empty());
}

#[test]
fn filters_and_quoting() {
    let j = JobIdentity {
        job_id: "5".into(),
        user: "u".into(),
        account: "a".into(),
        partition: "p".into(),
        nodes: vec!["n1".into(), "n2".into()],
        running: false,
    };
    let mut f = JobFilter {
        node: Some("n2".into()),
        ..JobFilter::default()
    };
    assert!(f.matches(&j));
    f.state = StateFilter::Running;
    assert!(!f.matches(&j));
    f.state = StateFilter::Ended;
    f.user = Some("v".into());
    assert!(!f.matches(&j));
    assert_eq!(f.scope(), vec![("user", "v".to_string())]);
    assert_eq!(quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
    assert_eq!(
        selector(&["x!=\"\""], &[("user", "o\"k".into())]),
        r#"{x!="",user="o\"k"}"#
    );
    assert_eq!(job_id_order("9", "10"), std::cmp::Ordering::Less);
}
