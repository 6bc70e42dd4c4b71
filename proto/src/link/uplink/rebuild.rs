//! Re-encodes the unacknowledged tail of a dead link's stream as a stream of
//! its own (sans-I/O), so it can replay to another parent.
//!
//! The tail's records are deltas against state the dead parent held. A
//! *mirror* decoder, fed every record the parent acknowledged, holds that
//! same state. From it the tail is rebuilt: first a keyframe of the
//! acknowledged state (samples the parent already had: downstream dedup
//! drops them), then every unacknowledged record decoded and encoded again
//! by a fresh encoder, in order. A fresh decoder reads the result from its
//! first record.

use std::collections::HashMap;

use crate::codec::{
    ChangeSection, Changeset, CodecConfig, CodecError, LinkDecoder, LinkEncoder, RxFrame,
    SeriesEntry, SeriesTable, record,
};

/// A fresh encoder stream with a table of its own, fed in the ids of the
/// dead stream (link ids for the mirror, table handles for the shadow) and
/// mapping them onto its table: what both rebuilds share.
pub(super) struct Restream {
    table: SeriesTable,
    /// Dead stream's series id -> handle in `table`.
    series: HashMap<u32, u32>,
    /// Dead stream's source id -> handle in `table`.
    sources: HashMap<u32, u32>,
    enc: LinkEncoder,
}

impl Restream {
    /// An empty stream. It encodes at a fast zstd level: a rebuild runs on
    /// the uplink's task when a link dies, and the receiver reads any level.
    pub(super) fn new(codec: &CodecConfig) -> Result<Self, CodecError> {
        let fast = CodecConfig {
            zstd_level: codec.zstd_level.min(3),
            ..codec.clone()
        };
        Ok(Self {
            table: SeriesTable::new(),
            series: HashMap::new(),
            sources: HashMap::new(),
            enc: LinkEncoder::new(&fast)?,
        })
    }

    /// Seeds acknowledged source `id` (before the snapshot).
    pub(super) fn seed_source(&mut self, id: u32, name: &str, tick_ms: u32, last_ts_ms: i64) {
        let h = self.table.add_source(name, tick_ms);
        if let Some(e) = self.table.source_mut(h) {
            e.last_ts_ms = last_ts_ms;
        }
        self.sources.insert(id, h);
    }

    /// Seeds acknowledged series `id`, whose `source` is a dead stream's
    /// source id (before the snapshot); one of an unknown source is skipped.
    pub(super) fn seed_series(&mut self, id: u32, e: SeriesEntry) {
        let Some(&src) = self.sources.get(&e.source) else {
            return; // invariant: every series' source was seeded first
        };
        let h = self.table.insert(SeriesEntry { source: src, ..e });
        self.series.insert(id, h);
    }

    /// The acknowledged state as one keyframe (none when it holds no source).
    pub(super) fn snapshot(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), CodecError> {
        let Some(ts) = self.table.sources().map(|(_, s)| s.last_ts_ms).max() else {
            return Ok(());
        };
        self.encode(&Changeset::new(ts), out)
    }

    /// Source `id` defined by the tick `cs` re-encodes: added unless the
    /// stream already holds it under that name.
    pub(super) fn define_source(&mut self, cs: &mut Changeset, id: u32, name: &str, tick_ms: u32) {
        let same = self
            .sources
            .get(&id)
            .is_some_and(|&h| self.table.source(h).is_some_and(|e| e.name == name));
        if !same {
            let h = self.table.add_source(name, tick_ms);
            self.sources.insert(id, h);
            cs.new_sources.push(h);
        }
    }

    /// Series `id` (its `source` a dead stream's source id) defined or
    /// redefined by the tick `cs` re-encodes.
    pub(super) fn define_series(&mut self, cs: &mut Changeset, id: u32, e: &SeriesEntry) {
        let Some(&src) = self.sources.get(&e.source) else {
            return;
        };
        let held = self.series.get(&id).copied().filter(|&h| {
            self.table
                .get(h)
                .is_some_and(|x| x.source == src && x.labels == e.labels)
        });
        let h = match held {
            Some(h) => {
                if let Some(x) = self.table.get_mut(h) {
                    x.encoding = e.encoding;
                }
                h
            }
            None => {
                if let Some(old) = self.series.get(&id) {
                    self.table.remove(*old);
                }
                let h = self.table.insert(SeriesEntry {
                    source: src,
                    ..e.clone()
                });
                self.series.insert(id, h);
                h
            }
        };
        cs.defs.push(h);
    }

    /// One section of source `source` at `ts_ms` (dead stream's ids) added
    /// to `cs`; the series it retires join `gone`.
    pub(super) fn section(
        &mut self,
        cs: &mut Changeset,
        gone: &mut Vec<u32>,
        source: u32,
        ts_ms: i64,
        updates: impl ExactSizeIterator<Item = (u32, f64)>,
        retired: impl Iterator<Item = u32>,
    ) {
        let Some(&src) = self.sources.get(&source) else {
            return;
        };
        let mut sec = ChangeSection {
            source: src,
            ts_ms,
            updates: Vec::with_capacity(updates.len()),
            retired: Vec::new(),
        };
        for (id, v) in updates {
            if let Some(&h) = self.series.get(&id) {
                if let Some(e) = self.table.get_mut(h) {
                    e.value = v;
                }
                sec.updates.push((h, v));
            }
        }
        for id in retired {
            if let Some(h) = self.series.remove(&id) {
                sec.retired.push(h);
                gone.push(h);
            }
        }
        if let Some(e) = self.table.source_mut(src) {
            e.last_ts_ms = e.last_ts_ms.max(ts_ms);
        }
        cs.sections.push(sec);
    }

    /// Series `id` of source `source` that the dead stream dropped by
    /// omission (a keyframe without it): it ends at its source's newest
    /// timestamp, as the parent would have seen it.
    pub(super) fn retire_omitted(
        &mut self,
        cs: &mut Changeset,
        gone: &mut Vec<u32>,
        id: u32,
        source: u32,
    ) {
        let (Some(h), Some(&src)) = (self.series.remove(&id), self.sources.get(&source)) else {
            return;
        };
        let ts = self.table.source(src).map_or(cs.ts_ms, |s| s.last_ts_ms);
        match cs.sections.iter_mut().find(|s| s.source == src) {
            Some(s) => s.retired.push(h),
            None => cs.sections.push(ChangeSection {
                source: src,
                ts_ms: ts,
                updates: Vec::new(),
                retired: vec![h],
            }),
        }
        gone.push(h);
    }

    /// Encodes the tick `cs`, then forgets the series in `gone` and the
    /// dead stream's sources `retired_sources` retires.
    pub(super) fn finish(
        &mut self,
        mut cs: Changeset,
        gone: Vec<u32>,
        retired_sources: impl Iterator<Item = u32>,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), CodecError> {
        let mut dead = Vec::new();
        for id in retired_sources {
            if let Some(h) = self.sources.remove(&id) {
                cs.retired_sources.push(h);
                dead.push(h);
            }
        }
        self.encode(&cs, out)?;
        for h in gone {
            self.table.remove(h);
        }
        for h in dead {
            self.table.remove_source(h);
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

/// One decoded frame (`mirror` already holds its effect) re-encoded on `r`.
fn frame(
    r: &mut Restream,
    mirror: &LinkDecoder,
    f: &RxFrame,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), CodecError> {
    let mut cs = Changeset::new(f.ts_ms);
    for &id in &f.new_sources {
        if let Some(s) = mirror.source(id) {
            r.define_source(&mut cs, id, &s.name, s.tick_ms);
        }
    }
    for &id in &f.new_series {
        if let Some(s) = mirror.series(id) {
            let e = SeriesEntry {
                labels: s.labels.clone(),
                source: s.source,
                encoding: s.encoding,
                value: mirror.value(id).unwrap_or(f64::NAN),
            };
            r.define_series(&mut cs, id, &e);
        }
    }
    let mut gone = Vec::new();
    for sec in &f.sections {
        r.section(
            &mut cs,
            &mut gone,
            sec.source,
            sec.ts_ms,
            sec.updates.iter().copied(),
            sec.retired.iter().map(|(id, _)| *id),
        );
    }
    for (id, rx) in &f.retired {
        r.retire_omitted(&mut cs, &mut gone, *id, rx.source);
    }
    r.finish(cs, gone, f.retired_sources.iter().map(|(id, _)| *id), out)
}

/// Rebuilds `tail` (records that follow what `mirror` decoded, on the same
/// stream) as a stream a fresh decoder reads: a keyframe of the mirror's
/// state, then one record per tail record. `mirror` advances through the
/// tail. An error means the tail cannot be replayed (the caller drops it).
pub fn rebuild_tail<'a>(
    mirror: &mut LinkDecoder,
    tail: impl IntoIterator<Item = &'a [u8]>,
    codec: &CodecConfig,
) -> Result<Vec<Vec<u8>>, CodecError> {
    let mut r = Restream::new(codec)?;
    let mut srcs: Vec<_> = mirror.sources_iter().collect();
    srcs.sort_by_key(|s| s.0);
    for (id, s) in srcs {
        r.seed_source(id, &s.name, s.tick_ms, s.last_ts_ms);
    }
    let mut series: Vec<_> = mirror.series_iter().collect();
    series.sort_by_key(|s| s.0);
    for (id, s) in series {
        r.seed_series(
            id,
            SeriesEntry {
                labels: s.labels.clone(),
                source: s.source,
                encoding: s.encoding,
                value: mirror.value(id).unwrap_or(f64::NAN),
            },
        );
    }
    let mut out = Vec::new();
    r.snapshot(&mut out)?;
    for rec in tail {
        let f = mirror.decode(rec)?;
        frame(&mut r, mirror, &f, &mut out)?;
    }
    Ok(out)
}
