//! Reading and writing metric traces in the format of shared/traces/README.md.
//!
//! A trace is Prometheus text exposition split into scrapes by
//! `# SCRAPE <unix_ms>` lines; `# TYPE` lines give each metric's type.

use std::collections::HashMap;
use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use canopy_proto::model::{Labels, MetricKind, format_value};

/// One scrape: its timestamp and samples in exposition order.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Unix time of the scrape, ms.
    pub ts_ms: i64,
    /// (series, kind, value).
    pub samples: Vec<(Labels, MetricKind, f64)>,
}

/// Reads a trace file; a name ending in `.zst` is decompressed first.
pub fn read_file(path: &std::path::Path) -> Result<Vec<Scrape>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let text = if path.extension().is_some_and(|e| e == "zst") {
        zstd::decode_all(bytes.as_slice()).context("zstd-decompressing the trace")?
    } else {
        bytes
    };
    parse(std::str::from_utf8(&text).context("trace is not UTF-8")?)
}

/// Parses trace text.
pub fn parse(text: &str) -> Result<Vec<Scrape>> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut out: Vec<Scrape> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(ts) = line.strip_prefix("# SCRAPE ") {
            out.push(Scrape {
                ts_ms: ts
                    .trim()
                    .parse()
                    .with_context(|| format!("line {}: bad SCRAPE", n + 1))?,
                samples: Vec::new(),
            });
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if let (Some(name), Some(ty)) = (it.next(), it.next()) {
                types.insert(name.to_string(), ty.to_string());
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(scrape) = out.last_mut() else {
            bail!("line {}: sample before the first # SCRAPE", n + 1);
        };
        let (labels, value) =
            parse_sample(line).with_context(|| format!("line {}: {line}", n + 1))?;
        let kind = kind_of(&types, &labels);
        scrape.samples.push((labels, kind, value));
    }
    Ok(out)
}

/// Counter for `counter` types and histogram/summary `_bucket`, `_sum`,
/// `_count`; gauge otherwise (gauge, untyped, summary quantiles).
fn kind_of(types: &HashMap<String, String>, labels: &Labels) -> MetricKind {
    let name = labels.name();
    match types.get(name).map(String::as_str) {
        Some("counter") => return MetricKind::Counter,
        Some(_) => return MetricKind::Gauge,
        None => {}
    }
    for suffix in ["_bucket", "_sum", "_count", "_total"] {
        if let Some(base) = name.strip_suffix(suffix)
            && let Some(t) = types.get(base)
        {
            return if matches!(t.as_str(), "histogram" | "summary" | "counter") {
                MetricKind::Counter
            } else {
                MetricKind::Gauge
            };
        }
    }
    MetricKind::Gauge
}

/// Parses `name{a="x",b="y"} value [timestamp]`.
pub fn parse_sample(line: &str) -> Result<(Labels, f64)> {
    let (series, rest) = match line.find('{') {
        Some(open) => {
            let close = find_closing(line, open).context("unterminated label set")?;
            (&line[..=close], &line[close + 1..])
        }
        None => {
            let sp = line.find(char::is_whitespace).context("no value")?;
            (&line[..sp], &line[sp..])
        }
    };
    let value_str = rest.split_whitespace().next().context("no value")?;
    let value = parse_value(value_str)?;
    let (name, pairs) = match series.find('{') {
        Some(open) => (
            &series[..open],
            parse_labels(&series[open + 1..series.len() - 1])?,
        ),
        None => (series, Vec::new()),
    };
    Ok((Labels::metric(name, pairs), value))
}

fn find_closing(line: &str, open: usize) -> Option<usize> {
    let mut in_str = false;
    let mut esc = false;
    for (i, c) in line[open..].char_indices() {
        match (in_str, esc, c) {
            (true, true, _) => esc = false,
            (true, false, '\\') => esc = true,
            (true, false, '"') => in_str = false,
            (false, _, '"') => in_str = true,
            (false, _, '}') => return Some(open + i),
            _ => {}
        }
    }
    None
}

fn parse_labels(body: &str) -> Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let eq = rest.find('=').context("label without =")?;
        let name = rest[..eq].trim().to_string();
        let after = rest[eq + 1..].trim_start();
        let after = after.strip_prefix('"').context("label value not quoted")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("dangling escape"),
                },
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end.context("unterminated label value")?;
        pairs.push((name, value));
        rest = after[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Ok(pairs)
}

/// Parses a Prometheus float (`NaN`, `+Inf`, `-Inf` included).
pub fn parse_value(s: &str) -> Result<f64> {
    Ok(match s {
        "NaN" => f64::NAN,
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().with_context(|| format!("bad value {s:?}"))?,
    })
}

/// Writes one scrape block.
pub fn write_scrape(out: &mut String, ts_ms: i64, series: &[(Labels, f64)]) {
    let _ = writeln!(out, "# SCRAPE {ts_ms}");
    for (l, v) in series {
        let _ = writeln!(out, "{l} {}", format_value(*v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_types_escapes_and_specials() {
        let t = "# SCRAPE 1000\n# TYPE c counter\nc{a=\"x\\\"y\",b=\"2\"} 5\n# TYPE s summary\ns{quantile=\"0.5\"} NaN\ns_sum 1.5e3\ns_count 7\nu +Inf\n";
        let s = parse(t).expect("parse");
        assert_eq!(s.len(), 1);
        let v = &s[0].samples;
        assert_eq!(v[0].0.get("a"), Some("x\"y"));
        assert_eq!(v[0].1, MetricKind::Counter);
        assert_eq!(v[1].1, MetricKind::Gauge);
        assert!(v[1].2.is_nan());
        assert_eq!(v[2].1, MetricKind::Counter);
        assert_eq!(v[2].2, 1500.0);
        assert_eq!(v[3].1, MetricKind::Counter);
        assert_eq!(v[4].2, f64::INFINITY);
        let mut out = String::new();
        write_scrape(&mut out, 1000, &[(v[0].0.clone(), 5.0)]);
        assert_eq!(out, "# SCRAPE 1000\nc{a=\"x\\\"y\",b=\"2\"} 5\n");
    }
}
