//! `canopy.api.v1.Scheduler`: request in, [`crate::stress`] answer out.

use canopy_proto::api as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::watch::DEFAULT_SHARE_THRESHOLD;
use super::{GrpcState, convert};
use crate::auth::Role;
use crate::auth::grpc::{access_of, status as auth_status};
use crate::stress::{JobStress, StateFilter, job_id_order};

/// Default and largest `top_n` of `ClusterIoShare`.
const TOP_N_DEFAULT: usize = 10;
const TOP_N_MAX: usize = 10_000;

/// The service implementation.
#[derive(Clone)]
pub struct SchedulerService {
    state: GrpcState,
}

impl SchedulerService {
    /// A service answering from `state`.
    pub fn new(state: GrpcState) -> Self {
        SchedulerService { state }
    }
}

#[tonic::async_trait]
impl pb::scheduler_server::Scheduler for SchedulerService {
    async fn job_stress(
        &self,
        req: Request<pb::JobStressRequest>,
    ) -> Result<Response<pb::JobStressReply>, Status> {
        let st = self.state.for_access(&access_of(&req)?);
        let id = req.into_inner().job_id;
        let (j, t) = st.eval(move |ev| ev.job(&id)).await?;
        Ok(Response::new(pb::JobStressReply {
            stress: Some(convert::job_stress(&j)),
            time_ms: t,
        }))
    }

    async fn node_stress(
        &self,
        req: Request<pb::NodeStressRequest>,
    ) -> Result<Response<pb::NodeStressReply>, Status> {
        // Node data carries no `user` label: a user token sees no node.
        access_of(&req)?
            .require(Role::Scheduler, "read node stress")
            .map_err(|e| auth_status(&e))?;
        let node = req.into_inner().node;
        let (n, t) = self.state.eval(move |ev| ev.node(&node)).await?;
        Ok(Response::new(pb::NodeStressReply {
            stress: Some(convert::node_stress(&n)),
            time_ms: t,
        }))
    }

    async fn cluster_io_share(
        &self,
        req: Request<pb::ClusterIoShareRequest>,
    ) -> Result<Response<pb::ClusterIoShareReply>, Status> {
        // A user sees only their own jobs, with shares of the whole cluster.
        let st = self.state.for_access(&access_of(&req)?);
        let n = match req.into_inner().top_n as usize {
            0 => TOP_N_DEFAULT,
            n => n.min(TOP_N_MAX),
        };
        let (view, t) = st.eval(move |ev| ev.running(&[])).await?;
        let mut jobs: Vec<&JobStress> = view.jobs.values().collect();
        let key = |j: &JobStress| {
            let s = j.io_share;
            (
                s.max_bytes(),
                s.read_ops.unwrap_or(0.0).max(s.write_ops.unwrap_or(0.0)),
            )
        };
        jobs.sort_by(|a, b| {
            key(b)
                .partial_cmp(&key(a))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| job_id_order(&a.job.job_id, &b.job.job_id))
        });
        let total = jobs.len();
        Ok(Response::new(pb::ClusterIoShareReply {
            total: Some(convert::io_rates(&view.total)),
            jobs: jobs
                .into_iter()
                .take(n)
                .map(|j| pb::JobIoShare {
                    job: Some(convert::job_info(&j.job)),
                    rates: Some(convert::io_rates(&j.io)),
                    share: Some(convert::io_share(&j.io_share)),
                })
                .collect(),
            jobs_total: u32::try_from(total).unwrap_or(u32::MAX),
            time_ms: t,
        }))
    }

    async fn list_jobs(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsReply>, Status> {
        let st = self.state.for_access(&access_of(&req)?);
        let f = convert::filter(req.into_inner().filter);
        let (mut jobs, t) = st
            .eval(move |ev| {
                let scope = f.scope();
                let view = ev.running(&scope)?;
                let ended = match f.state {
                    StateFilter::Running => Vec::new(),
                    _ => ev.ended(&scope, &view)?,
                };
                let mut out: Vec<JobStress> = view.jobs.into_values().collect();
                out.extend(ended.into_iter().map(|job| JobStress {
                    job,
                    reasons: vec!["the job has ended".into()],
                    ..JobStress::default()
                }));
                out.retain(|j| f.matches(&j.job));
                Ok(out)
            })
            .await?;
        jobs.sort_by(|a, b| job_id_order(&a.job.job_id, &b.job.job_id));
        Ok(Response::new(pb::ListJobsReply {
            jobs: jobs.iter().map(convert::job_stress).collect(),
            time_ms: t,
        }))
    }

    type WatchJobsStream = ReceiverStream<Result<pb::JobEvent, Status>>;

    async fn watch_jobs(
        &self,
        req: Request<pb::WatchJobsRequest>,
    ) -> Result<Response<Self::WatchJobsStream>, Status> {
        let access = access_of(&req)?;
        let r = req.into_inner();
        let threshold = match r.share_threshold {
            0.0 => DEFAULT_SHARE_THRESHOLD,
            t if t.is_finite() && t > 0.0 && t <= 1.0 => t,
            t => {
                return Err(Status::invalid_argument(format!(
                    "share_threshold {t} is not a fraction in (0, 1]"
                )));
            }
        };
        let mut filter = convert::filter(r.filter);
        let scope = access.user().map(str::to_string);
        if scope.is_some() {
            filter.user.clone_from(&scope);
        }
        let rx = self.state.hub.subscribe(filter, threshold, scope)?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pb::scheduler_server::Scheduler;

    use super::*;
    use crate::auth::Access;
    use crate::promql::Engine;
    use crate::store::{LiveStore, LiveStoreConfig, SharedStore};

    /// A request as the interceptor passes it for an admin token.
    fn admin<T>(m: T) -> Request<T> {
        let mut r = Request::new(m);
        r.extensions_mut().insert(Access::Admin);
        r
    }

    fn service() -> SchedulerService {
        let store = SharedStore::new(LiveStore::new(LiveStoreConfig::default()));
        SchedulerService::new(GrpcState::new(Arc::new(store), Arc::new(Engine::default())))
    }

    #[tokio::test]
    async fn bad_requests_get_invalid_argument_and_empty_stores_answer_empty() {
        let s = service();
        for t in [1.5, -0.1, f64::NAN] {
            let e = s
                .watch_jobs(admin(pb::WatchJobsRequest {
                    filter: None,
                    share_threshold: t,
                }))
                .await
                .expect_err("bad threshold");
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{t}");
        }
        let e = s
            .job_stress(admin(pb::JobStressRequest {
                job_id: String::new(),
            }))
            .await
            .expect_err("empty id");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let e = s
            .node_stress(admin(pb::NodeStressRequest { node: "n".into() }))
            .await
            .expect_err("unknown node");
        assert_eq!(e.code(), tonic::Code::NotFound);
        let l = s
            .list_jobs(admin(pb::ListJobsRequest { filter: None }))
            .await
            .expect("list")
            .into_inner();
        assert!(l.jobs.is_empty());
        let io = s
            .cluster_io_share(admin(pb::ClusterIoShareRequest { top_n: 0 }))
            .await
            .expect("io share")
            .into_inner();
        assert_eq!(io.jobs_total, 0);
        assert_eq!(io.total.and_then(|t| t.read_bytes_per_second), None);
    }

    #[tokio::test]
    async fn requests_without_access_fail_closed_and_users_see_no_nodes() {
        let s = service();
        let e = s
            .list_jobs(Request::new(pb::ListJobsRequest { filter: None }))
            .await
            .expect_err("no access attached");
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        let mut r = Request::new(pb::NodeStressRequest { node: "n".into() });
        r.extensions_mut().insert(Access::User("alice".into()));
        let e = s.node_stress(r).await.expect_err("user");
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    }
}
