//! `canopy jobs` and `canopy query`: ask a gateway's HTTP API, print a
//! table. The per-job numbers and verdicts come from the same stress core
//! (and so the same PromQL expressions) as the gRPC API.

use std::path::Path;

use anyhow::{Context, Result, bail};
use canopy_gateway::auth::{Access, Role, tokens};
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

/// The gateway's stress thresholds (its `[thresholds]`), so the table
/// judges as the gateway's gRPC API and dashboard do; the defaults, with a
/// note on stderr, from a gateway that does not serve them.
pub fn gateway_thresholds(gw: &Gateway) -> Thresholds {
    match gw
        .get("/api/v1/status/stress_thresholds", &[])
        .and_then(|d| serde_json::from_value(d).map_err(anyhow::Error::from))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "note: the gateway's thresholds are unknown ({e:#}); judging with the defaults"
            );
            Thresholds::default()
        }
    }
}

/// The `canopy jobs` table.
pub fn jobs(gw: &Gateway, f: &JobFilter, sort: JobSort) -> Result<String> {
    let th = gateway_thresholds(gw);
    let ev = Evaluator::with_source(
        HttpSource {
            gw,
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
    gw: &Gateway,
    q: &str,
    time: Option<&str>,
    range: Option<&str>,
    step: &str,
) -> Result<String> {
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

/// `canopy token`: a new secret for `role` (and `user`), printed once with
/// the line for the tokens file; with `append`, the line is added to it.
pub fn token(role: &str, user: Option<String>, append: Option<&Path>) -> Result<String> {
    let role: Role = role.parse()?;
    let access = match (role, user) {
        (Role::User, Some(u)) if tokens::valid_user(&u) => Access::User(u),
        (Role::User, Some(u)) => {
            bail!("--user {u:?}: a user name has no spaces or control characters")
        }
        (Role::User, None) => {
            bail!("a user token needs --user NAME (the value of the `user` label)")
        }
        (_, Some(_)) => bail!("only user tokens take --user"),
        (Role::Admin, None) => Access::Admin,
        (Role::Scheduler, None) => Access::Scheduler,
    };
    let (secret, entry) = tokens::mint(access)?;
    let line = entry.line();
    let mut out = format!("secret: {secret}\nline:   {line}\n");
    match append {
        Some(f) => {
            use std::io::Write;
            let mut o = std::fs::OpenOptions::new();
            o.create(true).append(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            let mut file = o
                .open(f)
                .with_context(|| format!("opening {}", f.display()))?;
            writeln!(file, "{line}").with_context(|| format!("writing {}", f.display()))?;
            out.push_str(&format!(
                "appended the line to {} (restart the gateway to load it); the secret is not stored anywhere: keep it now\n",
                f.display()
            ));
        }
        None => out.push_str(
            "add the line to the gateway's tokens file (--tokens FILE or `tokens = \"FILE\"`); the secret is shown only now\n",
        ),
    }
    Ok(out)
}
