//! The data model every crate shares: label sets, metric kinds, samples.
//!
//! Follows the Prometheus data model: a series is a metric name plus labels,
//! a sample is (timestamp in ms, f64). The name is stored as the `__name__`
//! label so a label set alone identifies a series.

use std::fmt;

/// The label that holds the metric name.
pub const METRIC_NAME: &str = "__name__";

/// Bit pattern of Prometheus's staleness marker (a signalling NaN).
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// True when `v` is exactly Prometheus's staleness marker.
pub fn is_stale_nan(v: f64) -> bool {
    v.to_bits() == STALE_NAN_BITS
}

/// The staleness marker as an f64.
pub fn stale_nan() -> f64 {
    f64::from_bits(STALE_NAN_BITS)
}

/// Formats a float the way Prometheus does (`strconv.FormatFloat(v, 'f', -1, 64)`):
/// shortest round-trip form, `NaN`, `+Inf`, `-Inf`.
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// A set of labels kept sorted by name, with unique names.
///
/// Sorted order makes equality, hashing and the wire form canonical.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<(String, String)>);

impl Labels {
    /// Builds a label set from pairs; later duplicates replace earlier ones,
    /// empty values are dropped (Prometheus treats them as absent).
    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut v: Vec<(String, String)> = Vec::new();
        for (k, val) in pairs {
            let (k, val) = (k.into(), val.into());
            match v.binary_search_by(|(n, _)| n.as_str().cmp(&k)) {
                Ok(i) => v[i].1 = val,
                Err(i) => v.insert(i, (k, val)),
            }
        }
        v.retain(|(_, val)| !val.is_empty());
        Labels(v)
    }

    /// A label set for metric `name` with the given other labels.
    pub fn metric<I, K, V>(name: &str, pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut all: Vec<(String, String)> = vec![(METRIC_NAME.to_string(), name.to_string())];
        all.extend(pairs.into_iter().map(|(k, v)| (k.into(), v.into())));
        Self::from_pairs(all)
    }

    /// The metric name, or "" when there is none.
    pub fn name(&self) -> &str {
        self.get(METRIC_NAME).unwrap_or("")
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// Sets (or with an empty value, removes) one label.
    pub fn set(&mut self, name: &str, value: &str) {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) if value.is_empty() => {
                self.0.remove(i);
            }
            Ok(i) => self.0[i].1 = value.to_string(),
            Err(_) if value.is_empty() => {}
            Err(i) => self.0.insert(i, (name.to_string(), value.to_string())),
        }
    }

    /// Removes one label, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => Some(self.0.remove(i).1),
            Err(_) => None,
        }
    }

    /// Iterates (name, value) pairs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of labels, `__name__` included.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there is no label at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Approximate heap size in bytes, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len() + 48).sum()
    }
}

impl fmt::Display for Labels {
    /// Prometheus text form: `name{a="x",b="y"}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut first = true;
        for (k, v) in self.iter().filter(|(k, _)| *k != METRIC_NAME) {
            f.write_str(if first { "{" } else { "," })?;
            first = false;
            write!(f, "{k}=\"")?;
            for c in v.chars() {
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '"' => f.write_str("\\\"")?,
                    '\n' => f.write_str("\\n")?,
                    c => write!(f, "{c}")?,
                }
            }
            f.write_str("\"")?;
        }
        if !first {
            f.write_str("}")?;
        }
        Ok(())
    }
}

/// Whether a series is a counter (monotonic, `rate()`-able) or a gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// A value that goes up and down; relative error bound.
    Gauge,
    /// A monotonic total that only resets to a lower value; absolute bound.
    Counter,
}

/// One observation of one series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Unix time in milliseconds.
    pub ts_ms: i64,
    /// The value; may be the staleness marker.
    pub value: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_sorted_unique_and_display() {
        let l = Labels::metric("m", [("b", "2"), ("a", "x\"y"), ("b", "3"), ("c", "")]);
        assert_eq!(l.name(), "m");
        assert_eq!(l.get("b"), Some("3"));
        assert_eq!(l.get("c"), None);
        assert_eq!(l.to_string(), "m{a=\"x\\\"y\",b=\"3\"}");
    }

    #[test]
    fn stale_marker_is_nan_but_distinct() {
        assert!(stale_nan().is_nan());
        assert!(is_stale_nan(stale_nan()));
        assert!(!is_stale_nan(f64::NAN));
    }
}
