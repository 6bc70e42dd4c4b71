//! One zstd stream per link direction, flushed once per frame.
//!
//! Each frame is a flushed block of a single long-lived zstd stream, so a
//! frame is compressed against everything sent before it on the link (the
//! series ids that change every tick, the last keyframe): a streaming encoder
//! sees all of the past on its link, never the future. Both ends start a new
//! stream on every new link.
//!
//! The decompressor writes into a buffer capped at `max_out` bytes; a frame
//! that would decompress to more is rejected before anything beyond the cap is
//! allocated (decompression bombs), and the window size a peer may demand is
//! capped too, bounding per-link memory.

use zstd::stream::raw::{CParameter, DParameter, Decoder, Encoder, InBuffer, Operation, OutBuffer};

use super::CodecError;

/// Most log2 entries of the compressor's hash and chain tables.
const TABLE_LOG: u32 = 16;

/// log2 entries of the hash and chain tables for a `2^window_log` window:
/// a sixteenth of the window's positions, at most [`TABLE_LOG`]. zstd sees
/// only keyframes and definitions, so small tables find nearly the same
/// matches: a node's 64 KiB window gets 4 Ki-entry tables (32 KiB instead of
/// 512 KiB of context per uplink; its first frame, all definitions, is
/// ~1 % larger and keyframes the same within 0.1 %, `tick_cost` with 50 jobs),
/// while the default 1 MiB window keeps 64 Ki entries.
fn table_log(window_log: u32) -> u32 {
    window_log.saturating_sub(4).clamp(6, TABLE_LOG)
}

/// Compressing side of a link's zstd stream.
pub struct ZEncoder {
    inner: Encoder<'static>,
}

impl std::fmt::Debug for ZEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZEncoder")
    }
}

impl ZEncoder {
    /// A new stream at `level` with a `2^window_log` byte window.
    pub fn new(level: i32, window_log: u32) -> Result<Self, CodecError> {
        let mut inner = Encoder::new(level).map_err(|e| CodecError::Zstd(e.to_string()))?;
        inner
            .set_parameter(CParameter::WindowLog(window_log))
            .map_err(|e| CodecError::Zstd(e.to_string()))?;
        // zstd sees only keyframes and definitions (tens of KB every
        // minute): small match tables find the same matches at high levels
        // and keep a link's memory and set-up cost low.
        for p in [
            CParameter::HashLog(table_log(window_log)),
            CParameter::ChainLog(table_log(window_log)),
        ] {
            inner
                .set_parameter(p)
                .map_err(|e| CodecError::Zstd(e.to_string()))?;
        }
        Ok(Self { inner })
    }

    /// Compresses `input` and flushes, appending the bytes to `out`.
    pub fn compress_frame(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let mut inb = InBuffer::around(input);
        loop {
            out.reserve(input.len() / 2 + 64);
            let start = out.len();
            let mut outb = OutBuffer::around_pos(out, start);
            self.inner
                .run(&mut inb, &mut outb)
                .map_err(|e| CodecError::Zstd(e.to_string()))?;
            if inb.pos() == input.len() {
                break;
            }
        }
        loop {
            out.reserve(256);
            let start = out.len();
            let mut outb = OutBuffer::around_pos(out, start);
            let remaining = self
                .inner
                .flush(&mut outb)
                .map_err(|e| CodecError::Zstd(e.to_string()))?;
            if remaining == 0 {
                return Ok(());
            }
        }
    }
}

/// Decompressing side of a link's zstd stream.
pub struct ZDecoder {
    inner: Decoder<'static>,
}

impl std::fmt::Debug for ZDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZDecoder")
    }
}

impl ZDecoder {
    /// A new stream that refuses windows above `2^window_log_max` bytes.
    pub fn new(window_log_max: u32) -> Result<Self, CodecError> {
        let mut inner = Decoder::new().map_err(|e| CodecError::Zstd(e.to_string()))?;
        inner
            .set_parameter(DParameter::WindowLogMax(window_log_max))
            .map_err(|e| CodecError::Zstd(e.to_string()))?;
        Ok(Self { inner })
    }

    /// Decompresses one frame's bytes into `out` (cleared first), refusing
    /// to produce more than `max_out` bytes.
    pub fn decompress_frame(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        max_out: usize,
    ) -> Result<(), CodecError> {
        out.clear();
        let mut inb = InBuffer::around(input);
        loop {
            if out.len() >= max_out {
                // Output is full: anything left (input or data buffered
                // inside zstd) would exceed the cap.
                let mut probe = [0u8; 1];
                let mut pb = OutBuffer::around(&mut probe[..]);
                self.inner
                    .run(&mut inb, &mut pb)
                    .map_err(|e| CodecError::Zstd(e.to_string()))?;
                if pb.pos() > 0 || inb.pos() < input.len() {
                    return Err(CodecError::FrameTooLarge { max: max_out });
                }
                return Ok(());
            }
            let want = (max_out - out.len()).min(64 * 1024);
            let start = out.len();
            // Expose exactly `want` bytes to zstd, so it cannot write past the cap.
            out.resize(start + want, 0);
            let mut outb = OutBuffer::around(&mut out[start..]);
            self.inner
                .run(&mut inb, &mut outb)
                .map_err(|e| CodecError::Zstd(e.to_string()))?;
            let n = outb.pos();
            out.truncate(start + n);
            if inb.pos() == input.len() && n < want {
                // All input consumed and zstd had room to spare: done.
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_follow_the_window() {
        // The default 1 MiB window (and larger) keeps 64 Ki-entry tables.
        assert_eq!(table_log(20), 16);
        assert_eq!(table_log(23), 16);
        // A node's 64 KiB window: 4 Ki entries; zstd's smallest window: its floor.
        assert_eq!(table_log(16), 12);
        assert_eq!(table_log(10), 6);
        // Streams with small tables still round-trip, frame after frame.
        for window_log in [10, 16] {
            let mut z = ZEncoder::new(3, window_log).expect("encoder");
            let mut d = ZDecoder::new(23).expect("decoder");
            for i in 0..3u8 {
                let input: Vec<u8> = (0..20_000u32).map(|k| (k % 251) as u8 ^ i).collect();
                let mut packed = Vec::new();
                z.compress_frame(&input, &mut packed).expect("compress");
                assert!(packed.len() < input.len() / 4, "{}", packed.len());
                let mut out = Vec::new();
                d.decompress_frame(&packed, &mut out, 1 << 20)
                    .expect("decompress");
                assert_eq!(out, input);
            }
        }
    }
}
