//! Runs the [`queries`](super::queries) on a [`Source`] of PromQL answers
//! and folds them into typed rows. Pure: the source fixes the time.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::queries::{self, JobMetric, NodeMetric};
use super::verdict::{Thresholds, judge_job, judge_node};
use super::{ClusterView, Io, JobIdentity, JobStress, NodeStress, StressError};
use crate::promql::{Cancel, Engine, Value};
use crate::store::{Labels, Querier};

/// One element of an instant vector, as the stress core needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Labels of the element.
    pub labels: Labels,
    /// Its value.
    pub v: f64,
}

/// Where PromQL answers come from: the engine on the store (the gateway),
/// or a gateway's HTTP API (the `canopy jobs` CLI). Either way the same
/// expressions are asked, at the source's one evaluation time.
pub trait Source {
    /// The instant vector `query` evaluates to (a scalar as one element
    /// without labels).
    fn instant(&self, query: &str) -> Result<Vec<Sample>, StressError>;
    /// The evaluation time, unix ms.
    fn time_ms(&self) -> i64;
}

/// The gateway's own engine and store as a [`Source`].
pub struct EngineSource<'a> {
    engine: &'a Engine,
    querier: &'a dyn Querier,
    now_ms: i64,
    cancel: Cancel<'a>,
}

impl<'a> EngineSource<'a> {
    /// Answers evaluated at `now_ms`, stopping when `cancel` returns true.
    pub fn new(
        engine: &'a Engine,
        querier: &'a dyn Querier,
        now_ms: i64,
        cancel: Cancel<'a>,
    ) -> Self {
        EngineSource {
            engine,
            querier,
            now_ms,
            cancel,
        }
    }
}

impl Source for EngineSource<'_> {
    fn instant(&self, query: &str) -> Result<Vec<Sample>, StressError> {
        let v = self
            .engine
            .instant_with_cancel(self.querier, query, self.now_ms, self.cancel)
            .map_err(|source| StressError::Query {
                query: query.to_string(),
                source,
            })?;
        match v {
            Value::Vector(v) => Ok(v
                .into_iter()
                .map(|s| Sample {
                    labels: s.labels,
                    v: s.v,
                })
                .collect()),
            Value::Scalar { v, .. } => Ok(vec![Sample {
                labels: Labels::default(),
                v,
            }]),
            other => Err(StressError::Query {
                query: query.to_string(),
                source: crate::promql::PromqlError::Execution(format!(
                    "expected a vector, got a {}",
                    other.type_name()
                )),
            }),
        }
    }

    fn time_ms(&self) -> i64 {
        self.now_ms
    }
}

/// Evaluates stress at one instant from one source of answers.
pub struct Evaluator<'a, S: Source = EngineSource<'a>> {
    src: S,
    /// Rate window, as PromQL writes it (default `1m`).
    pub rate_window: &'a str,
    /// How far back an ended job still counts as recent (default `1h`).
    pub recent_window: &'a str,
    /// Verdict thresholds.
    pub thresholds: &'a Thresholds,
    /// The cluster's I/O totals, when given from elsewhere (a user's scoped
    /// view still measures shares against the whole cluster); `None`: the
    /// source's own jobs.
    pub cluster_total: Option<Io>,
}

impl<'a> Evaluator<'a, EngineSource<'a>> {
    /// An evaluator on the engine at `now_ms`, with the default windows
    /// (1 m rates, 1 h recent).
    pub fn new(
        engine: &'a Engine,
        querier: &'a dyn Querier,
        now_ms: i64,
        cancel: Cancel<'a>,
        thresholds: &'a Thresholds,
    ) -> Self {
        Self::with_source(
            EngineSource::new(engine, querier, now_ms, cancel),
            thresholds,
        )
    }
}

impl<'a, S: Source> Evaluator<'a, S> {
    /// An evaluator on any source, with the default windows.
    pub fn with_source(src: S, thresholds: &'a Thresholds) -> Self {
        Evaluator {
            src,
            rate_window: "1m",
            recent_window: "1h",
            thresholds,
            cluster_total: None,
        }
    }

    fn vector(&self, query: &str) -> Result<Vec<Sample>, StressError> {
        self.src.instant(query)
    }

    /// Finite values of `query`, keyed by the value of `label`.
    fn by(&self, query: &str, label: &str) -> Result<HashMap<String, f64>, StressError> {
        Ok(self
            .vector(query)?
            .into_iter()
            .filter(|s| s.v.is_finite())
            .filter_map(|s| s.labels.get(label).map(|k| (k.to_string(), s.v)))
            .collect())
    }

    /// The single value of an aggregate without labels.
    fn single(&self, query: &str) -> Result<Option<f64>, StressError> {
        Ok(self
            .vector(query)?
            .first()
            .map(|s| s.v)
            .filter(|v| v.is_finite()))
    }

    /// (job, node) rows of an identity query, folded into identities.
    fn identities(
        &self,
        query: &str,
        running: bool,
    ) -> Result<BTreeMap<String, JobIdentity>, StressError> {
        let mut out: BTreeMap<String, JobIdentity> = BTreeMap::new();
        for s in self.vector(query)? {
            let l = &s.labels;
            let Some(id) = l.get("job_id").filter(|x| !x.is_empty()) else {
                continue;
            };
            let j = out.entry(id.to_string()).or_insert_with(|| JobIdentity {
                job_id: id.to_string(),
                user: l.get("user").unwrap_or("").to_string(),
                account: l.get("account").unwrap_or("").to_string(),
                partition: l.get("partition").unwrap_or("").to_string(),
                nodes: Vec::new(),
                running,
            });
            if let Some(n) = l.get("node").filter(|n| !n.is_empty())
                && let Err(i) = j.nodes.binary_search_by(|x| x.as_str().cmp(n))
            {
                j.nodes.insert(i, n.to_string());
            }
        }
        Ok(out)
    }

    /// Cluster-wide I/O rates over every running job.
    pub fn cluster_io(&self) -> Result<Io, StressError> {
        let w = self.rate_window;
        let t = |m: JobMetric| -> Result<Option<f64>, StressError> {
            match m.io_counter() {
                Some(c) => self.single(&queries::cluster_total(c, w)),
                None => Ok(None),
            }
        };
        Ok(Io {
            read_bytes: t(JobMetric::ReadBytes)?,
            write_bytes: t(JobMetric::WriteBytes)?,
            read_ops: t(JobMetric::ReadOps)?,
            write_ops: t(JobMetric::WriteOps)?,
        })
    }

    /// Every running job within `scope` (equality matchers on identity
    /// labels: `job_id`, `user`, `account`, `partition`), judged.
    pub fn running(&self, scope: &[(&str, String)]) -> Result<ClusterView, StressError> {
        let ids = self.identities(&queries::running_jobs(scope), true)?;
        let total = match self.cluster_total {
            Some(t) => t,
            None => self.cluster_io()?,
        };
        if ids.is_empty() {
            return Ok(ClusterView {
                time_ms: self.src.time_ms(),
                jobs: BTreeMap::new(),
                total,
            });
        }
        let mut vals: HashMap<JobMetric, HashMap<String, f64>> = HashMap::new();
        for m in JobMetric::ALL {
            vals.insert(m, self.by(&m.query(scope, self.rate_window), "job_id")?);
        }
        let get = |m: JobMetric, id: &str| vals.get(&m).and_then(|v| v.get(id)).copied();
        let mut jobs = BTreeMap::new();
        for (id, job) in ids {
            let io = Io {
                read_bytes: get(JobMetric::ReadBytes, &id),
                write_bytes: get(JobMetric::WriteBytes, &id),
                read_ops: get(JobMetric::ReadOps, &id),
                write_ops: get(JobMetric::WriteOps, &id),
            };
            let ipc = match (
                get(JobMetric::Instructions, &id),
                get(JobMetric::Cycles, &id),
            ) {
                (Some(i), Some(c)) if c > 0.0 => Some(i / c),
                _ => None,
            };
            let mut s = JobStress {
                job,
                cores_used: get(JobMetric::CoresUsed, &id),
                cores_allocated: get(JobMetric::CoresAllocated, &id),
                memory_used_bytes: get(JobMetric::MemoryUsed, &id),
                memory_allocated_bytes: get(JobMetric::MemoryAllocated, &id),
                gpu_sm_utilization: get(JobMetric::GpuSmUtilization, &id),
                gpus_allocated: get(JobMetric::GpusAllocated, &id),
                io,
                io_share: io.share_of(&total),
                ipc,
                observed_secs: get(JobMetric::ObservedSeconds, &id),
                verdict: Default::default(),
                reasons: Vec::new(),
            };
            let (v, r) = judge_job(&s, self.thresholds);
            s.verdict = v;
            s.reasons = r;
            jobs.insert(id, s);
        }
        Ok(ClusterView {
            time_ms: self.src.time_ms(),
            jobs,
            total,
        })
    }

    /// Jobs within `scope` seen in the recent window but not running now.
    pub fn ended(
        &self,
        scope: &[(&str, String)],
        running: &ClusterView,
    ) -> Result<Vec<JobIdentity>, StressError> {
        let recent = self.identities(&queries::recent_jobs(scope, self.recent_window), false)?;
        Ok(recent
            .into_values()
            .filter(|j| !running.jobs.contains_key(&j.job_id))
            .collect())
    }

    /// One job, running or recently ended.
    pub fn job(&self, job_id: &str) -> Result<JobStress, StressError> {
        if job_id.is_empty() {
            return Err(StressError::InvalidArgument("job_id is empty".into()));
        }
        let scope = [("job_id", job_id.to_string())];
        let mut view = self.running(&scope)?;
        if let Some(j) = view.jobs.remove(job_id) {
            return Ok(j);
        }
        let ended = self.ended(&scope, &view)?;
        match ended.into_iter().find(|j| j.job_id == job_id) {
            Some(job) => Ok(JobStress {
                job,
                reasons: vec!["the job has ended".into()],
                ..JobStress::default()
            }),
            None => Err(StressError::JobNotFound(job_id.to_string())),
        }
    }

    /// Every node in `scope` (or one, with `node="x"`), judged.
    pub fn nodes(
        &self,
        scope: &[(&str, String)],
    ) -> Result<BTreeMap<String, NodeStress>, StressError> {
        let mut vals: HashMap<NodeMetric, HashMap<String, f64>> = HashMap::new();
        for m in NodeMetric::ALL {
            vals.insert(m, self.by(&m.query(scope, self.rate_window), "node")?);
        }
        let mut jobs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for s in self.vector(&queries::node_jobs(scope))? {
            if let (Some(n), Some(j)) = (s.labels.get("node"), s.labels.get("job_id")) {
                jobs.entry(n.to_string()).or_default().insert(j.to_string());
            }
        }
        let names: BTreeSet<String> = [NodeMetric::Up, NodeMetric::Cpus]
            .iter()
            .filter_map(|m| vals.get(m))
            .flat_map(|v| v.keys().cloned())
            .collect();
        let get = |m: NodeMetric, n: &str| vals.get(&m).and_then(|v| v.get(n)).copied();
        let mut out = BTreeMap::new();
        for n in names {
            let mut ids: Vec<String> = jobs.remove(&n).unwrap_or_default().into_iter().collect();
            ids.sort_by(|a, b| super::job_id_order(a, b));
            let mut s = NodeStress {
                node: n.clone(),
                up: get(NodeMetric::Up, &n).is_some_and(|v| v >= 1.0),
                cpus: get(NodeMetric::Cpus, &n),
                cores_busy: get(NodeMetric::CoresBusy, &n),
                load1: get(NodeMetric::Load1, &n),
                memory_total_bytes: get(NodeMetric::MemoryTotal, &n),
                memory_available_bytes: get(NodeMetric::MemoryAvailable, &n),
                disk: Io {
                    read_bytes: get(NodeMetric::DiskReadBytes, &n),
                    write_bytes: get(NodeMetric::DiskWriteBytes, &n),
                    read_ops: get(NodeMetric::DiskReadOps, &n),
                    write_ops: get(NodeMetric::DiskWriteOps, &n),
                },
                net_rx_bytes: get(NodeMetric::NetRx, &n),
                net_tx_bytes: get(NodeMetric::NetTx, &n),
                cores_allocated: get(NodeMetric::CoresAllocated, &n),
                job_ids: ids,
                verdict: Default::default(),
                reasons: Vec::new(),
            };
            let (v, r) = judge_node(&s, self.thresholds);
            s.verdict = v;
            s.reasons = r;
            out.insert(n, s);
        }
        Ok(out)
    }

    /// One node.
    pub fn node(&self, node: &str) -> Result<NodeStress, StressError> {
        if node.is_empty() {
            return Err(StressError::InvalidArgument("node is empty".into()));
        }
        self.nodes(&[("node", node.to_string())])?
            .remove(node)
            .ok_or_else(|| StressError::NodeNotFound(node.to_string()))
    }
}
