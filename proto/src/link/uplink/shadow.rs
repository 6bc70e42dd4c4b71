//! The acknowledged state of a live link, kept from the sender's own
//! changesets instead of by decoding its frames (sans-I/O).
//!
//! Each record the [`super::UplinkEncoder`] queues carries a [`Recipe`]:
//! what its tick did to the sender's table (the whole table for a stream's
//! first record). When the parent acknowledges a record, its recipe is
//! applied to a [`Shadow`], which then holds what the parent holds: every
//! live source and series with its labels, encoding and latest value.
//! Applying a recipe is a few array writes per changed value, where the
//! mirror decoder it replaces range-decoded every frame again (over a third
//! of a leaf's CPU). When the link dies, [`rebuild_from_shadow`] turns the
//! shadow and the unacknowledged records' recipes into a fresh stream, as
//! [`super::rebuild`] does from a mirror decoder.

use super::rebuild::Restream;
use crate::codec::{Changeset, CodecConfig, CodecError, SeriesEntry, SeriesTable, SourceEntry};

/// What one queued record did to the sender's table.
#[derive(Clone, Debug)]
pub enum Recipe {
    /// The first record of an encoder stream: the whole table after the
    /// tick (the record defines all of it), and the tick's changes.
    Full(Box<Shadow>, Changeset),
    /// A later record: the tick's changes, with the sources and series it
    /// defines as the table held them when it was encoded.
    Delta {
        /// The tick's changeset (handles are the table's).
        cs: Changeset,
        /// Sources the record defines.
        sources: Vec<(u32, SourceEntry)>,
        /// Series the record defines or redefines.
        series: Vec<(u32, SeriesEntry)>,
    },
}

impl Recipe {
    /// The recipe of a record encoded from `table` and `cs`; `first`: the
    /// record starts an encoder stream.
    pub fn new(table: &SeriesTable, cs: &Changeset, first: bool) -> Self {
        if first {
            return Self::Full(Box::new(Shadow::of(table)), cs.clone());
        }
        let sources = cs
            .new_sources
            .iter()
            .filter_map(|&h| table.source(h).map(|s| (h, s.clone())))
            .collect();
        let series = cs
            .defs
            .iter()
            .filter_map(|&h| table.get(h).map(|e| (h, e.clone())))
            .collect();
        Self::Delta {
            cs: cs.clone(),
            sources,
            series,
        }
    }

    /// Approximate heap bytes held, for the replay buffer's accounting.
    pub fn bytes(&self) -> usize {
        let cs_bytes = |cs: &Changeset| {
            cs.sections
                .iter()
                .map(|s| 48 + 16 * s.updates.len() + 4 * s.retired.len())
                .sum::<usize>()
                + 4 * (cs.new_sources.len() + cs.defs.len() + cs.retired_sources.len())
        };
        match self {
            Self::Full(s, cs) => 64 * s.series.len() + 48 * s.sources.len() + cs_bytes(cs),
            Self::Delta {
                cs,
                sources,
                series,
            } => cs_bytes(cs) + 48 * sources.len() + 64 * series.len(),
        }
    }
}

/// Sources and series by table handle, as the parent holds them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shadow {
    series: Vec<Option<SeriesEntry>>,
    sources: Vec<Option<SourceEntry>>,
}

fn put<T>(v: &mut Vec<Option<T>>, h: u32, x: T) {
    let i = h as usize;
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    v[i] = Some(x);
}

fn take<T>(v: &mut [Option<T>], h: u32) -> Option<T> {
    v.get_mut(h as usize).and_then(Option::take)
}

impl Shadow {
    /// Everything `table` holds.
    pub fn of(table: &SeriesTable) -> Self {
        let mut s = Self::default();
        for (h, e) in table.sources() {
            put(&mut s.sources, h, e.clone());
        }
        for (h, e) in table.iter() {
            put(&mut s.series, h, e.clone());
        }
        s
    }

    /// The parent took the record `r` was made for.
    pub fn apply(&mut self, r: Recipe) {
        let cs = match r {
            Recipe::Full(s, cs) => {
                *self = *s;
                cs
            }
            Recipe::Delta {
                cs,
                sources,
                series,
            } => {
                for (h, s) in sources {
                    put(&mut self.sources, h, s);
                }
                for (h, e) in series {
                    put(&mut self.series, h, e);
                }
                cs
            }
        };
        for sec in &cs.sections {
            for &(h, v) in &sec.updates {
                if let Some(Some(e)) = self.series.get_mut(h as usize) {
                    e.value = v;
                }
            }
            if let Some(Some(s)) = self.sources.get_mut(sec.source as usize) {
                s.last_ts_ms = s.last_ts_ms.max(sec.ts_ms);
            }
            for &h in &sec.retired {
                take(&mut self.series, h);
            }
        }
        for &h in &cs.retired_sources {
            take(&mut self.sources, h);
        }
    }

    /// Live series with their handles, in handle order.
    pub fn series(&self) -> impl Iterator<Item = (u32, &SeriesEntry)> {
        live(&self.series)
    }

    /// Live sources with their handles, in handle order.
    pub fn sources(&self) -> impl Iterator<Item = (u32, &SourceEntry)> {
        live(&self.sources)
    }
}

fn live<T>(v: &[Option<T>]) -> impl Iterator<Item = (u32, &T)> {
    v.iter()
        .enumerate()
        .filter_map(|(i, x)| x.as_ref().map(|x| (i as u32, x)))
}

/// One unacknowledged record's tick re-encoded on `r` (its handles are the
/// sender table's, as the shadow's).
fn delta(
    r: &mut Restream,
    cs: &Changeset,
    sources: &[(u32, SourceEntry)],
    series: &[(u32, SeriesEntry)],
    out: &mut Vec<Vec<u8>>,
) -> Result<(), CodecError> {
    let mut next = Changeset::new(cs.ts_ms);
    for (h, s) in sources {
        r.define_source(&mut next, *h, &s.name, s.tick_ms);
    }
    for (h, e) in series {
        r.define_series(&mut next, *h, e);
    }
    let mut gone = Vec::new();
    for sec in &cs.sections {
        r.section(
            &mut next,
            &mut gone,
            sec.source,
            sec.ts_ms,
            sec.updates.iter().copied(),
            sec.retired.iter().copied(),
        );
    }
    r.finish(next, gone, cs.retired_sources.iter().copied(), out)
}

/// Rebuilds the unacknowledged tail (the recipes of the records after what
/// `shadow` holds, in order) as a stream a fresh decoder reads: a keyframe
/// of the shadow's state, then one record per tail record. An error (a
/// stream's first record in the tail, which never follows an ack) means
/// the tail cannot be replayed this way.
pub fn rebuild_from_shadow<'a>(
    shadow: &Shadow,
    tail: impl IntoIterator<Item = &'a Recipe>,
    codec: &CodecConfig,
) -> Result<Vec<Vec<u8>>, CodecError> {
    let mut r = Restream::new(codec)?;
    for (h, src) in shadow.sources() {
        r.seed_source(h, &src.name, src.tick_ms, src.last_ts_ms);
    }
    for (h, e) in shadow.series() {
        r.seed_series(h, e.clone());
    }
    let mut out = Vec::new();
    r.snapshot(&mut out)?;
    for rec in tail {
        match rec {
            Recipe::Delta {
                cs,
                sources,
                series,
            } => delta(&mut r, cs, sources, series, &mut out)?,
            Recipe::Full(..) => {
                return Err(CodecError::Malformed(
                    "a stream's first record after an acknowledgement".into(),
                ));
            }
        }
    }
    Ok(out)
}
