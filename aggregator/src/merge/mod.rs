//! The merge core: children's frames in, one changeset per tick out.
//!
//! ```text
//! child 1 record --LinkDecoder 1--\                        /--> Sink (accepted data)
//! child 2 record --LinkDecoder 2---> Merger (global table) --> Changeset per tick
//! child n record --LinkDecoder n--/    dedup by (series, ts)   \--> LinkEncoder per uplink
//! ```
//!
//! Each child link has its own id space; the merger maps ids to one global
//! [`SeriesTable`] keyed by source name and (source, labels). A series that
//! arrives over several links (redundant paths, failover) is deduplicated:
//! an update whose timestamp is not newer than the last one accepted for its
//! series is dropped; heartbeats keep the newest timestamp per source.
//!
//! Call order, per aggregator tick (the shell owns the clock):
//! 1. [`Merger::on_record`] for every record of every child, as they arrive;
//! 2. [`Merger::take_changeset`], then encode it on every uplink against the
//!    returned table (a new uplink's first frame is a keyframe with full
//!    state); feed no record in between;
//! 3. [`Merger::end_tick`]; now and then [`Merger::expire`].
//!
//! Sections: one per (source, timestamp), in timestamp order, so several
//! frames of a child within one tick keep every sample (no collapsing). A
//! series appears at most once per section because (series, ts) is accepted
//! once. When a source's oldest section in a tick is older than its newest
//! known timestamp, an empty heartbeat at the newest one goes first: a
//! keyframe stamps a source's full state with its *first* section's
//! timestamp, and the table holds the newest values.
//!
//! Retirement: a child's retirement of a series is global only if that child
//! knew the series' source at least as recently as the newest accepted
//! sample (else another path carries newer data: ignored), and only once (a
//! tombstone drops later retirements and lagging updates not newer than it).
//! A retired series that shows up again with newer data is defined again.
//! A series retired in the tick it was updated stays in the table until
//! [`Merger::end_tick`], so the uplink frame carries its last values, then
//! its retirement.

mod config;
mod dupes;
mod error;
mod holes;
mod resolve;
mod retire;
mod sink;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use canopy_proto::Labels;
use canopy_proto::codec::{
    ChangeSection, Changeset, CodecConfig, IdHashState, LinkDecoder, RxFrame, RxSection, RxSeries,
    RxSource, SeriesEntry, SeriesTable,
};
use tracing::{debug, info, warn};

pub use config::{FrameSummary, HOLE_WAIT_TICKS, MergeConfig};
pub use error::AggregatorError;
pub use sink::{MergeStats, NullSink, SeriesKey, Sink};

/// Caller-chosen id of one child link (unique among live links).
pub type ChildId = u64;

/// A cached child id -> global handle mapping, valid while `epoch` matches.
#[derive(Clone, Copy, Debug)]
struct Slot {
    h: u32,
    epoch: u32,
}

impl Slot {
    /// Packed into a decoder tag ([`LinkDecoder::set_tag`]): the handle + 1
    /// in the low half (0 is "no tag"), the epoch in the high half (a stale
    /// tag matches only after 2^32 removals of one handle).
    fn tag(self) -> u64 {
        (u64::from(self.epoch) << 32) | u64::from(self.h.wrapping_add(1))
    }

    /// The slot a tag holds, if any.
    fn from_tag(tag: u64) -> Option<Self> {
        let h = (tag as u32).checked_sub(1)?;
        Some(Self {
            h,
            epoch: (tag >> 32) as u32,
        })
    }
}

/// Maps keyed by ids (the child's or global handles) looked up per update:
/// keyed fast hashing instead of SipHash.
type IdMap<K, V> = HashMap<K, V, IdHashState>;

#[derive(Debug)]
struct Child {
    /// Its decoder; each of its series' tag caches the global handle
    /// ([`Slot::tag`]).
    dec: LinkDecoder,
    /// Global series -> the child id that last resolved to it: a retirement
    /// of an older id of the same series (re-defined since) is not global.
    owner: IdMap<u32, Slot>,
    /// Series and sources the frame being applied retired: the decoder has
    /// already forgotten them, but the frame's updates before the
    /// retirement still need their labels.
    gone_series: HashMap<u32, RxSeries>,
    gone_sources: HashMap<u32, RxSource>,
    /// Records of this link decoded so far (the number of the one being
    /// applied, 1-based): a held section remembers it.
    records: u64,
}

impl Child {
    /// Series `id` as the frame being applied knew it.
    fn series_info(&self, id: u32) -> Option<&RxSeries> {
        self.dec.series(id).or_else(|| self.gone_series.get(&id))
    }

    /// Source `id` as the frame being applied knew it.
    fn source_info(&self, id: u32) -> Option<&RxSource> {
        self.dec.source(id).or_else(|| self.gone_sources.get(&id))
    }
}

/// Merges children links into one global table and one changeset per tick.
#[derive(Debug)]
pub struct Merger {
    cfg: MergeConfig,
    child_codec: CodecConfig,
    children: HashMap<ChildId, Child>,
    table: SeriesTable,
    series_index: HashMap<(u32, Labels), u32>,
    source_index: HashMap<String, u32>,
    /// Per handle, the merger's own state sits in the table's slots beside
    /// the entries (`SeriesMark`: epoch and dedup; `SourceMark`: epoch and
    /// paths), so a section or an update reads one place.
    series_tombs: HashMap<(String, Labels), i64>,
    source_tombs: HashMap<String, i64>,
    /// Tick number, starting at 1 (0 means "never" in a series' mark).
    tick: u64,
    pending: Changeset,
    section_at: IdMap<(u32, i64), usize>,
    out: Changeset,
    late_series: Vec<u32>,
    late_sources: Vec<u32>,
    taken: bool,
    cap_warned: bool,
    stats: MergeStats,
    /// Sections waiting for a hole before them to fill (see `holes`).
    held: IdMap<u32, Vec<holes::Held>>,
    /// Sections of earlier changesets, emptied, for the next ticks: a relay
    /// allocates no update vector per source per tick. At most as many as
    /// one tick had, each small (see `recycle`).
    spare: Vec<ChangeSection>,
    /// Per source handle, what proves the other paths' copies of its last
    /// one-update section duplicates (see `dupes`).
    recent: Vec<dupes::Recent>,
    /// Proven copies are skipped (off only to test that skipping changes
    /// nothing).
    skip_copies: bool,
}

/// Sections whose global records [`Merger::warm`] loads at a time, before
/// they are merged.
const WARM_AHEAD: usize = 32;

/// Updates of a section whose records [`Merger::warm`] loads (a quiet
/// node's section has one: its tick counter).
const WARM_FEW: usize = 4;

/// A recycled section keeps an update vector of at most this capacity (a
/// keyframe tick's big ones are freed).
const SPARE_UPDATES: usize = 64;

enum Miss {
    Duplicate,
    OverCap,
}

impl Merger {
    /// An empty merger.
    pub fn new(cfg: MergeConfig) -> Self {
        let mut child_codec = cfg.codec.clone();
        child_codec.max_series = child_codec.max_series.min(cfg.max_series_per_child);
        Self {
            cfg,
            child_codec,
            children: HashMap::new(),
            table: SeriesTable::new(),
            series_index: HashMap::new(),
            source_index: HashMap::new(),
            series_tombs: HashMap::new(),
            source_tombs: HashMap::new(),
            tick: 1,
            pending: Changeset::default(),
            section_at: IdMap::default(),
            out: Changeset::default(),
            late_series: Vec::new(),
            late_sources: Vec::new(),
            taken: false,
            cap_warned: false,
            stats: MergeStats::default(),
            held: IdMap::default(),
            spare: Vec::new(),
            recent: Vec::new(),
            skip_copies: true,
        }
    }

    /// The same merger applying every copy in full (the reference the
    /// tests compare skipping against).
    #[cfg(test)]
    pub(super) fn without_skips(mut self) -> Self {
        self.skip_copies = false;
        self
    }

    /// A child link opened (or reopened): it gets a fresh decoder, replacing
    /// any earlier one, and must start with a keyframe.
    pub fn child_connected(&mut self, child: ChildId) -> Result<(), AggregatorError> {
        let dec = LinkDecoder::new(&self.child_codec)
            .map_err(|source| AggregatorError::Codec { child, source })?;
        let c = Child {
            dec,
            owner: IdMap::default(),
            gone_series: HashMap::new(),
            gone_sources: HashMap::new(),
            records: 0,
        };
        self.children.insert(child, c);
        self.stats.children = self.children.len();
        Ok(())
    }

    /// Counts a record refused before it reached the decoder (the link layer
    /// refused an oversized or malformed record), under `reason`.
    pub fn count_rejected(&mut self, reason: &'static str) {
        *self.stats.rejected_frames.entry(reason).or_default() += 1;
    }

    /// A child link closed: its decoder goes. Its series stay in the global
    /// table (another path may carry them) until refreshed or expired.
    pub fn child_gone(&mut self, child: ChildId) {
        self.children.remove(&child);
        // Skipped copies' notes first (see `dupes`).
        self.flush_paths();
        // A path that is gone can fill no hole.
        for m in self.table.source_marks_mut() {
            m.paths.retain(|e| e.0 != child);
        }
        self.stats.children = self.children.len();
    }

    /// Feeds one record payload (length prefix stripped) of `child`; accepted
    /// data goes to `sink` and into this tick's changeset. On error nothing
    /// of the record is applied, the child's decoder is poisoned, and the
    /// caller should close that link.
    pub fn on_record(
        &mut self,
        child: ChildId,
        payload: &[u8],
        sink: &mut dyn Sink,
    ) -> Result<FrameSummary, AggregatorError> {
        self.stats.frames_in += 1;
        self.stats.bytes_in += payload.len() as u64;
        let Some(mut c) = self.children.remove(&child) else {
            *self
                .stats
                .rejected_frames
                .entry("unknown_child")
                .or_default() += 1;
            return Err(AggregatorError::UnknownChild { child });
        };
        let res = match c.dec.decode(payload) {
            Ok(mut frame) => {
                c.records += 1;
                let sum = self.apply(child, &mut c, &mut frame, sink);
                // Its vectors serve the link's next frames.
                c.dec.recycle(frame);
                Ok(sum)
            }
            Err(source) => {
                let why = error::reason(&source);
                *self.stats.rejected_frames.entry(why).or_default() += 1;
                // The caller logs it at warn, rate-limited (a flooding child
                // reconnects and is refused over and over).
                debug!(child, reason = why, error = %source, "rejected child frame; link must be reset");
                Err(AggregatorError::Codec { child, source })
            }
        };
        self.children.insert(child, c);
        self.refresh_gauges();
        res
    }

    /// Everything accepted since the last [`Merger::end_tick`], as one
    /// changeset at `ts_ms`, with the table to encode it against (the table
    /// already holds the newest values). Encode it on every uplink, then call
    /// `end_tick`; repeated calls before `end_tick` return the same changeset.
    pub fn take_changeset(&mut self, ts_ms: i64) -> (&SeriesTable, &Changeset) {
        if !self.taken {
            self.taken = true;
            self.section_at.clear();
            let mut cs = std::mem::take(&mut self.pending);
            let table = &self.table;
            cs.ts_ms = ts_ms;
            cs.new_sources.retain(|&h| table.source(h).is_some());
            cs.defs.retain(|&h| table.get(h).is_some());
            cs.sections.retain(|s| table.source(s.source).is_some());
            for s in &mut cs.sections {
                s.updates.retain(|&(h, _)| table.get(h).is_some());
            }
            // Stable: sections of equal ts keep their arrival order.
            cs.sections.sort_by_key(|s| s.ts_ms);
            // A source whose first section is older than its newest ts
            // (one of its sections is) gets a heartbeat at the newest first.
            // Usually none does: a scan, no per-source map.
            let mut lead: Vec<ChangeSection> = cs
                .sections
                .iter()
                .filter_map(|s| {
                    let last = table.source(s.source)?.last_ts_ms;
                    (s.ts_ms < last).then(|| ChangeSection {
                        source: s.source,
                        ts_ms: last,
                        ..ChangeSection::default()
                    })
                })
                .collect();
            if !lead.is_empty() {
                lead.sort_by_key(|s| (s.ts_ms, s.source));
                lead.dedup_by_key(|s| s.source);
                lead.append(&mut cs.sections);
                cs.sections = lead;
            }
            self.out = cs;
        }
        (&self.table, &self.out)
    }

    /// Ends the tick after every uplink encoded the changeset: handles
    /// retired this tick become reusable.
    pub fn end_tick(&mut self) {
        if !self.taken {
            // Nobody took the changeset: what it held is dropped uplink-wise.
            let cs = std::mem::take(&mut self.pending);
            self.recycle(cs);
            self.section_at.clear();
        }
        let cs = std::mem::take(&mut self.out);
        self.recycle(cs);
        self.taken = false;
        for h in std::mem::take(&mut self.late_series) {
            self.table.remove(h);
        }
        for h in std::mem::take(&mut self.late_sources) {
            self.table.remove_source(h);
        }
        self.table.end_tick();
        self.tick += 1;
        self.cap_warned = false;
    }

    /// Forgets sources silent for longer than `source_ttl_ms` before
    /// `now_ms`, retiring their series (into the sink and the changeset), and
    /// old tombstones. Call between ticks, e.g. once per second.
    pub fn expire(&mut self, now_ms: i64, sink: &mut dyn Sink) {
        self.release_expired(now_ms, sink);
        let cutoff = now_ms.saturating_sub(self.cfg.source_ttl_ms);
        let dead: Vec<(u32, i64)> = self
            .table
            .sources()
            .filter(|(_, s)| s.last_ts_ms < cutoff)
            .map(|(h, s)| (h, s.last_ts_ms))
            .collect();
        if !dead.is_empty() {
            info!(sources = dead.len(), cutoff, "expiring silent sources");
            self.stats.expired_sources += dead.len() as u64;
            self.retire_sources(&dead, sink);
        }
        self.series_tombs.retain(|_, ts| *ts >= cutoff);
        self.source_tombs.retain(|_, ts| *ts >= cutoff);
        self.refresh_gauges();
    }

    /// The global table: what a keyframe on a new uplink carries.
    pub fn table(&self) -> &SeriesTable {
        &self.table
    }

    /// Self-telemetry counters.
    pub fn stats(&self) -> &MergeStats {
        &self.stats
    }

    /// The configuration in force.
    pub fn config(&self) -> &MergeConfig {
        &self.cfg
    }

    fn refresh_gauges(&mut self) {
        self.stats.series = self.table.len();
        self.stats.sources = self.source_index.len();
        self.stats.children = self.children.len();
    }

    fn apply(
        &mut self,
        child: ChildId,
        c: &mut Child,
        frame: &mut RxFrame,
        sink: &mut dyn Sink,
    ) -> FrameSummary {
        let mut sum = FrameSummary {
            seq: frame.seq,
            ts_ms: frame.ts_ms,
            keyframe: frame.keyframe,
            ..FrameSummary::default()
        };
        // (Re)definitions may change what an id means: a (re)defined
        // source's or series' decoder tag is already cleared, so it is
        // resolved afresh.
        // Per-series dedup keeps the newest ts: apply older sections first.
        frame.sections.sort_by_key(|s| s.ts_ms);
        c.gone_series.clear();
        c.gone_sources.clear();
        for (id, rx) in frame
            .sections
            .iter()
            .flat_map(|s| &s.retired)
            .chain(&frame.retired)
        {
            c.gone_series.insert(*id, rx.clone());
        }
        for (id, rx) in &frame.retired_sources {
            c.gone_sources.insert(*id, rx.clone());
        }
        for (i, sec) in frame.sections.iter().enumerate() {
            if i % WARM_AHEAD == 0 {
                let end = frame.sections.len().min(i + WARM_AHEAD);
                self.warm(c, &frame.sections[i..end], sink.reads_labels());
            }
            if self.skip_copy(child, c, sec, &mut sum) {
                continue;
            }
            let n = sec.updates.len();
            sum.updates += n;
            self.stats.updates_in += n as u64;
            let Some(src) = self.resolve_source(c, sec.source, sec.ts_ms) else {
                sum.duplicates += n;
                self.stats.duplicates_dropped += n as u64;
                continue;
            };
            // A quiet source's repeated series, held by its source's
            // record: found without reading the series' (asked once).
            let held = c.dec.held_key(sec.source);
            let several = self.note_path(src, child, sec.ts_ms);
            if self.held.contains_key(&src) {
                // This path may have passed (or filled) a held hole.
                self.release(src, i64::MIN, sink);
            }
            if sec.retired.is_empty() && self.opens_hole(src, sec.ts_ms, several) {
                let mut updates = Vec::with_capacity(n);
                for &(id, v) in &sec.updates {
                    match self.resolve_series(c, src, held, id, sec.ts_ms) {
                        Ok((h, enc)) => {
                            let epoch = self.epoch_of(h);
                            updates.push((Slot { h, epoch }, v, Some(enc)));
                        }
                        Err(Miss::Duplicate) => self.stats.duplicates_dropped += 1,
                        Err(Miss::OverCap) => self.stats.dropped_over_cap += 1,
                    }
                }
                self.hold(
                    src,
                    holes::Held {
                        ts: sec.ts_ms,
                        from: child,
                        rec: c.records,
                        updates,
                    },
                );
                continue;
            }
            self.heartbeat(src, sec.ts_ms, sink);
            let mut resolved = None;
            for &(id, v) in &sec.updates {
                resolved = self.update(c, src, held, id, sec.ts_ms, v, sink, &mut sum);
            }
            if n == 1
                && sec.retired.is_empty()
                && let Some(h) = resolved
            {
                self.note_recent(src, h, sec.ts_ms);
            }
            if self.held.contains_key(&src) {
                self.release(src, i64::MIN, sink);
            }
            // Retirements in time order with the samples around them: a
            // series that ends and comes back in one frame ends in between.
            for (id, rx) in &sec.retired {
                self.child_retire(c, *id, rx, sec.ts_ms, sink, &mut sum);
            }
        }
        // A keyframe drops what it omits: those ended at the newest ts the
        // child knew for their source.
        for (id, rx) in &frame.retired {
            let Some(r) = c.source_info(rx.source).map(|s| s.last_ts_ms) else {
                continue; // invariant: the decoder checked the series' source
            };
            self.child_retire(c, *id, rx, r, sink, &mut sum);
        }
        let mut dead = Vec::new();
        for (_, rx) in &frame.retired_sources {
            if let Some(&h) = self.source_index.get(&rx.name)
                && let Some(s) = self.table.source(h)
                && rx.last_ts_ms >= s.last_ts_ms
            {
                dead.push((h, rx.last_ts_ms));
            }
        }
        if !dead.is_empty() {
            sum.retired += self.retire_sources(&dead, sink);
        }
        c.gone_series.clear();
        c.gone_sources.clear();
        sum
    }

    /// The child says series `id` (`rx`) ended at `r`: retire it globally,
    /// unless another path or a newer definition carries it on.
    fn child_retire(
        &mut self,
        c: &mut Child,
        id: u32,
        rx: &RxSeries,
        r: i64,
        sink: &mut dyn Sink,
        sum: &mut FrameSummary,
    ) {
        let tagged = Slot::from_tag(rx.tag());
        let cached = tagged.filter(|s| self.epoch_is(s.h, s.epoch)).map(|s| s.h);
        let h = cached.or_else(|| {
            let name = c.source_info(rx.source)?.name.as_str();
            let src = self.source_index.get(name)?;
            self.series_index.get(&(*src, rx.labels.clone())).copied()
        });
        // The child re-defined the series under a newer id: it lives on.
        let superseded = h
            .and_then(|h| c.owner.get(&h).map(|o| (h, o)))
            .is_some_and(|(h, o)| o.h != id && o.epoch == self.epoch_of(h));
        match h {
            Some(h) if !superseded && r >= self.table.mark(h).map_or(i64::MIN, |m| m.last_ts) => {
                self.retire_series(h, r, sink);
                sum.retired += 1;
            }
            _ => self.stats.retires_ignored += 1,
        }
        if let Some(sh) = tagged.map(|s| s.h).or(h)
            && c.owner.get(&sh).is_some_and(|o| o.h == id)
        {
            c.owner.remove(&sh);
        }
    }

    fn heartbeat(&mut self, src: u32, ts: i64, sink: &mut dyn Sink) {
        let Some(s) = self.table.source_mut(src) else {
            return;
        };
        if ts > s.last_ts_ms {
            s.last_ts_ms = ts;
            sink.heartbeat(&s.name, ts, s.tick_ms);
            if self.cfg.forward {
                self.section(src, ts);
            }
        }
    }

    /// Index of this tick's section for (src, ts), created on demand.
    fn section(&mut self, src: u32, ts: i64) -> usize {
        let secs = &mut self.pending.sections;
        let spare = &mut self.spare;
        *self.section_at.entry((src, ts)).or_insert_with(|| {
            let mut s = spare.pop().unwrap_or_default();
            s.source = src;
            s.ts_ms = ts;
            secs.push(s);
            secs.len() - 1
        })
    }

    /// Keeps the sections of a spent changeset, emptied, for later ticks.
    fn recycle(&mut self, mut cs: Changeset) {
        for mut s in cs.sections.drain(..) {
            if s.updates.capacity() <= SPARE_UPDATES && s.retired.capacity() <= SPARE_UPDATES {
                s.updates.clear();
                s.retired.clear();
                self.spare.push(s);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        c: &mut Child,
        src: u32,
        held: Option<(u32, u64, canopy_proto::codec::Encoding)>,
        id: u32,
        ts: i64,
        v: f64,
        sink: &mut dyn Sink,
        sum: &mut FrameSummary,
    ) -> Option<u32> {
        let (h, encoding) = match self.resolve_series(c, src, held, id, ts) {
            Ok(r) => r,
            Err(Miss::Duplicate) => {
                sum.duplicates += 1;
                self.stats.duplicates_dropped += 1;
                return None;
            }
            Err(Miss::OverCap) => {
                self.stats.dropped_over_cap += 1;
                return None;
            }
        };
        self.accept(src, h, ts, v, Some(encoding), sink, sum);
        Some(h)
    }

    /// Applies one update of global series `h` unless it is not newer than
    /// the last accepted one.
    #[allow(clippy::too_many_arguments)]
    fn accept(
        &mut self,
        src: u32,
        h: u32,
        ts: i64,
        v: f64,
        encoding: Option<canopy_proto::codec::Encoding>,
        sink: &mut dyn Sink,
        sum: &mut FrameSummary,
    ) {
        let tick = self.tick32();
        // The entry and its mark: one slot, one cache line.
        let Some((e, m)) = self.table.get_marked_mut(h) else {
            return; // invariant: a matching generation means a live handle
        };
        if ts <= m.last_ts {
            sum.duplicates += 1;
            self.stats.duplicates_dropped += 1;
            return;
        }
        m.last_ts = ts;
        m.touched_tick = tick;
        let key = SeriesKey {
            handle: h,
            epoch: m.epoch,
        };
        e.value = v;
        if let Some(enc) = encoding
            && enc != e.encoding
        {
            e.encoding = enc;
            self.push_def(h);
        }
        if let (Some(e), Some(s)) = (self.table.get(h), self.table.source(src)) {
            sink.sample_keyed(key, &s.name, &e.labels, ts, v);
        }
        if self.cfg.forward {
            let i = self.section(src, ts);
            self.pending.sections[i].updates.push((h, v));
        }
        sum.accepted += 1;
        self.stats.updates_accepted += 1;
    }

    /// True when series handle `h` is at generation `epoch` (a tag's).
    fn epoch_is(&self, h: u32, epoch: u32) -> bool {
        self.table.mark(h).is_some_and(|m| m.epoch == epoch)
    }

    /// The generation of series handle `h` (0 for one never handed out).
    fn epoch_of(&self, h: u32) -> u32 {
        self.table.mark(h).map_or(0, |m| m.epoch)
    }

    /// The tick number as the table's marks keep it (its low 32 bits: a
    /// mark compares ticks for equality, which wraps after 2^32 ticks).
    fn tick32(&self) -> u32 {
        self.tick as u32
    }

    fn push_def(&mut self, h: u32) {
        let tick = self.tick32();
        let forward = self.cfg.forward;
        if let Some(m) = self.table.mark_mut(h)
            && m.def_tick != tick
            && forward
        {
            m.def_tick = tick;
            self.pending.defs.push(h);
        }
    }
}
