//! A zero-copy reader of the remote_write v1 `WriteRequest` (pure core).
//!
//! It reads the decompressed protobuf in place: no `String` per label, no
//! `Vec` per series. Samples are decoded into one reused vector; labels are
//! kept as byte ranges of the buffer and parsed only when the series is not
//! already known (see [`super::resolve`]).
//!
//! ```text
//! WriteRequest { 1: TimeSeries* }          (other fields skipped)
//! TimeSeries   { 1: Label*  2: Sample* }
//! Label        { 1: name (string)  2: value (string) }      last one wins
//! Sample       { 1: value (double)  2: timestamp (int64) }  last one wins
//! ```
//!
//! It accepts exactly what prost's generated decoder accepts (unknown fields
//! skipped, groups nested at most as deep as prost's recursion limit,
//! repeated scalar fields last-wins, strings UTF-8) and yields the same
//! values: `pb_tests` checks it against prost on random and mutated inputs.
//! Every read is bounds-checked; nothing here panics on any input.

use canopy_proto::model::Sample;

/// Why a buffer is not a valid `WriteRequest`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PbError {
    /// A varint runs past the buffer or past 64 bits.
    #[error("invalid varint at byte {at}")]
    Varint {
        /// Offset in the buffer.
        at: usize,
    },
    /// A field key with tag 0, a tag over 2^32, or wire type 6 or 7.
    #[error("invalid field key at byte {at}")]
    Key {
        /// Offset in the buffer.
        at: usize,
    },
    /// A known field with the wrong wire type.
    #[error("{field}: wrong wire type {wire} at byte {at}")]
    WireType {
        /// The field.
        field: &'static str,
        /// The wire type found.
        wire: u8,
        /// Offset in the buffer.
        at: usize,
    },
    /// A field runs past the end of its message.
    #[error("field at byte {at} runs past the end of its message")]
    Truncated {
        /// Offset in the buffer.
        at: usize,
    },
    /// An end-group key without its start, or groups nested too deep.
    #[error("bad group at byte {at}")]
    Group {
        /// Offset in the buffer.
        at: usize,
    },
    /// A label name or value that is not UTF-8.
    #[error("label string at byte {at} is not UTF-8")]
    Utf8 {
        /// Offset in the buffer.
        at: usize,
    },
    /// The buffer is over 4 GiB (offsets are 32-bit).
    #[error("buffer of {len} bytes is too large")]
    TooLarge {
        /// Its length.
        len: usize,
    },
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// prost's recursion limit: the top-level message starts with this many
/// levels; each nested message and each group takes one.
const RECURSION_LIMIT: u32 = 100;

/// A byte range of the decoded buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// The bytes of `buf` this span covers (empty if out of range).
    pub fn of<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }
}

/// One `TimeSeries` of a decoded request.
#[derive(Clone, Copy, Debug)]
pub struct SeriesView {
    /// Its labels: indexes into [`WriteBatch::label_spans`].
    labels: (u32, u32),
    /// Its samples: indexes into the batch's samples.
    samples: (u32, u32),
    /// The bytes of all its label fields (keys included) when they are
    /// back to back: the same bytes always decode to the same labels, so
    /// they identify the series without parsing them.
    pub label_bytes: Option<Span>,
}

/// A decoded `WriteRequest`, borrowing nothing: reuse one per thread and
/// [`WriteBatch::decode`] each body into it (the vectors keep their capacity).
#[derive(Debug, Default)]
pub struct WriteBatch {
    series: Vec<SeriesView>,
    labels: Vec<Span>,
    samples: Vec<Sample>,
}

/// A bounds-checked cursor over `buf[pos..end]`.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], span: Span) -> Self {
        let end = (span.end as usize).min(buf.len());
        Reader {
            buf,
            pos: (span.start as usize).min(end),
            end,
        }
    }

    fn done(&self) -> bool {
        self.pos >= self.end
    }

    /// A varint with prost's overflow rule (the 10th byte must be 0 or 1).
    #[inline]
    fn varint(&mut self) -> Result<u64, PbError> {
        // Keys, lengths and small values: one byte.
        if self.pos < self.end
            && let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.varint_long()
    }

    #[inline(never)]
    fn varint_long(&mut self) -> Result<u64, PbError> {
        let at = self.pos;
        // Eight bytes left in the buffer: the varint's length from its
        // stop bits and its 7-bit groups packed in three steps, with no
        // per-byte branch (timestamps take 6 bytes). Longer varints, and
        // ones that would end past the message, take the checked loop
        // below, which reports them.
        if let Some(w) = self.buf.get(self.pos..self.pos.saturating_add(8))
            && let Ok(w) = <[u8; 8]>::try_from(w)
        {
            let x = u64::from_le_bytes(w);
            let stops = !x & 0x8080_8080_8080_8080;
            let len = (stops.trailing_zeros() / 8 + 1) as usize;
            if stops != 0 && self.pos + len <= self.end {
                let keep = u64::MAX >> (64 - 8 * len);
                let x = x & keep & 0x7f7f_7f7f_7f7f_7f7f;
                let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
                let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
                let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
                self.pos += len;
                return Ok(x);
            }
        }
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos).filter(|_| self.pos < self.end) else {
                return Err(PbError::Varint { at });
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b >= 2 {
                    return Err(PbError::Varint { at });
                }
                return Ok(v);
            }
        }
        Err(PbError::Varint { at })
    }

    /// A field key: (tag, wire type).
    fn key(&mut self) -> Result<(u32, u8), PbError> {
        let at = self.pos;
        let k = self.varint()?;
        let tag = u32::try_from(k >> 3).map_err(|_| PbError::Key { at })?;
        let wire = (k & 7) as u8;
        if k > u64::from(u32::MAX) || tag == 0 || wire > FIXED32 {
            return Err(PbError::Key { at });
        }
        Ok((tag, wire))
    }

    fn take(&mut self, n: u64) -> Result<Span, PbError> {
        let at = self.pos;
        let left = (self.end - self.pos) as u64;
        if n > left {
            return Err(PbError::Truncated { at });
        }
        // n <= left <= end <= u32::MAX (checked in decode): no truncation.
        let span = Span {
            start: self.pos as u32,
            end: (self.pos as u64 + n) as u32,
        };
        self.pos += n as usize;
        Ok(span)
    }

    /// A length-delimited field's contents.
    fn delimited(&mut self) -> Result<Span, PbError> {
        let n = self.varint()?;
        self.take(n)
    }

    /// Skips an unknown field as prost does (`depth` levels of groups left).
    fn skip(&mut self, wire: u8, tag: u32, depth: u32) -> Result<(), PbError> {
        let at = self.pos;
        if depth == 0 {
            return Err(PbError::Group { at });
        }
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            FIXED32 => self.take(4).map(drop),
            LEN => self.delimited().map(drop),
            START_GROUP => loop {
                let (t, w) = self.key()?;
                if w == END_GROUP {
                    if t != tag {
                        return Err(PbError::Group { at });
                    }
                    return Ok(());
                }
                self.skip(w, t, depth - 1)?;
            },
            _ => Err(PbError::Group { at }),
        }
    }
}

fn want(field: &'static str, wire: u8, expected: u8, at: usize) -> Result<(), PbError> {
    if wire == expected {
        Ok(())
    } else {
        Err(PbError::WireType { field, wire, at })
    }
}

impl WriteBatch {
    /// Decodes `buf` (a decompressed `WriteRequest`), replacing what the
    /// batch held. Labels are located, not parsed: see [`WriteBatch::label`].
    pub fn decode(&mut self, buf: &[u8]) -> Result<(), PbError> {
        self.series.clear();
        self.labels.clear();
        self.samples.clear();
        let len = u32::try_from(buf.len()).map_err(|_| PbError::TooLarge { len: buf.len() })?;
        let mut r = Reader::new(buf, Span { start: 0, end: len });
        while !r.done() {
            let at = r.pos;
            let (tag, wire) = r.key()?;
            if tag == 1 {
                want("WriteRequest.timeseries", wire, LEN, at)?;
                let span = r.delimited()?;
                self.series(buf, span)?;
            } else {
                r.skip(wire, tag, RECURSION_LIMIT)?;
            }
        }
        Ok(())
    }

    fn series(&mut self, buf: &[u8], span: Span) -> Result<(), PbError> {
        let (l0, s0) = (self.labels.len(), self.samples.len());
        let mut r = Reader::new(buf, span);
        let mut label_bytes: Option<Span> = None;
        let mut contiguous = true;
        // What senders write first: `Label` fields with key 0x0a and a
        // one-byte length. That leading run is walked without the general
        // key and varint reads (same spans as the loop below, which takes
        // over at anything else, and reports what is wrong).
        let first = r.pos;
        while r.end.saturating_sub(r.pos) >= 2
            && let (Some(&0x0a), Some(&n)) = (buf.get(r.pos), buf.get(r.pos + 1))
            && n < 0x80
            && r.pos + 2 + usize::from(n) <= r.end
        {
            let start = r.pos + 2;
            r.pos = start + usize::from(n);
            // Offsets are below `r.end`, which fits u32 (checked in decode).
            self.labels.push(Span {
                start: start as u32,
                end: r.pos as u32,
            });
        }
        if r.pos > first {
            label_bytes = Some(Span {
                start: first as u32,
                end: r.pos as u32,
            });
        }
        // Then `Sample` fields: key 0x12, a one-byte length. The same
        // samples (or the same error) as the loop below, without its key
        // and length reads; anything else leaves them to it.
        while let Some(&[0x12, n]) = buf.get(r.pos..r.pos + 2)
            && n < 0x80
            && r.pos + 2 + usize::from(n) <= r.end
        {
            let start = r.pos + 2;
            r.pos = start + usize::from(n);
            self.samples.push(sample(
                buf,
                Span {
                    start: start as u32,
                    end: r.pos as u32,
                },
            )?);
        }
        while !r.done() {
            let at = r.pos;
            let (tag, wire) = r.key()?;
            match tag {
                1 => {
                    want("TimeSeries.labels", wire, LEN, at)?;
                    let l = r.delimited()?;
                    self.labels.push(l);
                    // `at` fits u32: it is below `span.end`.
                    match &mut label_bytes {
                        None => {
                            label_bytes = Some(Span {
                                start: at as u32,
                                end: l.end,
                            });
                        }
                        Some(s) if s.end as usize == at => s.end = l.end,
                        Some(_) => contiguous = false,
                    }
                }
                2 => {
                    want("TimeSeries.samples", wire, LEN, at)?;
                    let s = r.delimited()?;
                    self.samples.push(sample(buf, s)?);
                }
                _ => r.skip(wire, tag, RECURSION_LIMIT - 1)?,
            }
        }
        // Vector lengths are bounded by the buffer (>= 2 bytes per item), so < 2^32.
        self.series.push(SeriesView {
            labels: (l0 as u32, self.labels.len() as u32),
            samples: (s0 as u32, self.samples.len() as u32),
            label_bytes: label_bytes.filter(|_| contiguous),
        });
        Ok(())
    }

    /// The series of the request, in order.
    pub fn series_views(&self) -> &[SeriesView] {
        &self.series
    }

    /// Samples of the whole request.
    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    /// The samples of `s`, in the order sent.
    pub fn samples(&self, s: &SeriesView) -> &[Sample] {
        self.samples
            .get(s.samples.0 as usize..s.samples.1 as usize)
            .unwrap_or_default()
    }

    /// The `Label` messages of `s` (contents, to parse with [`WriteBatch::label`]).
    pub fn label_spans(&self, s: &SeriesView) -> &[Span] {
        self.labels
            .get(s.labels.0 as usize..s.labels.1 as usize)
            .unwrap_or_default()
    }

    /// Parses one `Label` message: (name, value), either "" when absent.
    pub fn label(buf: &[u8], span: Span) -> Result<(&str, &str), PbError> {
        let mut r = Reader::new(buf, span);
        let (mut name, mut value) = ("", "");
        while !r.done() {
            let at = r.pos;
            let (tag, wire) = r.key()?;
            let slot = match tag {
                1 => &mut name,
                2 => &mut value,
                _ => {
                    r.skip(wire, tag, RECURSION_LIMIT - 2)?;
                    continue;
                }
            };
            want("Label", wire, LEN, at)?;
            let s = r.delimited()?;
            *slot = std::str::from_utf8(s.of(buf)).map_err(|_| PbError::Utf8 {
                at: s.start as usize,
            })?;
        }
        Ok((name, value))
    }
}

/// The value of the varint in the low `len` (1..=8) bytes of `x`: its
/// 7-bit groups packed in three steps, no per-byte branch.
#[inline]
fn groups(x: u64, len: usize) -> u64 {
    let x = x & (u64::MAX >> (64 - 8 * len)) & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// One `Sample` message. What every sender writes is read from one 16-byte
/// load: the value (key 0x09, 8 bytes), then the timestamp (key 0x10, a
/// varint of 1 to 6 bytes ending the message; a millisecond timestamp
/// takes 6), its stop bits and 7-bit groups packed with no per-byte
/// branch. Anything else goes to [`sample_fields`].
#[inline]
fn sample(buf: &[u8], span: Span) -> Result<Sample, PbError> {
    let start = span.start as usize;
    let ts_len = (span.end as usize).wrapping_sub(start).wrapping_sub(10);
    if ts_len.wrapping_sub(1) < 6
        && let Some(w) = buf.get(start..start + 16)
        && let Ok(w) = <[u8; 16]>::try_from(w)
    {
        let w = u128::from_le_bytes(w);
        // Bytes 10..16: the timestamp and what follows it, masked below.
        let x = (w >> 80) as u64;
        let stops = !x & 0x8080_8080_8080;
        if w as u8 == 0x09
            && (w >> 72) as u8 == 0x10
            && stops != 0
            && (stops.trailing_zeros() / 8 + 1) as usize == ts_len
        {
            let x = groups(x, ts_len);
            return Ok(Sample {
                ts_ms: x as i64,
                value: f64::from_bits((w >> 8) as u64),
            });
        }
    }
    sample_fields(buf, span)
}

/// [`sample`] field by field: any order, repeats (last wins), unknown
/// fields skipped, as prost reads it. A zero value is no field at all
/// (prost leaves defaults out): the timestamp alone is read first the
/// same way, from one 8-byte load (out of line, so [`sample`] stays small
/// enough to inline).
#[inline(never)]
fn sample_fields(buf: &[u8], span: Span) -> Result<Sample, PbError> {
    let start = span.start as usize;
    let ts_len = (span.end as usize).wrapping_sub(start).wrapping_sub(1);
    if ts_len.wrapping_sub(1) < 6
        && let Some(w) = buf.get(start..start + 8)
        && let Ok(w) = <[u8; 8]>::try_from(w)
    {
        let w = u64::from_le_bytes(w);
        let x = (w >> 8) & 0x00ff_ffff_ffff_ffff;
        let stops = !x & 0x0080_8080_8080_8080;
        if w as u8 == 0x10 && (stops.trailing_zeros() / 8 + 1) as usize == ts_len {
            let x = groups(x, ts_len);
            return Ok(Sample {
                ts_ms: x as i64,
                value: 0.0,
            });
        }
    }
    let mut r = Reader::new(buf, span);
    let mut out = Sample {
        ts_ms: 0,
        value: 0.0,
    };
    while !r.done() {
        let at = r.pos;
        let (tag, wire) = r.key()?;
        match tag {
            1 => {
                want("Sample.value", wire, FIXED64, at)?;
                let b = r.take(8)?.of(buf);
                let mut le = [0u8; 8];
                le.copy_from_slice(b.get(..8).ok_or(PbError::Truncated { at })?);
                out.value = f64::from_le_bytes(le);
            }
            2 => {
                want("Sample.timestamp", wire, VARINT, at)?;
                // int64 is the varint's two's complement, as prost reads it.
                out.ts_ms = r.varint()? as i64;
            }
            _ => r.skip(wire, tag, RECURSION_LIMIT - 2)?,
        }
    }
    Ok(out)
}
