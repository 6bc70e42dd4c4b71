//! From a decoded request's label bytes to [`Labels`], without parsing
//! or allocating for a series seen before.
//!
//! A sender writes the same series with the same label bytes request after
//! request. [`SeriesCache`] keys known series by a hash of those bytes and
//! confirms a hit by walking the bytes against the cached label set (name
//! and value compared in place), so a hash collision is only a miss. On a
//! miss the labels are parsed, validated (non-empty unique names, a metric
//! name) and the result cached. Only canonical encodings hit: labels sorted
//! by name with non-empty values, each `Label` holding name then value, as
//! Prometheus sends them; anything else takes the parsing path every time.
//! Beside each label set the cache keeps the store's [`SeriesHint`] for
//! it, so the store skips its own lookup of a series the cache confirmed.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};
use std::sync::{Mutex, PoisonError};

use canopy_proto::model::Labels;
use rustc_hash::FxHasher;

use crate::store::SeriesHint;

use super::RemoteWriteError;
use super::pb::{PbError, SeriesView, WriteBatch};

/// Known series by the hash of their label bytes (bounded).
#[derive(Debug)]
pub struct SeriesCache {
    map: Mutex<HashMap<u64, Cached, BuildHasherDefault<FxHasher>>>,
    max_entries: usize,
}

/// A cached series: its label set and where the store last found it.
#[derive(Debug)]
struct Cached {
    labels: Labels,
    hint: SeriesHint,
}

/// One series of a request, as [`SeriesCache::resolve_hinted`] found it.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// Its label set.
    pub labels: Labels,
    /// Its cache key, when its label bytes are cached (or now cacheable).
    pub key: Option<u64>,
    /// The store's hint for it (the default when not known yet).
    pub hint: SeriesHint,
}

impl Default for SeriesCache {
    fn default() -> Self {
        SeriesCache::new(1 << 20)
    }
}

impl SeriesCache {
    /// A cache of at most `max_entries` series; when full it starts over
    /// (a sender's active series refill it within one round of requests).
    pub fn new(max_entries: usize) -> Self {
        SeriesCache {
            map: Mutex::default(),
            max_entries: max_entries.max(1),
        }
    }

    /// Series currently cached.
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The label set of every series of `batch` (decoded from `buf`), in
    /// order, into `out`. The first series with unusable labels is the
    /// error (and `out` is then incomplete).
    pub fn resolve(
        &self,
        buf: &[u8],
        batch: &WriteBatch,
        out: &mut Vec<Labels>,
    ) -> Result<(), RemoteWriteError> {
        let mut all = Vec::new();
        let res = self.resolve_hinted(buf, batch, &mut all);
        out.clear();
        out.extend(all.into_iter().map(|r| r.labels));
        res
    }

    /// [`SeriesCache::resolve`] with each series' cache key and store hint.
    pub fn resolve_hinted(
        &self,
        buf: &[u8],
        batch: &WriteBatch,
        out: &mut Vec<Resolved>,
    ) -> Result<(), RemoteWriteError> {
        out.clear();
        out.reserve(batch.series_views().len());
        let hasher = BuildHasherDefault::<FxHasher>::default();
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for s in batch.series_views() {
            let key = s.label_bytes.map(|span| {
                let bytes = span.of(buf);
                (bytes, hasher.hash_one(bytes))
            });
            if let Some((bytes, h)) = key
                && let Some(c) = map.get(&h)
                && encodes(bytes, &c.labels)
            {
                out.push(Resolved {
                    labels: c.labels.clone(),
                    key: Some(h),
                    hint: c.hint,
                });
                continue;
            }
            let labels = parse(buf, batch, s)?;
            if let Some((_, h)) = key {
                if map.len() >= self.max_entries {
                    map.clear();
                }
                map.insert(
                    h,
                    Cached {
                        labels: labels.clone(),
                        hint: SeriesHint::default(),
                    },
                );
            }
            out.push(Resolved {
                labels,
                key: key.map(|(_, h)| h),
                hint: SeriesHint::default(),
            });
        }
        Ok(())
    }

    /// Keeps store hints refreshed by an apply: `(key, label set, hint)`,
    /// kept only where the entry under `key` still holds that very label
    /// set (not replaced meanwhile), so a hint stays with its label set.
    pub fn remember<'a>(&self, hints: impl IntoIterator<Item = (u64, &'a Labels, SeriesHint)>) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for (key, labels, hint) in hints {
            if let Some(c) = map.get_mut(&key)
                && c.labels.shares_buffer(labels)
            {
                c.hint = hint;
            }
        }
    }

    /// Puts `labels` under `key` with no hint (to stage collisions).
    #[cfg(test)]
    pub(crate) fn plant(&self, key: u64, labels: Labels) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(
            key,
            Cached {
                labels,
                hint: SeriesHint::default(),
            },
        );
    }

    /// The hint cached for the series whose label bytes hash to `key`.
    #[cfg(test)]
    pub(crate) fn hint_of(&self, key: u64) -> Option<SeriesHint> {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&key).map(|c| c.hint)
    }
}

fn pb(e: PbError) -> RemoteWriteError {
    RemoteWriteError::Protobuf(e.to_string())
}

/// Parses and validates the labels of `s`: names non-empty and unique, a
/// metric name present (empty values are dropped, as Prometheus does).
pub fn parse(buf: &[u8], batch: &WriteBatch, s: &SeriesView) -> Result<Labels, RemoteWriteError> {
    let spans = batch.label_spans(s);
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(spans.len());
    for &span in spans {
        let (n, v) = WriteBatch::label(buf, span).map_err(pb)?;
        if n.is_empty() {
            return Err(RemoteWriteError::BadLabels("empty label name".into()));
        }
        if pairs.iter().any(|(m, _)| *m == n) {
            return Err(RemoteWriteError::BadLabels(format!(
                "label {n:?} given twice"
            )));
        }
        pairs.push((n, v));
    }
    let labels = Labels::from_pairs(pairs);
    if labels.name().is_empty() {
        return Err(RemoteWriteError::BadLabels(format!(
            "series {labels} has no metric name (__name__)"
        )));
    }
    Ok(labels)
}

/// True when `bytes` (a series' label fields) are exactly the canonical
/// encoding of `labels`: one `Label` per pair, in order, name then value.
/// Parsing such bytes yields `labels` and no error, which is what lets a
/// cache hit skip the parse.
fn encodes(bytes: &[u8], labels: &Labels) -> bool {
    let mut pos = 0usize;
    for (n, v) in labels.iter() {
        let (nb, vb) = (n.as_bytes(), v.as_bytes());
        // The usual case, a label of under 124 bytes: every length is one
        // varint byte, so the field's bytes are known and checked in place
        // (an overlong varint there is only a miss: parsed, not trusted).
        let inner = 4 + nb.len() + vb.len();
        if inner < 0x80 {
            let Some(f) = bytes.get(pos..pos + 2 + inner) else {
                return false;
            };
            let k = 4 + nb.len();
            let same = f.starts_with(&[0x0a, inner as u8, 0x0a, nb.len() as u8])
                && f.get(4..k) == Some(nb)
                && f.get(k..k + 2) == Some(&[0x12, vb.len() as u8][..])
                && f.get(k + 2..) == Some(vb);
            if !same {
                return false;
            }
            pos += 2 + inner;
            continue;
        }
        let Some(label) = delimited(bytes, &mut pos, 0x0a) else {
            return false;
        };
        let mut p = 0usize;
        let name = delimited(label, &mut p, 0x0a);
        let value = delimited(label, &mut p, 0x12);
        if name != Some(n.as_bytes()) || value != Some(v.as_bytes()) || p != label.len() {
            return false;
        }
    }
    pos == bytes.len()
}

/// The contents of the length-delimited field at `*pos` if its key byte is
/// `key`; moves `*pos` past it.
fn delimited<'a>(bytes: &'a [u8], pos: &mut usize, key: u8) -> Option<&'a [u8]> {
    if *bytes.get(*pos)? != key {
        return None;
    }
    *pos += 1;
    let n = usize::try_from(varint(bytes, pos)?).ok()?;
    let end = pos.checked_add(n)?;
    let got = bytes.get(*pos..end)?;
    *pos = end;
    Some(got)
}

fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return (i < 9 || b < 2).then_some(v);
        }
    }
    None
}
