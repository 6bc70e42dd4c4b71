//! Applying a whole frame: the compact payload (packed sections straight
//! from the bytes), the zstd payload (`unzstd`, then `apply_frame`) and
//! the source and series definitions a frame carries. The per-section work
//! is in `sections`.

use prost::Message;

use crate::model::Labels;
use crate::schema::frame as pb;

use super::super::encoder::get_uvarint;
use super::super::packed::{SourceCoding, WireState};
use super::super::pbview;
use super::super::quantise::Encoding;
use super::super::{CodecError, compact};
use super::lazy::Lazy;
use super::{LinkDecoder, Members, RxFrame, RxSeries, RxSource, WARM_AHEAD};

impl LinkDecoder {
    /// [`LinkDecoder::decode`] but for its poisoning: the payload's mode, then
    /// the frame applied. Not inlined into `decode`, so that the frame's
    /// application is one function with its closures inlined (as before
    /// this file was split out).
    #[inline(never)]
    pub(super) fn decode_inner(&mut self, payload: &[u8]) -> Result<RxFrame, CodecError> {
        let (tag, used) =
            get_uvarint(payload).ok_or_else(|| CodecError::Malformed("bad frame header".into()))?;
        let f = match tag & 3 {
            compact::MODE_ZSTD => self.unzstd(tag >> 2, &payload[used..])?,
            compact::MODE_COMPACT => {
                let check = compact::seq_check(tag);
                if check != self.next_seq & compact::SEQ_CHECK {
                    // Only the low bits travel: report the nearest sequence
                    // number that has them.
                    let got = (self.next_seq & !compact::SEQ_CHECK) | (check & compact::SEQ_CHECK);
                    return Err(CodecError::OutOfOrder {
                        expected: self.next_seq,
                        got,
                    });
                }
                if !self.started {
                    return Err(CodecError::NeedKeyframe);
                }
                return self.apply_compact(tag, &payload[used..], payload.len());
            }
            _ => return Err(CodecError::Malformed("unknown payload mode".into())),
        };
        // The sections are read in place from the decompressed bytes.
        let raw = std::mem::take(&mut self.raw);
        let at = std::mem::take(&mut self.section_at);
        let r = self.apply_frame(f.0, f.1, &raw, &at);
        self.raw = raw;
        self.section_at = at;
        super::super::release_oversized(&mut self.raw);
        r
    }

    /// Applies a compact payload body (packed sections only, straight from
    /// the payload: no protobuf frame, no copies of the packed bytes).
    fn apply_compact(
        &mut self,
        tag: u64,
        body: &[u8],
        raw_bytes: usize,
    ) -> Result<RxFrame, CodecError> {
        // One vector per frame (not a copy of every section's bytes).
        let mut secs = Vec::new();
        compact::parse(tag, body, self.last_delta, &mut secs).and_then(|ts_delta| {
            let ts = self.last_ts.wrapping_add(ts_delta);
            let mut out = RxFrame {
                seq: self.next_seq,
                ts_ms: ts,
                raw_bytes,
                sections: std::mem::take(&mut self.spare_sections),
                ..RxFrame::default()
            };
            for (i, s) in secs.iter().enumerate() {
                if i % WARM_AHEAD == 0 {
                    let ahead = &secs[i..secs.len().min(i + WARM_AHEAD)];
                    self.warm(ahead.iter().map(|s| s.source));
                }
                let mut rs = self.open_section(s.source, ts.wrapping_add(s.ts_offset_ms), 0)?;
                if s.repeat {
                    self.apply_repeat(s.packed, s.source, &mut rs)?;
                } else if !s.packed.is_empty() {
                    self.apply_packed(s.packed, s.source, &mut rs)?;
                }
                out.sections.push(rs);
            }
            self.last_delta = ts_delta;
            self.next_seq += 1;
            self.last_ts = ts;
            Ok(out)
        })
    }

    /// Decompresses a zstd-mode payload of `claimed` bytes into `raw`, cuts
    /// out its sections (into `section_at`) and decodes the rest into a
    /// `Frame` without sections. Returns it and the decompressed size.
    fn unzstd(&mut self, claimed: u64, zbytes: &[u8]) -> Result<(pb::Frame, usize), CodecError> {
        if claimed > self.cfg.max_frame_bytes as u64 {
            return Err(CodecError::FrameTooLarge {
                max: self.cfg.max_frame_bytes,
            });
        }
        // zstd gets room for one byte more than the header claims (a longer
        // frame is refused without inflating further), not the whole cap:
        // the output buffer is zero-filled as it is exposed, and a steady
        // frame is a few KiB.
        let limit = usize::try_from(claimed)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
            .min(self.cfg.max_frame_bytes);
        self.z.decompress_frame(zbytes, &mut self.raw, limit)?;
        if self.raw.len() as u64 != claimed {
            return Err(CodecError::Malformed(format!(
                "frame decompressed to {} bytes, header says {claimed}",
                self.raw.len()
            )));
        }
        pbview::split_frame(&self.raw, &mut self.section_at, &mut self.rest)?;
        let f = pb::Frame::decode(self.rest.as_slice())
            .map_err(|e| CodecError::Malformed(e.to_string()));
        super::super::release_oversized(&mut self.rest);
        f.map(|f| (f, self.raw.len()))
    }

    /// Checks and applies one parsed frame; `raw_bytes`: its decoded size;
    /// its sections are `raw[a..b]` for each `(a, b)` of `sections`.
    fn apply_frame(
        &mut self,
        f: pb::Frame,
        raw_bytes: usize,
        raw: &[u8],
        sections: &[(usize, usize)],
    ) -> Result<RxFrame, CodecError> {
        if f.seq != self.next_seq {
            return Err(CodecError::OutOfOrder {
                expected: self.next_seq,
                got: f.seq,
            });
        }
        if !self.started && !f.keyframe {
            return Err(CodecError::NeedKeyframe);
        }
        if f.keyframe && f.format != super::super::FORMAT {
            return Err(CodecError::Format {
                got: f.format,
                want: super::super::FORMAT,
            });
        }
        let ts = self.last_ts.wrapping_add(f.ts_delta_ms);
        let mut out = RxFrame {
            seq: f.seq,
            ts_ms: ts,
            keyframe: f.keyframe,
            raw_bytes,
            sections: std::mem::take(&mut self.spare_sections),
            ..RxFrame::default()
        };
        out.sections.reserve(sections.len());
        for s in f.sources {
            let id = s.id;
            self.define_source(s)?;
            out.new_sources.push(id);
        }
        for d in f.series {
            let id = d.id;
            self.define_series(d)?;
            out.new_series.push(id);
        }
        if f.keyframe {
            self.settle_all();
            for s in self.series.values_mut() {
                s.wire.known = false;
            }
        }
        let mut seen_in_keyframe: Vec<u32> = Vec::new();
        for (i, &(a, b)) in sections.iter().enumerate() {
            if i % WARM_AHEAD == 0 && !f.keyframe {
                let ahead = &sections[i..sections.len().min(i + WARM_AHEAD)];
                self.warm(
                    ahead
                        .iter()
                        .filter_map(|&(a, b)| raw.get(a..b).and_then(pbview::peek_source)),
                );
            }
            let rs = self.apply_section(&raw[a..b], ts, f.keyframe)?;
            if f.keyframe {
                seen_in_keyframe.extend(rs.updates.iter().map(|u| u.0));
            }
            out.sections.push(rs);
        }
        if f.keyframe {
            // A keyframe is the whole state: what it omits is gone.
            seen_in_keyframe.sort_unstable();
            let stale: Vec<u32> = self
                .series
                .ids()
                .filter(|k| seen_in_keyframe.binary_search(k).is_err())
                .collect();
            for id in stale {
                if let Some(s) = self.remove_series(id) {
                    out.retired.push((id, s));
                }
            }
        }
        for id in f.retired_sources {
            self.settle(id);
            let s = self
                .sources
                .remove(id)
                .ok_or(CodecError::UnknownSource { id })?;
            out.retired_sources.push((id, s));
        }
        self.last_delta = if self.started { f.ts_delta_ms } else { 0 };
        self.next_seq += 1;
        self.last_ts = ts;
        self.started = true;
        Ok(out)
    }

    pub(super) fn remove_series(&mut self, id: u32) -> Option<RxSeries> {
        self.settle_series(id);
        let s = self.series.remove(id)?;
        if let Some(src) = self.sources.get_mut(s.source) {
            src.members.remove(id);
        }
        Some(s)
    }

    fn define_source(&mut self, s: pb::SourceDef) -> Result<(), CodecError> {
        if s.name.len() > self.cfg.max_label_bytes {
            return Err(CodecError::BadDefinition {
                id: s.id,
                why: "source name too long",
            });
        }
        if !self.sources.contains(s.id) && self.sources.len() >= self.cfg.max_sources {
            return Err(CodecError::TooManySources {
                max: self.cfg.max_sources,
            });
        }
        if !self.sources.in_range(s.id) {
            return Err(CodecError::BadDefinition {
                id: s.id,
                why: "source id beyond twice the link's source cap",
            });
        }
        // A redefinition keeps the source's latest timestamp, coding and
        // members.
        match self.sources.get_mut(s.id) {
            Some(x) => {
                x.name = s.name;
                x.tick_ms = s.tick_ms;
                x.tag = 0;
            }
            None => {
                let src = RxSource {
                    last_ts_ms: 0,
                    tag: 0,
                    coding: SourceCoding::default(),
                    tick_ms: s.tick_ms,
                    lazy: Lazy::default(),
                    members: Members::default(),
                    name: s.name,
                };
                // Invariant: `in_range` held just above.
                let _ = self.sources.insert(s.id, src);
            }
        }
        Ok(())
    }

    fn define_series(&mut self, d: pb::SeriesDef) -> Result<(), CodecError> {
        let id = d.id;
        let bad = |why| CodecError::BadDefinition { id, why };
        if !self.sources.contains(d.source) {
            return Err(CodecError::UnknownSource { id: d.source });
        }
        let bytes: usize = d.labels.iter().map(|l| l.name.len() + l.value.len()).sum();
        if bytes > self.cfg.max_label_bytes || d.labels.len() > 64 {
            return Err(bad("labels too large"));
        }
        let encoding = match pb::Encoding::try_from(d.encoding) {
            Ok(pb::Encoding::Gauge) if d.mantissa_bits <= 52 => Encoding::Gauge {
                mantissa_bits: d.mantissa_bits as u8,
            },
            Ok(pb::Encoding::GaugeLog) if (1..=500_000_000).contains(&d.epsilon_ppb) => {
                Encoding::LogGauge { ppb: d.epsilon_ppb }
            }
            Ok(pb::Encoding::GaugeInt) => Encoding::GaugeInt,
            Ok(pb::Encoding::CounterInt) => Encoding::CounterInt,
            Ok(pb::Encoding::CounterFloat) if d.scale > 0 => {
                Encoding::CounterFloat { scale: d.scale }
            }
            _ => return Err(bad("invalid encoding")),
        };
        if !self.series.contains(id) && self.series.len() >= self.cfg.max_series {
            return Err(CodecError::TooManySeries {
                max: self.cfg.max_series,
            });
        }
        if !self.series.in_range(id) {
            return Err(bad("series id beyond twice the link's series cap"));
        }
        let labels = if d.labels.is_empty() {
            // A new encoding for a series the link holds: labels unchanged.
            match self.series.get(id) {
                Some(s) if s.source == d.source => s.labels.clone(),
                _ => return Err(bad("redefinition without labels of an unknown series")),
            }
        } else {
            Labels::from_pairs(d.labels.into_iter().map(|l| (l.name, l.value)))
        };
        // Its source lets go of it first (the definition resets its wire
        // state and tag).
        self.settle_series(id);
        let value = self.series.get(id).map_or(f64::NAN, |s| s.value);
        if let Some(old) = self.series.get(id).map(|s| s.source)
            && let Some(src) = self.sources.get_mut(old)
        {
            src.members.remove(id);
        }
        let mut walks = 0;
        if let Some(src) = self.sources.get_mut(d.source) {
            walks = src.coding.walks;
            src.members.insert(id);
        }
        let s = RxSeries {
            labels,
            source: d.source,
            encoding,
            value,
            wire: WireState::defined(walks),
            kf: 0,
            tag: 0,
        };
        // Invariant: `in_range` held just above.
        let _ = self.series.insert(id, s);
        Ok(())
    }
}
