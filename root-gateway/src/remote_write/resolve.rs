//! From a decoded request's label bytes to the store's series, without
//! parsing, allocating or keeping a copy of any label set for a series the
//! store already holds.
//!
//! A sender writes the same series with the same label bytes request after
//! request. Where a series' label fields are the canonical encoding (each
//! `Label` holding a name field then a value field and nothing else, as
//! Prometheus sends them), their (name, value) byte pairs are looked up in
//! the store's own index ([`LiveStore::find_hint`]: a seeded hash of the
//! pairs, confirmed pair by pair against the series' interned strings, so a
//! hash collision is only a miss) and the series is named by the store's
//! [`SeriesHint`] alone. The label set lives once, in the store: the
//! receiver keeps nothing per series between requests.
//!
//! Anything else is a miss: a series the store does not hold, or an
//! encoding other than the canonical one (unsorted, empty values, extra
//! fields). Its labels are parsed and validated (names non-empty and
//! unique, a metric name present; empty values dropped) and the store finds
//! or makes the series by that label set. A hit needs no validation: its
//! bytes spell exactly a label set the store accepted.

use canopy_proto::model::Labels;

use crate::store::{LiveStore, SeriesHint};

use super::RemoteWriteError;
use super::pb::{PbError, SeriesView, Span, WriteBatch};

/// One series of a request, as [`resolve`] found it.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved {
    /// The store holds it under exactly these label bytes.
    Held(SeriesHint),
    /// Not held (or not canonically encoded): its parsed, valid labels.
    New(Labels),
}

/// The store's hint for each series of `batch` (decoded from `buf`), in
/// order, into `out`: `Some` where the store holds a series whose labels
/// are exactly the series' canonical label bytes, `None` otherwise (a
/// miss, to [`parse`]). `pairs` is scratch space, reused across calls.
/// Call with the store read-locked: it only reads.
pub fn find_held(
    store: &LiveStore,
    buf: &[u8],
    batch: &WriteBatch,
    pairs: &mut Vec<(Span, Span)>,
    out: &mut Vec<Option<SeriesHint>>,
) {
    out.clear();
    out.reserve(batch.series_views().len());
    for s in batch.series_views() {
        out.push(held(store, buf, s, pairs));
    }
}

/// [`find_held`] for one series.
pub fn held(
    store: &LiveStore,
    buf: &[u8],
    s: &SeriesView,
    pairs: &mut Vec<(Span, Span)>,
) -> Option<SeriesHint> {
    let span = s.label_bytes?;
    let short = canonical_pairs(buf, span, pairs)?;
    // Every length one byte: the bytes are the canonical encoding the
    // store's label-set key hashes (longer varints may not be minimal).
    let encoded = buf
        .get(span.start as usize..span.end as usize)
        .filter(|_| short);
    store.find_hint_encoded(encoded, pairs.iter().map(|(n, v)| (n.of(buf), v.of(buf))))
}

/// Every series of `batch` (decoded from `buf`) resolved against `store`,
/// in order, into `out`: [`find_held`], then [`parse`] for the misses. The
/// first series with unusable labels is the error (and `out` is then
/// incomplete).
pub fn resolve(
    store: &LiveStore,
    buf: &[u8],
    batch: &WriteBatch,
    out: &mut Vec<Resolved>,
) -> Result<(), RemoteWriteError> {
    let (mut pairs, mut hints) = (Vec::new(), Vec::new());
    find_held(store, buf, batch, &mut pairs, &mut hints);
    out.clear();
    for (s, h) in batch.series_views().iter().zip(hints) {
        out.push(match h {
            Some(h) => Resolved::Held(h),
            None => Resolved::New(parse(buf, batch, s)?),
        });
    }
    Ok(())
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

/// Reads `span` of `buf` (a series' label fields, back to back) as the
/// canonical encoding: `Label` fields (key `0x0a`) each holding exactly a
/// name field (`0x0a`) then a value field (`0x12`). Their (name, value)
/// byte ranges go to `out`; `None` (and `out` partial) for anything else,
/// which is then parsed as a miss. Such bytes parse to exactly these
/// pairs, so the store matching them all is the parse's label set.
/// `Some(true)` when every length was one varint byte.
fn canonical_pairs(buf: &[u8], span: Span, out: &mut Vec<(Span, Span)>) -> Option<bool> {
    out.clear();
    let (start, end) = (span.start as usize, span.end as usize);
    let bytes = buf.get(start..end)?;
    let mut short = true;
    let mut pos = 0usize;
    while pos < bytes.len() {
        // The usual label: every length one varint byte.
        if let Some(&[0x0a, inner, 0x0a, n]) = bytes.get(pos..pos + 4)
            && inner < 0x80
            && n < 0x80
            && usize::from(n) + 4 <= usize::from(inner)
        {
            let (inner, n) = (usize::from(inner), usize::from(n));
            let name = pos + 4;
            let vkey = name + n;
            if let Some(&[0x12, v]) = bytes.get(vkey..vkey + 2)
                && v < 0x80
                && 4 + n + usize::from(v) == inner
                && vkey + 2 + usize::from(v) <= bytes.len()
            {
                let value = vkey + 2;
                let stop = value + usize::from(v);
                // Offsets below `span.end`, a u32: plain sums, no checks.
                let o = |x: usize| span.start + x as u32;
                out.push((
                    Span {
                        start: o(name),
                        end: o(vkey),
                    },
                    Span {
                        start: o(value),
                        end: o(stop),
                    },
                ));
                pos = stop;
                continue;
            }
        }
        short = false;
        let (l0, l1) = delimited(bytes, &mut pos, 0x0a)?;
        let label = bytes.get(l0..l1).unwrap_or_default();
        let mut p = 0usize;
        let (Some(name), Some(value)) = (
            delimited(label, &mut p, 0x0a),
            delimited(label, &mut p, 0x12),
        ) else {
            return None;
        };
        if p != label.len() {
            return None;
        }
        out.push((
            at(start + l0, name.0, name.1),
            at(start + l0, value.0, value.1),
        ));
    }
    Some(short)
}

/// The span `base + a .. base + b` of the buffer. Offsets stay below the
/// span's end, a `u32` (the reader refuses larger buffers).
fn at(base: usize, a: usize, b: usize) -> Span {
    let off = |x: usize| u32::try_from(base.saturating_add(x)).unwrap_or(u32::MAX);
    Span {
        start: off(a),
        end: off(b),
    }
}

/// The range (within `bytes`) of the contents of the length-delimited field
/// at `*pos` if its key byte is `key`; moves `*pos` past it.
fn delimited(bytes: &[u8], pos: &mut usize, key: u8) -> Option<(usize, usize)> {
    if *bytes.get(*pos)? != key {
        return None;
    }
    *pos += 1;
    let n = usize::try_from(varint(bytes, pos)?).ok()?;
    let start = *pos;
    let end = start.checked_add(n)?;
    if end > bytes.len() {
        return None;
    }
    *pos = end;
    Some((start, end))
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
