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
///
/// The buffer is one allocation (an `Arc<str>`), not three: a gateway
/// builds a label set per selected series for every query, and a profile
/// of one serving `sum by` spent over a third of its CPU in malloc. Layout
/// (see [`Labels::pack`]): a width byte `w` (3 or 5), the number of end
/// offsets in `w` 7-bit digits, the end offsets (each `w` digits), then the
/// names and values back to back. 7-bit digits keep the buffer ASCII up to
/// the text, so it is a valid `str` with no unsafe code; `ends[2i]` ends
/// name `i` and `ends[2i + 1]` its value, counted from the text's start.
#[derive(Clone)]
pub struct Labels(Arc<str>);

/// Offsets of up to this many bytes fit three 7-bit digits.
const NARROW_MAX: usize = (1 << 21) - 1;

/// Reads one offset of `w` 7-bit digits (big-endian).
#[inline]
fn read_digits(b: &[u8]) -> usize {
    b.iter()
        .fold(0usize, |v, &d| (v << 7) | usize::from(d & 0x7f))
}

/// Appends `v` as `w` 7-bit digits (big-endian).
/// Name and value of pair `i` of a label buffer's parts (see
/// [`Labels::parts`]); empty strings past the end.
#[inline]
fn pair_in<'a>(w: usize, ends: &[u8], text: &'a str, i: usize) -> (&'a str, &'a str) {
    let end = |k: usize| ends.get(k * w..(k + 1) * w).map_or(0, read_digits);
    let start = if i == 0 { 0 } else { end(2 * i - 1) };
    let (mid, stop) = (end(2 * i), end(2 * i + 1));
    // Every end was taken from the text at a push: a char boundary.
    (
        text.get(start..mid).unwrap_or(""),
        text.get(mid..stop).unwrap_or(""),
    )
}

fn push_digits(out: &mut String, v: usize, w: usize) {
    for k in (0..w).rev() {
        // Below 0x80: one ASCII char per digit.
        out.push(char::from(((v >> (7 * k)) & 0x7f) as u8));
    }
}

impl Default for Labels {
    /// The empty label set (one shared buffer for every empty set).
    fn default() -> Self {
        static EMPTY: std::sync::OnceLock<Labels> = std::sync::OnceLock::new();
        EMPTY
            .get_or_init(|| Labels::pack(std::iter::empty()))
            .clone()
    }
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
        let owned: Vec<(String, String)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Self::from_strs(owned.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// Builds a label set from borrowed pairs that are usually already
    /// canonical (sorted by name, unique, non-empty values, as a store's
    /// label sets are): then packed in one pass without per-string copies;
    /// anything else goes through [`Labels::from_strs`], so the result is
    /// the same either way.
    pub fn from_sorted_pairs<'a, I>(pairs: I) -> Self
    where
        I: Iterator<Item = (&'a str, &'a str)> + Clone,
    {
        let mut prev: Option<&str> = None;
        let canonical = pairs.clone().all(|(k, v)| {
            let ok = !v.is_empty() && prev.is_none_or(|p| p < k);
            prev = Some(k);
            ok
        });
        if canonical {
            Self::pack(pairs)
        } else {
            Self::from_strs(pairs)
        }
    }

    /// Packs pairs already sorted by name, unique, with non-empty values,
    /// into the one buffer described on [`Labels`].
    fn pack<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Self {
        let (mut bytes, mut n) = (0usize, 0usize);
        for (k, v) in pairs.clone() {
            bytes += k.len() + v.len();
            n += 2;
        }
        let w = if bytes.max(n) <= NARROW_MAX { 3 } else { 5 };
        let mut buf = String::with_capacity(1 + w * (n + 1) + bytes);
        buf.push(char::from(w as u8));
        push_digits(&mut buf, n, w);
        let mut end = 0usize;
        for (k, v) in pairs.clone() {
            end += k.len();
            push_digits(&mut buf, end, w);
            end += v.len();
            push_digits(&mut buf, end, w);
        }
        for (k, v) in pairs {
            buf.push_str(k);
            buf.push_str(v);
        }
        Labels(Arc::from(buf))
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

    /// The digit width, the end offsets' bytes and the text.
    #[inline]
    fn parts(&self) -> (usize, &[u8], &str) {
        let b = self.0.as_bytes();
        let w = usize::from(b.first().copied().unwrap_or(3));
        let n = b.get(1..1 + w).map_or(0, read_digits);
        let text_at = 1 + w + n * w;
        (
            w,
            b.get(1 + w..text_at).unwrap_or(&[]),
            // The header is ASCII: the text starts at a char boundary.
            self.0.get(text_at..).unwrap_or(""),
        )
    }

    /// Name and value of pair `i` (in range).
    fn pair(&self, i: usize) -> (&str, &str) {
        let (w, ends, text) = self.parts();
        pair_in(w, ends, text, i)
    }

    /// Binary search for label `name` (the header parsed once, not per probe).
    fn find(&self, name: &str) -> Result<usize, usize> {
        let (w, ends, text) = self.parts();
        let (mut lo, mut hi) = (0usize, ends.len() / (2 * w));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match pair_in(w, ends, text, mid).0.cmp(name) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// The metric name, or "" when there is none. Names sort, and
    /// `__name__` before any name starting with a lowercase letter: the
    /// first pair is looked at before the binary search (a collector
    /// reading the tick's buffer asks this of every observation).
    pub fn name(&self) -> &str {
        let (w, ends, text) = self.parts();
        match pair_in(w, ends, text, 0) {
            (METRIC_NAME, v) => v,
            _ => self.get(METRIC_NAME).unwrap_or(""),
        }
    }

    /// The value of label `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        let (w, ends, text) = self.parts();
        let (mut lo, mut hi) = (0usize, ends.len() / (2 * w));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (n, v) = pair_in(w, ends, text, mid);
            match n.cmp(name) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(v),
            }
        }
        None
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
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + Clone {
        let (w, ends, text) = self.parts();
        Pairs {
            text,
            ends: ends.chunks_exact(2 * w),
            w,
            start: 0,
        }
    }

    /// Number of labels, `__name__` included.
    pub fn len(&self) -> usize {
        let (w, ends, _) = self.parts();
        ends.len() / (2 * w)
    }

    /// True when there is no label at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when both hold the same buffer (a clone of one another).
    pub fn shares_buffer(&self, other: &Labels) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Approximate heap size in bytes, for memory accounting (the shared
    /// buffer counted in full: its bytes and the two reference counts).
    pub fn heap_bytes(&self) -> usize {
        self.0.len() + 16
    }
}

/// The pairs of a label set in order, walking the end offsets once (the
/// gateway's remote_write series cache compares every pair of a label set
/// per series and request: a per-index lookup cost a third of that).
#[derive(Clone)]
struct Pairs<'a> {
    text: &'a str,
    /// One chunk per pair: its name's end, then its value's end.
    ends: std::slice::ChunksExact<'a, u8>,
    /// Digits per offset.
    w: usize,
    /// Where the next name starts.
    start: usize,
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a str, &'a str);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let pair = self.ends.next()?;
        let (mid, end) = pair.split_at(self.w);
        let (mid, end) = (read_digits(mid), read_digits(end));
        let start = std::mem::replace(&mut self.start, end);
        // Every end was taken from the text at a push: a char boundary.
        Some((
            self.text.get(start..mid).unwrap_or(""),
            self.text.get(mid..end).unwrap_or(""),
        ))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for Pairs<'_> {}

impl PartialEq for Labels {
    /// The buffer is canonical (sorted pairs, a width fixed by the sizes):
    /// equal label sets have equal bytes.
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
    fn from_sorted_pairs_equals_from_pairs_for_any_input() {
        let cases: [&[(&str, &str)]; 6] = [
            &[("__name__", "m"), ("a", "1"), ("b", "2")],
            &[("b", "2"), ("a", "1")],
            &[("a", "1"), ("a", "2")],
            &[("a", ""), ("b", "2")],
            &[("a", "1"), ("b", "")],
            &[],
        ];
        for pairs in cases {
            let fast = Labels::from_sorted_pairs(pairs.iter().copied());
            let slow = Labels::from_pairs(pairs.iter().copied());
            assert_eq!(fast, slow, "{pairs:?}");
            assert_eq!(fast.to_string(), slow.to_string());
        }
    }

    #[test]
    fn pairs_walk_names_and_values_in_order() {
        let l = Labels::metric("m", [("b", "ü2"), ("a", "1"), ("é", "x")]);
        let got: Vec<(&str, &str)> = l.iter().collect();
        assert_eq!(
            got,
            [("__name__", "m"), ("a", "1"), ("b", "ü2"), ("é", "x")]
        );
        assert_eq!(l.iter().len(), 4);
        let mut it = l.iter();
        it.next();
        assert_eq!(it.len(), 3);
        assert_eq!(it.clone().next(), it.next());
        assert_eq!(Labels::default().iter().next(), None);
        for (i, p) in l.iter().enumerate() {
            assert_eq!(p, l.pair(i));
        }
    }

    #[test]
    fn one_buffer_holds_narrow_and_wide_label_sets() {
        // Past 2 MiB of text the offsets take five digits instead of three.
        let big = "v".repeat(NARROW_MAX + 10);
        for value in ["ü-ß", big.as_str()] {
            let l = Labels::metric("m", [("z", value), ("a", "1"), ("é", "x")]);
            let want = [("__name__", "m"), ("a", "1"), ("z", value), ("é", "x")];
            assert_eq!(l.iter().collect::<Vec<_>>(), want);
            assert_eq!(l.len(), 4);
            assert_eq!(l.get("z"), Some(value));
            assert_eq!(l.get("é"), Some("x"));
            assert_eq!(l.get("b"), None);
            assert_eq!(l.name(), "m");
            let again = Labels::from_sorted_pairs(want.iter().copied());
            assert_eq!(again, l);
            assert!(!again.shares_buffer(&l));
            let hash = |x: &Labels| {
                use std::hash::{BuildHasher, BuildHasherDefault};
                BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                    .hash_one(x)
            };
            assert_eq!(hash(&again), hash(&l));
            assert!(l.heap_bytes() > value.len());
        }
        let empty = Labels::default();
        assert!(empty.is_empty());
        assert_eq!(empty.len(), 0);
        assert_eq!(empty, Labels::from_pairs(Vec::<(String, String)>::new()));
        assert_eq!(empty.iter().next(), None);
        assert_eq!(empty.name(), "");
    }

    /// `name` looks at the first pair first; a name sorting before
    /// `__name__` (uppercase) still finds it, and a set without one is "".
    #[test]
    fn the_name_wherever_it_sorts() {
        let first = Labels::from_pairs([("__name__", "m"), ("job", "j")]);
        assert_eq!(first.name(), "m");
        let second = Labels::from_pairs([("Zone", "z"), ("__name__", "m"), ("a", "1")]);
        assert_eq!(second.iter().next(), Some(("Zone", "z")));
        assert_eq!(second.name(), "m");
        assert_eq!(Labels::from_pairs([("Zone", "z"), ("a", "1")]).name(), "");
        assert_eq!(Labels::from_pairs([("job", "j")]).name(), "");
    }

    #[test]
    fn label_sets_order_like_their_pair_lists() {
        let sets = [
            Labels::metric("a", [("x", "1")]),
            Labels::metric("a", [("x", "10")]),
            Labels::metric("a", [("x", "2")]),
            Labels::metric("a", [("y", "1")]),
            Labels::metric("b", Vec::<(String, String)>::new()),
            Labels::default(),
        ];
        for a in &sets {
            for b in &sets {
                let pa: Vec<_> = a.iter().collect();
                let pb: Vec<_> = b.iter().collect();
                assert_eq!(a.cmp(b), pa.cmp(&pb), "{a} vs {b}");
                assert_eq!(a == b, pa == pb);
            }
        }
    }

    proptest::proptest! {
        /// Any pairs: the label set holds what a sorted map of the non-empty
        /// values holds, and every accessor agrees with it.
        #[test]
        fn label_sets_hold_what_a_sorted_map_holds(
            pairs in proptest::collection::vec(("[a-cé_]{0,3}", "[x-zü]{0,3}"), 0..12)
        ) {
            let l = Labels::from_pairs(pairs.clone());
            let mut model = std::collections::BTreeMap::new();
            for (k, v) in &pairs {
                model.insert(k.clone(), v.clone());
            }
            model.retain(|_, v: &mut String| !v.is_empty());
            let want: Vec<(&str, &str)> =
                model.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            proptest::prop_assert_eq!(l.iter().collect::<Vec<_>>(), want.clone());
            proptest::prop_assert_eq!(l.len(), want.len());
            for (k, v) in &want {
                proptest::prop_assert_eq!(l.get(k), Some(*v));
            }
            proptest::prop_assert_eq!(Labels::from_sorted_pairs(want.iter().copied()), l);
        }
    }

    #[test]
    fn stale_marker_is_nan_but_distinct() {
        assert!(stale_nan().is_nan());
        assert!(is_stale_nan(stale_nan()));
        assert!(!is_stale_nan(f64::NAN));
    }
}
