//! `canopy jobs` and `canopy query`: ask a gateway's HTTP API, print a
//! table. The per-job numbers and verdicts come from the same stress core
//! (and so the same PromQL expressions) as the gRPC API.

use anyhow::{Context, Result, bail};
use canopy_gateway::stress::{Evaluator, JobFilter, JobStress, StateFilter, Thresholds};

use crate::client::{Gateway, HttpSource};
use crate::report::{self, JobSort};

/// The job filter of the command line.
pub fn filter(
    user: Option<String>,
    account: Option<String>,
    partition: Option<String>,
    node: Option<String>,
    running: bool,
) -> JobFilter {
    JobFilter {
        user,
        account,
        partition,
        node,
        state: if running {
            StateFilter::Running
        } else {
            StateFilter::Any
        },
    }
}

fn now_ms() -> i64 {
    canopy_proto::link::unix_now_ms()
}

/// The `canopy jobs` table.
pub fn jobs(gateway: &str, f: &JobFilter, sort: JobSort) -> Result<String> {
    let gw = Gateway::new(gateway)?;
    let th = Thresholds::default();
    let ev = Evaluator::with_source(
        HttpSource {
            gw: &gw,
            time_ms: now_ms(),
        },
        &th,
    );
    let scope = f.scope();
    let view = ev.running(&scope)?;
    let ended = match f.state {
        StateFilter::Running => Vec::new(),
        _ => ev.ended(&scope, &view)?,
    };
    let mut rows: Vec<JobStress> = view.jobs.into_values().collect();
    rows.extend(ended.into_iter().map(|job| JobStress {
        job,
        ..JobStress::default()
    }));
    rows.retain(|j| f.matches(&j.job));
    if rows.is_empty() {
        return Ok("no jobs\n".into());
    }
    Ok(report::jobs_table(&rows, sort))
}

/// The `canopy query` table: instant, or over `range` before `time`.
pub fn query(
    gateway: &str,
    q: &str,
    time: Option<&str>,
    range: Option<&str>,
    step: &str,
) -> Result<String> {
    let gw = Gateway::new(gateway)?;
    let data = match range {
        None => gw.query(q, time)?,
        Some(r) => {
            let len = canopy_gateway::promql::parse_duration_ms(r)
                .with_context(|| format!("--range {r:?} is not a duration like 15m"))?;
            let end = match time {
                None => now_ms() as f64 / 1000.0,
                Some(t) => match t.parse::<f64>() {
                    Ok(x) => x,
                    Err(_) => bail!("with --range, give --time as unix seconds"),
                },
            };
            gw.query_range(q, end - len as f64 / 1000.0, end, step)?
        }
    };
    report::query_table(&data)
}
