//! Tables for the terminal: `canopy jobs` (per-job efficiency, like seff
//! and cacct) and `canopy query` (a PromQL answer). Pure: data in, text out.

use anyhow::{Result, bail};
use canopy_gateway::stress::verdict::{human_bytes, human_rate};
use canopy_gateway::stress::{JobStress, job_id_order};
use clap::ValueEnum;
use serde_json::Value as Json;

use crate::client::{labels, parse_value};

/// Aligns `rows` under `headers`; numeric-looking cells align right.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(x) = w.get_mut(i) {
                *x = (*x).max(c.chars().count());
            }
        }
    }
    let right = |c: &str| {
        c.chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_digit() || ch == '-' || ch == '+')
            && c.chars().any(|ch| ch.is_ascii_digit())
    };
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i].saturating_sub(c.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if right(c) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(headers.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// Order of `canopy jobs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JobSort {
    /// By job id.
    Id,
    /// Most cores busy first.
    Cpu,
    /// Most GPU SM time first (GPUs x utilisation).
    Gpu,
    /// Most bytes read+written per second first.
    Io,
    /// Most idle allocation first: idle cores, plus 8 per idle GPU.
    Waste,
}

/// Idle allocation: allocated cores not busy, plus 8 cores per idle GPU
/// (a GPU node's ratio), so a job holding idle GPUs sorts above one
/// holding a few idle cores.
pub fn waste(j: &JobStress) -> f64 {
    let cpu = match (j.cores_allocated, j.cores_used) {
        (Some(a), Some(u)) => (a - u).max(0.0),
        _ => 0.0,
    };
    let gpu = match (j.gpus_allocated, j.gpu_sm_utilization) {
        (Some(g), Some(u)) => g * (1.0 - u).clamp(0.0, 1.0),
        _ => 0.0,
    };
    cpu + 8.0 * gpu
}

fn sort_key(j: &JobStress, by: JobSort) -> f64 {
    match by {
        JobSort::Id => 0.0,
        JobSort::Cpu => j.cores_used.unwrap_or(-1.0),
        JobSort::Gpu => j.gpus_allocated.unwrap_or(0.0) * j.gpu_sm_utilization.unwrap_or(0.0),
        JobSort::Io => j.io.read_bytes.unwrap_or(0.0) + j.io.write_bytes.unwrap_or(0.0),
        JobSort::Waste => waste(j),
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

fn pct(n: Option<f64>, d: Option<f64>) -> String {
    match (n, d) {
        (Some(n), Some(d)) if d > 0.0 => format!("{:.0}%", 100.0 * n / d),
        _ => "-".into(),
    }
}

/// The `canopy jobs` table, sorted `by` (ties and `Id`: by job id).
pub fn jobs_table(jobs: &[JobStress], by: JobSort) -> String {
    let mut v: Vec<&JobStress> = jobs.iter().collect();
    v.sort_by(|a, b| {
        sort_key(b, by)
            .partial_cmp(&sort_key(a, by))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| job_id_order(&a.job.job_id, &b.job.job_id))
    });
    let rows: Vec<Vec<String>> = v
        .iter()
        .map(|j| {
            let gpu = match (j.gpus_allocated, j.gpu_sm_utilization) {
                (Some(g), u) if g > 0.0 => {
                    format!("{g:.0}x{}", opt(u, |u| format!("{:.0}%", u * 100.0)))
                }
                _ => "-".into(),
            };
            let nodes = match j.job.nodes.len() {
                1 => j.job.nodes[0].clone(),
                n => format!("{n} nodes"),
            };
            vec![
                j.job.job_id.clone(),
                j.job.user.clone(),
                j.job.account.clone(),
                j.job.partition.clone(),
                nodes,
                if j.job.running { "running" } else { "ended" }.into(),
                format!(
                    "{}/{}",
                    opt(j.cores_used, |x| format!("{x:.1}")),
                    opt(j.cores_allocated, |x| format!("{x:.0}"))
                ),
                pct(j.cores_used, j.cores_allocated),
                format!(
                    "{}/{}",
                    opt(j.memory_used_bytes, human_bytes),
                    opt(j.memory_allocated_bytes, human_bytes)
                ),
                pct(j.memory_used_bytes, j.memory_allocated_bytes),
                gpu,
                opt(j.io.read_bytes, human_rate),
                opt(j.io.write_bytes, human_rate),
                opt(j.io_share.max_bytes_opt(), |s| format!("{:.0}%", s * 100.0)),
                if j.job.running {
                    j.verdict.as_str().into()
                } else {
                    "-".into()
                },
            ]
        })
        .collect();
    table(
        &[
            "JOBID",
            "USER",
            "ACCOUNT",
            "PARTITION",
            "NODES",
            "STATE",
            "CORES",
            "CPU%",
            "MEMORY",
            "MEM%",
            "GPUS",
            "READ",
            "WRITE",
            "IO%",
            "VERDICT",
        ],
        &rows,
    )
}

fn fmt_time(t: &Json) -> String {
    match t.as_f64() {
        Some(s) if s.fract() == 0.0 => format!("{s:.0}"),
        Some(s) => format!("{s:.3}"),
        None => t.to_string(),
    }
}

fn fmt_value(v: &Json) -> String {
    let x = parse_value(v);
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        v.as_str().unwrap_or("?").to_string()
    }
}

/// A query answer (`data` of /api/v1/query or query_range) as a table:
/// one column per label (the metric name first), then the time and value;
/// a range answer has one row per point.
pub fn query_table(data: &Json) -> Result<String> {
    let rt = data["resultType"].as_str().unwrap_or("");
    let r = &data["result"];
    match rt {
        "scalar" | "string" => Ok(table(
            &["TIME", "VALUE"],
            &[vec![fmt_time(&r[0]), fmt_value(&r[1])]],
        )),
        "vector" | "matrix" => {
            let series: Vec<&Json> = r.as_array().into_iter().flatten().collect();
            if series.is_empty() {
                return Ok("no data\n".into());
            }
            let mut names: Vec<String> = Vec::new();
            let mut has_name = false;
            for s in &series {
                for (k, _) in labels(&s["metric"]).iter() {
                    if k == "__name__" {
                        has_name = true;
                    } else if !names.iter().any(|n| n == k) {
                        names.push(k.to_string());
                    }
                }
            }
            names.sort();
            if has_name {
                names.insert(0, "__name__".into());
            }
            let mut rows = Vec::new();
            for s in &series {
                let l = labels(&s["metric"]);
                let cells: Vec<String> = names
                    .iter()
                    .map(|n| l.get(n).unwrap_or("").to_string())
                    .collect();
                let points: Vec<&Json> = if rt == "vector" {
                    vec![&s["value"]]
                } else {
                    s["values"].as_array().into_iter().flatten().collect()
                };
                for p in points {
                    let mut row = cells.clone();
                    row.push(fmt_time(&p[0]));
                    row.push(fmt_value(&p[1]));
                    rows.push(row);
                }
            }
            let mut headers: Vec<String> = names
                .iter()
                .map(|n| {
                    if n == "__name__" {
                        "NAME".into()
                    } else {
                        n.clone()
                    }
                })
                .collect();
            headers.push("TIME".into());
            headers.push("VALUE".into());
            let h: Vec<&str> = headers.iter().map(String::as_str).collect();
            Ok(table(&h, &rows))
        }
        other => bail!("unexpected result type {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canopy_gateway::stress::{Io, JobIdentity, Verdict};
    use serde_json::json;

    fn job(id: &str, used: f64, alloc: f64, gpus: Option<(f64, f64)>) -> JobStress {
        JobStress {
            job: JobIdentity {
                job_id: id.into(),
                user: "alice".into(),
                account: "physics".into(),
                partition: "cpu".into(),
                nodes: vec!["n1".into()],
                running: true,
            },
            cores_used: Some(used),
            cores_allocated: Some(alloc),
            gpus_allocated: gpus.map(|g| g.0),
            gpu_sm_utilization: gpus.map(|g| g.1),
            io: Io {
                read_bytes: Some(used * 1e6),
                ..Io::default()
            },
            verdict: Verdict::Ok,
            ..JobStress::default()
        }
    }

    #[test]
    fn jobs_table_sorts_and_shows_efficiency() {
        let jobs = vec![
            job("10", 7.5, 8.0, None),
            job("9", 1.0, 16.0, None),
            job("11", 8.0, 16.0, Some((4.0, 0.02))),
        ];
        let t = jobs_table(&jobs, JobSort::Id);
        let ids: Vec<&str> = t
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(ids, vec!["9", "10", "11"]);
        assert!(t.lines().next().is_some_and(|h| h.starts_with("JOBID")));
        let row10 = t
            .lines()
            .find(|l| l.split_whitespace().next() == Some("10"))
            .expect("row 10");
        assert!(row10.contains("7.5/8"), "{row10}");
        assert!(row10.contains("94%"), "{row10}");
        assert!(row10.contains("7.5 MB/s"), "{row10}");

        let order = |by: JobSort| -> Vec<String> {
            jobs_table(&jobs, by)
                .lines()
                .skip(1)
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        };
        // 11: 8 idle cores + 8 x 3.92 idle GPUs; 9: 15 idle cores; 10: 0.5.
        assert_eq!(order(JobSort::Waste), vec!["11", "9", "10"]);
        assert_eq!(order(JobSort::Cpu), vec!["11", "10", "9"]);
        assert!(jobs_table(&jobs, JobSort::Id).contains("4x2%"));
    }

    #[test]
    fn query_tables() {
        let v = json!({"resultType": "vector", "result": [
            {"metric": {"__name__": "up", "node": "n1"}, "value": [1700000000, "1"]},
            {"metric": {"__name__": "up", "node": "n2"}, "value": [1700000000, "0"]},
        ]});
        let t = query_table(&v).expect("table");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            vec!["NAME", "node", "TIME", "VALUE"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            vec!["up", "n2", "1700000000", "0"]
        );
        let m = json!({"resultType": "matrix", "result": [
            {"metric": {"job_id": "7"}, "values": [[1.5, "0.25"], [2.5, "NaN"]]},
        ]});
        let t = query_table(&m).expect("table");
        assert_eq!(t.lines().count(), 3);
        assert!(
            t.contains("1.500") && t.contains("0.25") && t.contains("NaN"),
            "{t}"
        );
        let s = json!({"resultType": "scalar", "result": [10, "3"]});
        assert_eq!(
            query_table(&s)
                .expect("scalar")
                .lines()
                .nth(1)
                .map(|l| l.split_whitespace().collect::<Vec<_>>()),
            Some(vec!["10", "3"])
        );
        assert_eq!(
            query_table(&json!({"resultType": "vector", "result": []})).expect("empty"),
            "no data\n"
        );
    }
}
