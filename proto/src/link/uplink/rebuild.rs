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

/// Builds a sender's table from a decoder's state and turns decoded frames
/// back into changesets against it.
struct Rebuilder {
    table: SeriesTable,
    /// Link id (of the dead stream) -> table handle.
    series: HashMap<u32, u32>,
    sources: HashMap<u32, u32>,
    enc: LinkEncoder,
}

impl Rebuilder {
    fn new(mirror: &LinkDecoder, codec: &CodecConfig) -> Result<Self, CodecError> {
        let mut r = Self {
            table: SeriesTable::new(),
            series: HashMap::new(),
            sources: HashMap::new(),
            enc: LinkEncoder::new(codec)?,
        };
        let mut srcs: Vec<_> = mirror.sources_iter().collect();
        srcs.sort_by_key(|s| s.0);
        for (id, s) in srcs {
            let h = r.table.add_source(&s.name, s.tick_ms);
            if let Some(e) = r.table.source_mut(h) {
                e.last_ts_ms = s.last_ts_ms;
            }
            r.sources.insert(id, h);
        }
        let mut series: Vec<_> = mirror.series_iter().collect();
        series.sort_by_key(|s| s.0);
        for (id, s) in series {
            let Some(&src) = r.sources.get(&s.source) else {
                continue; // invariant: the decoder checked every series' source
            };
            let h = r.table.insert(SeriesEntry {
                labels: s.labels.clone(),
                source: src,
                encoding: s.encoding,
                value: s.value,
            });
            r.series.insert(id, h);
        }
        Ok(r)
    }

    /// The acknowledged state as one keyframe (none when nothing was acknowledged).
    fn snapshot(&mut self, out: &mut Vec<Vec<u8>>) -> Result<(), CodecError> {
        let Some(ts) = self.table.sources().map(|(_, s)| s.last_ts_ms).max() else {
            return Ok(());
        };
        let cs = Changeset::new(ts);
        self.encode(&cs, out)
    }

    /// One decoded frame (`mirror` already holds its effect) as a changeset, encoded.
    fn frame(
        &mut self,
        mirror: &LinkDecoder,
        f: &RxFrame,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<(), CodecError> {
        let mut cs = Changeset::new(f.ts_ms);
        for &id in &f.new_sources {
            let Some(s) = mirror.source(id) else { continue };
            match self.sources.get(&id) {
                Some(&h) if self.table.source(h).is_some_and(|e| e.name == s.name) => {}
                _ => {
                    let h = self.table.add_source(&s.name, s.tick_ms);
                    self.sources.insert(id, h);
                    cs.new_sources.push(h);
                }
            }
        }
        for &id in &f.new_series {
            let Some(s) = mirror.series(id) else { continue };
            let Some(&src) = self.sources.get(&s.source) else {
                continue;
            };
            let same = self.series.get(&id).and_then(|&h| {
                self.table
                    .get(h)
                    .filter(|e| e.source == src && e.labels == s.labels)
                    .map(|_| h)
            });
            let h = match same {
                Some(h) => {
                    if let Some(e) = self.table.get_mut(h) {
                        e.encoding = s.encoding;
                    }
                    h
                }
                None => {
                    if let Some(old) = self.series.get(&id) {
                        self.table.remove(*old);
                    }
                    let h = self.table.insert(SeriesEntry {
                        labels: s.labels.clone(),
                        source: src,
                        encoding: s.encoding,
                        value: s.value,
                    });
                    self.series.insert(id, h);
                    h
                }
            };
            cs.defs.push(h);
        }
        let mut gone = Vec::new();
        for sec in &f.sections {
            let Some(&src) = self.sources.get(&sec.source) else {
                continue;
            };
            let mut cs_sec = ChangeSection {
                source: src,
                ts_ms: sec.ts_ms,
                ..ChangeSection::default()
            };
            for &(id, v) in &sec.updates {
                if let Some(&h) = self.series.get(&id) {
                    if let Some(e) = self.table.get_mut(h) {
                        e.value = v;
                    }
                    cs_sec.updates.push((h, v));
                }
            }
            for (id, _) in &sec.retired {
                if let Some(h) = self.series.remove(id) {
                    cs_sec.retired.push(h);
                    gone.push(h);
                }
            }
            if let Some(e) = self.table.source_mut(src) {
                e.last_ts_ms = e.last_ts_ms.max(sec.ts_ms);
            }
            cs.sections.push(cs_sec);
        }
        // Series a keyframe of the dead stream dropped by omission end at
        // their source's newest timestamp, as the parent would have seen it.
        for (id, rx) in &f.retired {
            let (Some(h), Some(&src)) = (self.series.remove(id), self.sources.get(&rx.source))
            else {
                continue;
            };
            let ts = self.table.source(src).map_or(f.ts_ms, |s| s.last_ts_ms);
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
        let mut dead_sources = Vec::new();
        for (id, _) in &f.retired_sources {
            if let Some(h) = self.sources.remove(id) {
                cs.retired_sources.push(h);
                dead_sources.push(h);
            }
        }
        self.encode(&cs, out)?;
        for h in gone {
            self.table.remove(h);
        }
        for h in dead_sources {
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

/// Rebuilds `tail` (records that follow what `mirror` decoded, on the same
/// stream) as a stream a fresh decoder reads: a keyframe of the mirror's
/// state, then one record per tail record. `mirror` advances through the
/// tail. An error means the tail cannot be replayed (the caller drops it).
pub fn rebuild_tail<'a>(
    mirror: &mut LinkDecoder,
    tail: impl IntoIterator<Item = &'a [u8]>,
    codec: &CodecConfig,
) -> Result<Vec<Vec<u8>>, CodecError> {
    // A fast zstd level: the rebuild runs on the uplink's task when a link
    // dies, and the receiver reads any level.
    let fast = CodecConfig {
        zstd_level: codec.zstd_level.min(3),
        ..codec.clone()
    };
    let mut r = Rebuilder::new(mirror, &fast)?;
    let mut out = Vec::new();
    r.snapshot(&mut out)?;
    for rec in tail {
        let f = mirror.decode(rec)?;
        r.frame(mirror, &f, &mut out)?;
    }
    Ok(out)
}
