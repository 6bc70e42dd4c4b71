//! Job metadata from the scheduler: owner, account, partition and the
//! allocation (CPUs, memory, GPUs) that efficiency is measured against.
//!
//! - [`parse_scontrol_job`]: pure parser of `scontrol show job -o <id>`.
//! - [`cache::MetaCache`]: sans-I/O policy: ask once per new job, refresh
//!   rarely, back off on failure, forget ended jobs. Never a call per tick.
//! - [`worker::ScontrolWorker`]: the thin shell, one background thread that
//!   runs `scontrol` with a timeout so a slow scheduler never stalls a tick.

pub mod cache;
pub mod worker;

#[cfg(test)]
mod tests;

use crate::error::LeafError;

/// What the scheduler says about one job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobMeta {
    /// Job id.
    pub job_id: u64,
    /// Owner's user name (`UserId=name(uid)`).
    pub user: String,
    /// Owner's uid, when given.
    pub uid: Option<u32>,
    /// Account, empty when Slurm prints `(null)`.
    pub account: String,
    /// Partition.
    pub partition: String,
    /// `JobState`, e.g. `RUNNING`.
    pub state: String,
    /// Allocated CPUs (`NumCPUs`, or TRES `cpu=`).
    pub cpus: Option<u64>,
    /// Allocated memory in bytes (TRES `mem=`).
    pub memory_bytes: Option<u64>,
    /// Allocated GPUs (TRES `gres/gpu=`); 0 when the job has none.
    pub gpus: u64,
}

const FORMAT: &str = "scontrol show job -o";

/// Splits one `-o` line into `key=value` pairs. Values may contain spaces
/// (`JobName=my job`): a word without `=` continues the previous value.
fn pairs(line: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for word in line.split_whitespace() {
        match word.split_once('=') {
            Some((k, v))
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/:_-".contains(c)) =>
            {
                out.push((k, v.to_string()));
            }
            _ => {
                if let Some(last) = out.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(word);
                }
            }
        }
    }
    out
}

/// Parses a Slurm size such as `512M`, `1.50G`, `2T` or `1024` (MiB when no
/// unit, as Slurm prints memory) into bytes.
pub fn parse_slurm_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last()? {
        (i, 'K') => (&t[..i], 1u64 << 10),
        (i, 'M') => (&t[..i], 1 << 20),
        (i, 'G') => (&t[..i], 1 << 30),
        (i, 'T') => (&t[..i], 1 << 40),
        (i, 'P') => (&t[..i], 1 << 50),
        _ => (t, 1 << 20),
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v >= 0.0 && v < 1e18 / mult as f64).then(|| (v * mult as f64).round() as u64)
}

fn null(v: &str) -> &str {
    if v == "(null)" || v == "N/A" { "" } else { v }
}

/// Parses `scontrol show job -o <id>` output (one line per job; the line of
/// job `want` is used, so a heterogeneous or array listing is fine).
pub fn parse_scontrol_job(text: &str, want: u64) -> Result<JobMeta, LeafError> {
    for (i, line) in text.lines().enumerate() {
        let kv = pairs(line);
        let get = |k: &str| {
            kv.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        let Some(id) = get("JobId") else { continue };
        let id: u64 = id
            .parse()
            .map_err(|_| LeafError::parse(FORMAT, i + 1, format!("JobId: {id:?}")))?;
        if id != want {
            continue;
        }
        let user_field = get("UserId").ok_or(LeafError::Missing {
            format: FORMAT,
            field: "UserId",
        })?;
        // `name(uid)`; an unknown uid prints just the number.
        let (user, uid) = match user_field.split_once('(') {
            Some((u, rest)) => (u.to_string(), rest.trim_end_matches(')').parse().ok()),
            None => (user_field.to_string(), user_field.parse().ok()),
        };
        let mut m = JobMeta {
            job_id: id,
            user,
            uid,
            account: null(get("Account").unwrap_or("")).to_string(),
            partition: null(get("Partition").unwrap_or("")).to_string(),
            state: get("JobState").unwrap_or("").to_string(),
            cpus: get("NumCPUs").and_then(|v| v.parse().ok()),
            ..JobMeta::default()
        };
        // TRES=cpu=2,mem=700M,node=1,billing=2,gres/gpu=1 (AllocTRES on newer Slurm).
        if let Some(tres) = get("AllocTRES").or_else(|| get("TRES")) {
            for item in tres.split(',') {
                let Some((k, v)) = item.split_once('=') else {
                    continue;
                };
                match k {
                    "cpu" if m.cpus.is_none() => m.cpus = v.parse().ok(),
                    "mem" => m.memory_bytes = parse_slurm_size(v),
                    "gres/gpu" => m.gpus = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        if m.user.is_empty() {
            return Err(LeafError::parse(FORMAT, i + 1, "empty UserId"));
        }
        return Ok(m);
    }
    Err(LeafError::parse(
        FORMAT,
        0,
        format!("no line for job {want}"),
    ))
}

/// Parses `/etc/passwd` into (uid, name) pairs: the fallback for the `user`
/// label when the scheduler does not answer.
pub fn parse_passwd(text: &str) -> Vec<(u32, String)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let uid = f.nth(1)?.parse().ok()?;
            (!name.is_empty()).then(|| (uid, name.to_string()))
        })
        .collect()
}
