//! Core stress types <-> the generated `canopy.api.v1` messages, and the one
//! place where [`StressError`] becomes a gRPC status.

use canopy_proto::api as pb;
use tonic::{Code, Status};

use crate::promql::PromqlError;
use crate::store::StoreError;
use crate::stress::watch::{EventKind, JobEvent};
use crate::stress::{
    Io, JobFilter, JobIdentity, JobStress, NodeStress, StateFilter, StressError, Verdict,
};

impl From<StressError> for Status {
    fn from(e: StressError) -> Status {
        let code = match &e {
            StressError::JobNotFound(_) | StressError::NodeNotFound(_) => Code::NotFound,
            StressError::InvalidArgument(_) => Code::InvalidArgument,
            StressError::Remote { .. } => Code::Unavailable,
            StressError::Query { source, .. } => match source {
                PromqlError::Timeout => Code::DeadlineExceeded,
                PromqlError::TooManySamples { .. }
                | PromqlError::Store(StoreError::SelectLimit { .. }) => Code::ResourceExhausted,
                _ => Code::Internal,
            },
        };
        Status::new(code, e.to_string())
    }
}

/// The proto verdict.
pub fn verdict(v: Verdict) -> i32 {
    (match v {
        Verdict::Unknown => pb::Verdict::Unspecified,
        Verdict::Ok => pb::Verdict::Ok,
        Verdict::Underusing => pb::Verdict::Underusing,
        Verdict::Overloading => pb::Verdict::Overloading,
    }) as i32
}

/// The proto I/O rates.
pub fn io_rates(io: &Io) -> pb::IoRates {
    pb::IoRates {
        read_bytes_per_second: io.read_bytes,
        write_bytes_per_second: io.write_bytes,
        read_ops_per_second: io.read_ops,
        write_ops_per_second: io.write_ops,
    }
}

/// The proto I/O share.
pub fn io_share(io: &Io) -> pb::IoShare {
    pb::IoShare {
        read_bytes: io.read_bytes,
        write_bytes: io.write_bytes,
        read_ops: io.read_ops,
        write_ops: io.write_ops,
    }
}

/// The proto job identity.
pub fn job_info(j: &JobIdentity) -> pb::JobInfo {
    pb::JobInfo {
        job_id: j.job_id.clone(),
        user: j.user.clone(),
        account: j.account.clone(),
        partition: j.partition.clone(),
        nodes: j.nodes.clone(),
        state: if j.running {
            pb::JobState::Running
        } else {
            pb::JobState::Ended
        } as i32,
    }
}

/// The proto job stress.
pub fn job_stress(j: &JobStress) -> pb::JobStress {
    pb::JobStress {
        job: Some(job_info(&j.job)),
        cores_used: j.cores_used,
        cores_allocated: j.cores_allocated,
        memory_used_bytes: j.memory_used_bytes,
        memory_allocated_bytes: j.memory_allocated_bytes,
        gpu_sm_utilization: j.gpu_sm_utilization,
        gpus_allocated: j.gpus_allocated,
        io: Some(io_rates(&j.io)),
        io_share: Some(io_share(&j.io_share)),
        ipc: j.ipc,
        verdict: verdict(j.verdict),
        reasons: j.reasons.clone(),
        observed_seconds: j.observed_secs,
    }
}

/// The proto node stress.
pub fn node_stress(n: &NodeStress) -> pb::NodeStress {
    pb::NodeStress {
        node: n.node.clone(),
        up: n.up,
        cpus: n.cpus,
        cores_busy: n.cores_busy,
        load1: n.load1,
        memory_total_bytes: n.memory_total_bytes,
        memory_available_bytes: n.memory_available_bytes,
        disk: Some(io_rates(&n.disk)),
        network_receive_bytes_per_second: n.net_rx_bytes,
        network_transmit_bytes_per_second: n.net_tx_bytes,
        cores_allocated: n.cores_allocated,
        job_ids: n.job_ids.clone(),
        verdict: verdict(n.verdict),
        reasons: n.reasons.clone(),
    }
}

/// The core filter from the proto one (empty strings match everything).
pub fn filter(f: Option<pb::JobFilter>) -> JobFilter {
    let f = f.unwrap_or_default();
    let opt = |s: String| (!s.is_empty()).then_some(s);
    JobFilter {
        state: match pb::JobState::try_from(f.state) {
            Ok(pb::JobState::Running) => StateFilter::Running,
            Ok(pb::JobState::Ended) => StateFilter::Ended,
            _ => StateFilter::Any,
        },
        user: opt(f.user),
        account: opt(f.account),
        partition: opt(f.partition),
        node: opt(f.node),
    }
}

/// The proto event; `dropped_before` counts what this watch lost so far.
pub fn event(e: &JobEvent, dropped_before: u64) -> pb::JobEvent {
    use pb::job_event::Kind;
    pb::JobEvent {
        kind: match e.kind {
            EventKind::Running => Kind::JobRunning,
            EventKind::Started => Kind::JobStarted,
            EventKind::Ended => Kind::JobEnded,
            EventKind::VerdictChanged => Kind::VerdictChanged,
            EventKind::ShareOverThreshold => Kind::ShareOverThreshold,
        } as i32,
        time_ms: e.time_ms,
        job: Some(job_info(&e.job)),
        verdict: verdict(e.verdict),
        previous_verdict: verdict(e.previous_verdict),
        reasons: e.reasons.clone(),
        io_share: Some(io_share(&e.io_share)),
        dropped_before,
    }
}
