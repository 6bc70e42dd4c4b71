//! The data model every crate shares: label sets, metric kinds, samples.
//!
//! Follows the Prometheus data model: a series is a metric name plus labels,
//! a sample is (timestamp in ms, f64). The name is stored as the `__name__`
//! label so a label set alone identifies a series.

use std::fmt;
use std::sync::Arc;

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
/// Sorted order makes equality, hashing and the wire form canonical. The
/// pairs live in one shared, immutable buffer: a clone is a reference count,
/// so the decoders, merger, table and index of one process hold a label set
/// once (a relay or gateway keeps it per series, so this is most of its
/// memory). The few mutations copy the buffer.
#[derive(Clone, Default)]
pub struct Labels(Arc<LabelBuf>);

/// The pairs of a label set: names and values back to back in `text`;
/// `ends[2i]` ends name `i`, `ends[2i + 1]` ends its value.
#[derive(Default, PartialEq, Eq, Hash)]
struct LabelBuf {
    text: Box<str>,
    ends: Box<[u32]>,
}

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
        Self::pack(v.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// Packs pairs already sorted by name, unique, with non-empty values.
    fn pack<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Self {
        let (mut bytes, mut n) = (0usize, 0usize);
        for (k, v) in pairs.clone() {
            bytes += k.len() + v.len();
            n += 2;
        }
        let mut text = String::with_capacity(bytes);
        let mut ends = Vec::with_capacity(n);
        for (k, v) in pairs {
            text.push_str(k);
            ends.push(end_of(&text));
            text.push_str(v);
            ends.push(end_of(&text));
        }
        Labels(Arc::new(LabelBuf {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }))
    }

    /// [`Labels::from_pairs`] for borrowed pairs, without a `String` per
    /// name and value: one small scratch vector, then the packed buffer. A
    /// leaf builds label sets on every tick (issue 3: most of a host-only
    /// leaf's instructions went to the owned path).
    pub fn from_strs<'a, I>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut v: Vec<(&str, &str)> = Vec::with_capacity(8);
        for (k, val) in pairs {
            match v.binary_search_by(|(n, _)| (*n).cmp(k)) {
                Ok(i) => v[i].1 = val,
                Err(i) => v.insert(i, (k, val)),
            }
        }
        v.retain(|(_, val)| !val.is_empty());
        Self::pack(v.iter().copied())
    }

    /// [`Labels::metric`] for borrowed pairs (see [`Labels::from_strs`]):
    /// the same label set, built without allocating each name and value.
    pub fn metric_strs<'a, I>(name: &'a str, pairs: I) -> Self
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        Self::from_strs(std::iter::once((METRIC_NAME, name)).chain(pairs))
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

    /// Name and value of pair `i` (in range).
    fn pair(&self, i: usize) -> (&str, &str) {
        let b = &*self.0;
        let start = if i == 0 {
            0
        } else {
            b.ends[2 * i - 1] as usize
        };
        let mid = b.ends[2 * i] as usize;
        let end = b.ends[2 * i + 1] as usize;
        // Every end was taken from the text at a push: a char boundary.
        (
            b.text.get(start..mid).unwrap_or(""),
            b.text.get(mid..end).unwrap_or(""),
        )
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0usize, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.pair(mid).0.cmp(name) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// The metric name, or "" when there is none.
    pub fn name(&self) -> &str {
        self.get(METRIC_NAME).unwrap_or("")
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.find(name).ok().map(|i| self.pair(i).1)
    }

    /// Sets (or with an empty value, removes) one label.
    pub fn set(&mut self, name: &str, value: &str) {
        let at = self.find(name);
        if value.is_empty() && at.is_err() {
            return;
        }
        let mut v: Vec<(&str, &str)> = self.iter().collect();
        match at {
            Ok(i) if value.is_empty() => {
                v.remove(i);
            }
            Ok(i) => v[i].1 = value,
            Err(i) => v.insert(i, (name, value)),
        }
        *self = Self::pack(v.into_iter());
    }

    /// Removes one label, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let i = self.find(name).ok()?;
        let old = self.pair(i).1.to_string();
        let v: Vec<(&str, &str)> = self
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, p)| p)
            .collect();
        *self = Self::pack(v.into_iter());
        Some(old)
    }

    /// Iterates (name, value) pairs in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        (0..self.len()).map(|i| self.pair(i))
    }

    /// Number of labels, `__name__` included.
    pub fn len(&self) -> usize {
        self.0.ends.len() / 2
    }

    /// True when there is no label at all.
    pub fn is_empty(&self) -> bool {
        self.0.ends.is_empty()
    }

    /// True when both hold the same buffer (a clone of one another).
    pub fn shares_buffer(&self, other: &Labels) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Approximate heap size in bytes, for memory accounting (the shared
    /// buffer counted in full).
    pub fn heap_bytes(&self) -> usize {
        self.0.text.len() + self.0.ends.len() * 4 + 48
    }
}

/// Offset of the end of `text` (label sets are far below 4 GiB: the codec
/// caps them at `max_label_bytes`).
fn end_of(text: &str) -> u32 {
    u32::try_from(text.len()).unwrap_or(u32::MAX)
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Eq for Labels {}

impl std::hash::Hash for Labels {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialOrd for Labels {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Labels {
    /// Pair by pair, name then value (as a sorted list of pairs would).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.iter().cmp(other.iter())
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
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
    fn borrowed_builders_match_the_owned_ones() {
        let cases: [&[(&str, &str)]; 6] = [
            &[],
            &[("node", "n1"), ("device", "eth0")],
            &[("b", "2"), ("a", "x"), ("b", "3"), ("c", "")],
            &[("__name__", "other"), ("z", "1")],
            &[("a", ""), ("a", "later")],
            &[("a", "first"), ("a", "")],
        ];
        for pairs in cases {
            let owned = Labels::metric("m", pairs.iter().copied());
            let borrowed = Labels::metric_strs("m", pairs.iter().copied());
            assert_eq!(owned, borrowed, "{pairs:?}");
            assert_eq!(owned.to_string(), borrowed.to_string());
            assert_eq!(
                Labels::from_pairs(pairs.iter().copied()),
                Labels::from_strs(pairs.iter().copied()),
                "{pairs:?}"
            );
        }
        let l = Labels::metric_strs("m", [("b", "2"), ("a", "1"), ("b", "")]);
        assert_eq!(l.to_string(), "m{a=\"1\"}");
    }

    #[test]
    fn labels_set_remove_order_and_sharing() {
        let mut l = Labels::metric("m", [("b", "2"), ("a", "1")]);
        let c = l.clone();
        assert!(c.shares_buffer(&l));
        l.set("c", "3");
        l.set("a", "");
        assert_eq!(l.to_string(), "m{b=\"2\",c=\"3\"}");
        assert_eq!(l.remove("b").as_deref(), Some("2"));
        assert_eq!(l.remove("zz"), None);
        assert_eq!(l.len(), 2);
        assert_eq!(c.to_string(), "m{a=\"1\",b=\"2\"}");
        // Ordering is pair by pair, as a sorted list of pairs.
        let x = Labels::from_pairs([("a", "b"), ("c", "d")]);
        let y = Labels::from_pairs([("ab", "")]);
        let z = Labels::from_pairs([("a", "bc")]);
        assert!(x < z, "(a,b) sorts before (a,bc)");
        assert_eq!(y, Labels::default());
        assert!(Labels::default() < x);
        assert_eq!(x, Labels::from_pairs([("c", "d"), ("a", "b")]));
        assert!(!x.shares_buffer(&Labels::from_pairs([("c", "d"), ("a", "b")])));
    }

    #[test]
    fn stale_marker_is_nan_but_distinct() {
        assert!(stale_nan().is_nan());
        assert!(is_stale_nan(stale_nan()));
        assert!(!is_stale_nan(f64::NAN));
    }
}
