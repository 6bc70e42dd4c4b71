//! The PromQL expressions behind every stress answer, in one place, so an
//! operator can paste any of them into Grafana or `canopy query` and see
//! the same numbers the gRPC API reports.

/// Quotes `v` as a PromQL string literal.
pub fn quote(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// `{m1,m2,...}` from fixed matchers and equality `scope` matchers.
pub fn selector(fixed: &[&str], scope: &[(&str, String)]) -> String {
    let mut parts: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    parts.extend(scope.iter().map(|(k, v)| format!("{k}={}", quote(v))));
    format!("{{{}}}", parts.join(","))
}

/// What a per-job value query measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobMetric {
    /// Cores busy.
    CoresUsed,
    /// Cores allocated.
    CoresAllocated,
    /// Memory in use.
    MemoryUsed,
    /// Memory allocated.
    MemoryAllocated,
    /// Mean GPU SM utilisation.
    GpuSmUtilization,
    /// GPUs allocated.
    GpusAllocated,
    /// Read bytes/s.
    ReadBytes,
    /// Written bytes/s.
    WriteBytes,
    /// Read ops/s.
    ReadOps,
    /// Write ops/s.
    WriteOps,
    /// Instructions/s.
    Instructions,
    /// Cycles/s.
    Cycles,
    /// Seconds of the window the youngest of the job's series covers.
    ObservedSeconds,
}

impl JobMetric {
    /// Every per-job metric, in evaluation order.
    pub const ALL: [JobMetric; 13] = [
        JobMetric::CoresUsed,
        JobMetric::CoresAllocated,
        JobMetric::MemoryUsed,
        JobMetric::MemoryAllocated,
        JobMetric::GpuSmUtilization,
        JobMetric::GpusAllocated,
        JobMetric::ReadBytes,
        JobMetric::WriteBytes,
        JobMetric::ReadOps,
        JobMetric::WriteOps,
        JobMetric::Instructions,
        JobMetric::Cycles,
        JobMetric::ObservedSeconds,
    ];

    /// The expression, one value per `job_id`, over the jobs in `scope`;
    /// `window` is the rate window (e.g. `1m`).
    pub fn query(self, scope: &[(&str, String)], window: &str) -> String {
        let s = selector(&[], scope);
        let rate = |m: &str| format!("sum by (job_id) (rate({m}{s}[{window}]))");
        let sum = |m: &str| format!("sum by (job_id) ({m}{s})");
        match self {
            JobMetric::CoresUsed => rate("canopy_job_cpu_seconds_total"),
            JobMetric::CoresAllocated => sum("canopy_job_cpus_allocated"),
            JobMetric::MemoryUsed => sum("canopy_job_memory_bytes"),
            JobMetric::MemoryAllocated => sum("canopy_job_memory_allocated_bytes"),
            JobMetric::GpuSmUtilization => {
                format!("avg by (job_id) (canopy_job_gpu_sm_utilization_ratio{s})")
            }
            JobMetric::GpusAllocated => sum("canopy_job_gpus_allocated"),
            JobMetric::ReadBytes => rate("canopy_job_io_read_bytes_total"),
            JobMetric::WriteBytes => rate("canopy_job_io_write_bytes_total"),
            JobMetric::ReadOps => rate("canopy_job_io_read_ops_total"),
            JobMetric::WriteOps => rate("canopy_job_io_write_ops_total"),
            JobMetric::Instructions => rate("canopy_job_instructions_total"),
            JobMetric::Cycles => rate("canopy_job_cycles_total"),
            JobMetric::ObservedSeconds => format!(
                "min by (job_id) (time() - ts_of_first_over_time(canopy_job_cpu_seconds_total{s}[{window}]))"
            ),
        }
    }

    /// The counter behind a cluster I/O total (`None`: not an I/O metric).
    pub fn io_counter(self) -> Option<&'static str> {
        match self {
            JobMetric::ReadBytes => Some("canopy_job_io_read_bytes_total"),
            JobMetric::WriteBytes => Some("canopy_job_io_write_bytes_total"),
            JobMetric::ReadOps => Some("canopy_job_io_read_ops_total"),
            JobMetric::WriteOps => Some("canopy_job_io_write_ops_total"),
            _ => None,
        }
    }
}

/// Labels every job row is identified by (plus `node`).
pub const JOB_LABELS: &str = "job_id, user, account, partition, node";

/// Running jobs with their identity: one element per (job, node).
pub fn running_jobs(scope: &[(&str, String)]) -> String {
    let s = selector(&["__name__=~\"canopy_job_.+\"", "job_id!=\"\""], scope);
    format!("count by ({JOB_LABELS}) ({s})")
}

/// Jobs seen within `window` (running or not): one element per (job, node).
pub fn recent_jobs(scope: &[(&str, String)], window: &str) -> String {
    let s = selector(&["job_id!=\"\""], scope);
    format!(
        "count by ({JOB_LABELS}) (present_over_time(canopy_job_cpu_seconds_total{s}[{window}]))"
    )
}

/// The cluster total of an I/O counter's rate, over every job.
pub fn cluster_total(counter: &str, window: &str) -> String {
    format!("sum(rate({counter}{{job_id!=\"\"}}[{window}]))")
}

/// What a per-node value query measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeMetric {
    /// `up`.
    Up,
    /// CPUs.
    Cpus,
    /// Cores busy.
    CoresBusy,
    /// Load average.
    Load1,
    /// Memory total.
    MemoryTotal,
    /// Memory available.
    MemoryAvailable,
    /// Disk read bytes/s.
    DiskReadBytes,
    /// Disk written bytes/s.
    DiskWriteBytes,
    /// Disk reads/s.
    DiskReadOps,
    /// Disk writes/s.
    DiskWriteOps,
    /// Network receive bytes/s.
    NetRx,
    /// Network transmit bytes/s.
    NetTx,
    /// Cores allocated to jobs.
    CoresAllocated,
}

impl NodeMetric {
    /// Every per-node metric.
    pub const ALL: [NodeMetric; 13] = [
        NodeMetric::Up,
        NodeMetric::Cpus,
        NodeMetric::CoresBusy,
        NodeMetric::Load1,
        NodeMetric::MemoryTotal,
        NodeMetric::MemoryAvailable,
        NodeMetric::DiskReadBytes,
        NodeMetric::DiskWriteBytes,
        NodeMetric::DiskReadOps,
        NodeMetric::DiskWriteOps,
        NodeMetric::NetRx,
        NodeMetric::NetTx,
        NodeMetric::CoresAllocated,
    ];

    /// The expression, one value per `node`, over the nodes in `scope`.
    pub fn query(self, scope: &[(&str, String)], window: &str) -> String {
        let s = selector(&[], scope);
        let rate = |m: &str| format!("sum by (node) (rate({m}{s}[{window}]))");
        let sum = |m: &str| format!("sum by (node) ({m}{s})");
        match self {
            NodeMetric::Up => format!("max by (node) (up{s})"),
            NodeMetric::Cpus => sum("canopy_node_cpus"),
            NodeMetric::CoresBusy => {
                let s = selector(&["mode!~\"idle|iowait\""], scope);
                format!("sum by (node) (rate(canopy_node_cpu_seconds_total{s}[{window}]))")
            }
            NodeMetric::Load1 => format!("max by (node) (canopy_node_load1{s})"),
            NodeMetric::MemoryTotal => sum("canopy_node_memory_total_bytes"),
            NodeMetric::MemoryAvailable => sum("canopy_node_memory_available_bytes"),
            NodeMetric::DiskReadBytes => rate("canopy_node_disk_read_bytes_total"),
            NodeMetric::DiskWriteBytes => rate("canopy_node_disk_written_bytes_total"),
            NodeMetric::DiskReadOps => rate("canopy_node_disk_reads_completed_total"),
            NodeMetric::DiskWriteOps => rate("canopy_node_disk_writes_completed_total"),
            NodeMetric::NetRx => rate("canopy_node_network_receive_bytes_total"),
            NodeMetric::NetTx => rate("canopy_node_network_transmit_bytes_total"),
            NodeMetric::CoresAllocated => sum("canopy_job_cpus_allocated"),
        }
    }
}

/// Jobs on each node: one element per (node, job).
pub fn node_jobs(scope: &[(&str, String)]) -> String {
    let s = selector(&["__name__=~\"canopy_job_.+\"", "job_id!=\"\""], scope);
    format!("count by (node, job_id) ({s})")
}
