//! The merger's lookups: a child's source and series ids resolved to the
//! merger's global handles, and the records a batch of sections will read
//! loaded ahead so their cache misses overlap.

use super::*;

impl Merger {
    /// Loads, ahead of the work, the global records the sections `secs` of
    /// child `c` will read: each source's entry and name, each updated
    /// series' slot (entry and dedup mark), then (with `names`, for a sink
    /// that reads them) its name and labels. Independent
    /// loads in tight loops overlap their cache misses, where merging one
    /// update after the other would wait for each in turn (at a gateway of
    /// 10,000 nodes few of them are in cache). Reads only, through the
    /// handles cached in the decoder's tags (a stale or missing tag is
    /// skipped: the real work resolves it).
    pub(super) fn warm(&self, c: &Child, secs: &[RxSection], names: bool) {
        let handle = |tag: u64| Slot::from_tag(tag).map(|s| s.h);
        // The handles found, for the second pass (a section of many
        // updates walks handles of one source, mostly adjacent, which the
        // hardware follows by itself: its first few are enough).
        let mut srcs = [u32::MAX; WARM_AHEAD];
        let mut series = [u32::MAX; WARM_AHEAD * WARM_FEW];
        let mut n = 0;
        for (i, sec) in secs.iter().take(WARM_AHEAD).enumerate() {
            if self.proven_copy(c, sec).is_some() {
                continue; // skipped whole: nothing of it is read
            }
            if let Some(h) = c.dec.source(sec.source).and_then(|rx| handle(rx.tag()))
                && let Some(e) = self.table.source(h)
            {
                std::hint::black_box(e.last_ts_ms);
                srcs[i] = h;
            }
            for &(id, _) in sec.updates.iter().take(WARM_FEW) {
                if let Some(h) = c.dec.update_key(sec.source, id).and_then(|k| handle(k.0))
                    && let Some(m) = self.table.mark(h)
                {
                    std::hint::black_box(m.last_ts);
                    if let Some(x) = series.get_mut(n) {
                        *x = h;
                        n += 1;
                    }
                }
            }
        }
        // What those records point to: the source's name, the labels
        // (only for a sink that reads them).
        if !names {
            return;
        }
        for &h in srcs.iter().filter(|&&h| h != u32::MAX) {
            if let Some(e) = self.table.source(h) {
                std::hint::black_box(e.name.as_bytes().first());
            }
        }
        for &h in &series[..n] {
            if let Some(e) = self.table.get(h) {
                std::hint::black_box(e.labels.len());
            }
        }
    }

    /// Global handle of a child's source, creating the source if new.
    /// `None`: the source was forgotten after data newer than `ts`.
    pub(super) fn resolve_source(&mut self, c: &mut Child, id: u32, ts: i64) -> Option<u32> {
        // The handle cached in the decoder's record of the source, which
        // decoding this section just touched: no map of the merger's own.
        if let Some(s) = c.dec.source(id).and_then(|rx| Slot::from_tag(rx.tag()))
            && self
                .table
                .source_mark(s.h)
                .is_some_and(|m| m.epoch == s.epoch)
        {
            return Some(s.h);
        }
        let rx = c.source_info(id)?; // invariant: the decoder checked the id
        let h = match self.source_index.get(&rx.name) {
            Some(&h) => h,
            None => {
                if self.source_tombs.get(&rx.name).is_some_and(|&t| ts <= t) {
                    return None;
                }
                self.source_tombs.remove(&rx.name);
                let h = self.table.add_source(&rx.name, rx.tick_ms);
                if let Some(s) = self.table.source_mut(h) {
                    s.last_ts_ms = i64::MIN;
                }
                self.source_index.insert(rx.name.clone(), h);
                if self.cfg.forward {
                    self.pending.new_sources.push(h);
                }
                h
            }
        };
        let epoch = self.table.source_mark(h).map_or(0, |m| m.epoch);
        c.dec.set_source_tag(id, Slot { h, epoch }.tag());
        Some(h)
    }

    /// Global handle of a child's series `id`, updated in a section of
    /// global source `src`, defining it if new, with the encoding the child
    /// gives it (one lookup of the child's series, none when it is the
    /// series `held` of the section's source: see
    /// [`LinkDecoder::held_key`]).
    pub(super) fn resolve_series(
        &mut self,
        c: &mut Child,
        src: u32,
        held: Option<(u32, u64, canopy_proto::codec::Encoding)>,
        id: u32,
        ts: i64,
    ) -> Result<(u32, canopy_proto::codec::Encoding), Miss> {
        let key = match held {
            Some((hid, tag, enc)) if hid == id => Some((tag, enc)),
            _ => c.dec.series(id).map(|s| (s.tag(), s.encoding)),
        };
        if let Some((tag, encoding)) = key
            && let Some(s) = Slot::from_tag(tag)
            && self.epoch_is(s.h, s.epoch)
        {
            return Ok((s.h, encoding));
        }
        // Invariant: the decoder just applied an update of `id`.
        let rx = c.series_info(id).ok_or(Miss::Duplicate)?;
        let encoding = rx.encoding;
        let key = (src, rx.labels.clone());
        let h = match self.series_index.get(&key) {
            Some(&h) => h,
            None => {
                let name = self.table.source(src).map_or("", |s| s.name.as_str());
                let tomb = (name.to_string(), key.1.clone());
                if self.series_tombs.get(&tomb).is_some_and(|&t| ts <= t) {
                    return Err(Miss::Duplicate);
                }
                if self.table.len() >= self.cfg.max_series {
                    if !self.cap_warned {
                        self.cap_warned = true;
                        warn!(
                            max = self.cfg.max_series,
                            "series cap reached; dropping new series"
                        );
                    }
                    return Err(Miss::OverCap);
                }
                self.series_tombs.remove(&tomb);
                let h = self.table.insert(SeriesEntry {
                    labels: key.1.clone(),
                    source: src,
                    encoding: rx.encoding,
                    value: f64::NAN,
                });
                let tick = self.tick32();
                if let Some(m) = self.table.mark_mut(h) {
                    // A reused handle keeps its epoch (stale tags miss).
                    m.last_ts = i64::MIN;
                    m.touched_tick = tick;
                    m.dying = false;
                }
                self.push_def(h);
                self.series_index.insert(key, h);
                h
            }
        };
        // One label buffer per series in this process, whichever links
        // carry it (the decoders of R paths, the table, the index).
        if let Some(e) = self.table.get(h) {
            c.dec.share_labels(id, &e.labels);
        }
        let epoch = self.epoch_of(h);
        c.dec.set_tag(id, Slot { h, epoch }.tag());
        c.owner.insert(h, Slot { h: id, epoch });
        Ok((h, encoding))
    }
}
