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

use std::collections::HashMap;

use crate::codec::{
    ChangeSection, Changeset, CodecConfig, CodecError, LinkEncoder, SeriesEntry, SeriesTable,
    SourceEntry, record,
};

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

/// A fresh stream's table built from a shadow, and the recipes' handles
/// mapped onto it.
struct Replayer {
    table: SeriesTable,
    series: HashMap<u32, u32>,
    sources: HashMap<u32, u32>,
    enc: LinkEncoder,
}

impl Replayer {
    fn new(shadow: &Shadow, codec: &CodecConfig) -> Result<Self, CodecError> {
        let mut r = Self {
            table: SeriesTable::new(),
            series: HashMap::new(),
            sources: HashMap::new(),
            enc: LinkEncoder::new(codec)?,
        };
        for (h, s) in shadow.sources() {
            let n = r.table.add_source(&s.name, s.tick_ms);
            if let Some(e) = r.table.source_mut(n) {
                e.last_ts_ms = s.last_ts_ms;
            }
            r.sources.insert(h, n);
        }
        for (h, e) in shadow.series() {
            let Some(&src) = r.sources.get(&e.source) else {
                continue;
            };
            let n = r.table.insert(SeriesEntry {
                source: src,
                ..e.clone()
            });
            r.series.insert(h, n);
        }
        Ok(r)
    }

    /// The acknowledged state as one keyframe (none when it holds no source).
    fn snapshot(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), CodecError> {
        let Some(ts) = self.table.sources().map(|(_, s)| s.last_ts_ms).max() else {
            return Ok(());
        };
        self.encode(&Changeset::new(ts), out)
    }

    /// One unacknowledged record's tick, encoded on the fresh stream.
    fn delta(
        &mut self,
        cs: &Changeset,
        sources: &[(u32, SourceEntry)],
        series: &[(u32, SeriesEntry)],
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), CodecError> {
        let mut next = Changeset::new(cs.ts_ms);
        for (h, s) in sources {
            let same = self
                .sources
                .get(h)
                .is_some_and(|&n| self.table.source(n).is_some_and(|e| e.name == s.name));
            if !same {
                let n = self.table.add_source(&s.name, s.tick_ms);
                self.sources.insert(*h, n);
                next.new_sources.push(n);
            }
        }
        for (h, e) in series {
            let Some(&src) = self.sources.get(&e.source) else {
                continue;
            };
            let held = self.series.get(h).copied().filter(|&n| {
                self.table
                    .get(n)
                    .is_some_and(|x| x.source == src && x.labels == e.labels)
            });
            let n = match held {
                Some(n) => {
                    if let Some(x) = self.table.get_mut(n) {
                        x.encoding = e.encoding;
                    }
                    n
                }
                None => {
                    if let Some(old) = self.series.get(h) {
                        self.table.remove(*old);
                    }
                    let n = self.table.insert(SeriesEntry {
                        source: src,
                        ..e.clone()
                    });
                    self.series.insert(*h, n);
                    n
                }
            };
            next.defs.push(n);
        }
        let mut gone = Vec::new();
        for sec in &cs.sections {
            let Some(&src) = self.sources.get(&sec.source) else {
                continue;
            };
            let mut s = ChangeSection {
                source: src,
                ts_ms: sec.ts_ms,
                updates: Vec::with_capacity(sec.updates.len()),
                retired: Vec::new(),
            };
            for &(h, v) in &sec.updates {
                if let Some(&n) = self.series.get(&h) {
                    if let Some(e) = self.table.get_mut(n) {
                        e.value = v;
                    }
                    s.updates.push((n, v));
                }
            }
            for h in &sec.retired {
                if let Some(n) = self.series.remove(h) {
                    s.retired.push(n);
                    gone.push(n);
                }
            }
            if let Some(e) = self.table.source_mut(src) {
                e.last_ts_ms = e.last_ts_ms.max(sec.ts_ms);
            }
            next.sections.push(s);
        }
        let mut dead = Vec::new();
        for h in &cs.retired_sources {
            if let Some(n) = self.sources.remove(h) {
                next.retired_sources.push(n);
                dead.push(n);
            }
        }
        self.encode(&next, out)?;
        for n in gone {
            self.table.remove(n);
        }
        for n in dead {
            self.table.remove_source(n);
        }
        self.table.end_tick();
        Ok(())
    }

    fn encode(&mut self, cs: &Changeset, out: &mut Vec<Vec<u8>>) -> Result<(), CodecError> {
        let mut rec = Vec::new();
        self.enc.encode(&self.table, cs, &mut rec)?;
        let (len, pre) = record::read_prefix(&rec, usize::MAX)?
            .ok_or_else(|| CodecError::Malformed("encoder wrote a partial record".into()))?;
        rec.drain(..pre);
        rec.truncate(len);
        out.push(rec);
        Ok(())
    }
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
    // A fast zstd level, as for the mirror's rebuild.
    let fast = CodecConfig {
        zstd_level: codec.zstd_level.min(3),
        ..codec.clone()
    };
    let mut r = Replayer::new(shadow, &fast)?;
    let mut out = Vec::new();
    r.snapshot(&mut out)?;
    for rec in tail {
        match rec {
            Recipe::Delta {
                cs,
                sources,
                series,
            } => r.delta(cs, sources, series, &mut out)?,
            Recipe::Full(..) => {
                return Err(CodecError::Malformed(
                    "a stream's first record after an acknowledgement".into(),
                ));
            }
        }
    }
    Ok(out)
}
