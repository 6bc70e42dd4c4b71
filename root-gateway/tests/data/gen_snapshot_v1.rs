//! Writes `snapshot_v1.bin`: a `canopy-snapshot-v1` snapshot as the release
//! before bit-packed chunks wrote it. The chunk encoder, the framing and the
//! record layout are copied verbatim from commit e3c546d
//! (`root-gateway/src/store/chunk.rs`, `store/codec.rs`,
//! `store/live/snapshot.rs`); only the data is new. Not part of the build:
//!
//! ```text
//! rustc -O root-gateway/tests/data/gen_snapshot_v1.rs -o /tmp/gen_v1 && /tmp/gen_v1 root-gateway/tests/data/snapshot_v1.bin
//! ```
//! The samples come from `snapshot_v1_series.rs` (next to this file), which
//! the store's snapshot tests include to check the file read back.

const CHUNK_SAMPLES: usize = 240;
const INT_DELTA: u8 = 0x0f;
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

fn varint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (z | 1).leading_zeros() as usize).div_ceil(7)
}

fn int_delta(prev: f64, v: f64) -> Option<i64> {
    let exact = |x: f64| x.fract() == 0.0 && x.abs() < EXACT_INT;
    if !(exact(prev) && exact(v)) {
        return None;
    }
    let d = (v as i64).wrapping_sub(prev as i64);
    (((prev as i64).wrapping_add(d) as f64).to_bits() == v.to_bits()).then_some(d)
}

#[derive(Clone, Debug, Default)]
struct Chunk {
    bytes: Vec<u8>,
    count: usize,
    first_ts: i64,
    last_ts: i64,
    last_delta: i64,
    last_bits: u64,
}

fn chunk_put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

impl Chunk {
    fn is_full(&self) -> bool {
        self.count >= CHUNK_SAMPLES
    }

    fn push(&mut self, ts: i64, v: f64) {
        let bits = v.to_bits();
        if self.count == 0 {
            chunk_put_varint(&mut self.bytes, ts);
            self.bytes.extend_from_slice(&bits.to_le_bytes());
            self.first_ts = ts;
            self.last_delta = 0;
        } else {
            let delta = ts.wrapping_sub(self.last_ts);
            chunk_put_varint(&mut self.bytes, delta.wrapping_sub(self.last_delta));
            self.last_delta = delta;
            let x = bits ^ self.last_bits;
            if x == 0 {
                self.bytes.push(0);
            } else {
                let lead = x.leading_zeros() / 8;
                let trail = x.trailing_zeros() / 8;
                let n = 8 - lead - trail;
                match int_delta(f64::from_bits(self.last_bits), v) {
                    Some(d) if varint_len(d) < n as usize => {
                        self.bytes.push(INT_DELTA);
                        chunk_put_varint(&mut self.bytes, d);
                    }
                    _ => {
                        self.bytes.push(((trail as u8) << 4) | n as u8);
                        let shifted = (x >> (trail * 8)).to_le_bytes();
                        self.bytes.extend_from_slice(&shifted[..n as usize]);
                    }
                }
            }
        }
        self.last_ts = ts;
        self.last_bits = bits;
        self.count += 1;
        if self.is_full() {
            self.bytes.shrink_to_fit();
        }
    }

    fn write_state(&self, out: &mut Vec<u8>) {
        put_uvarint(out, self.count as u64);
        put_varint(out, self.first_ts);
        put_varint(out, self.last_ts);
        put_varint(out, self.last_delta);
        out.extend_from_slice(&self.last_bits.to_le_bytes());
        put_uvarint(out, self.bytes.len() as u64);
        out.extend_from_slice(&self.bytes);
    }
}

const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC_TABLE: [u32; 256] = crc_table();

fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

fn write_frame(w: &mut Vec<u8>, payload: &[u8]) {
    let len = payload.len() as u32;
    w.extend_from_slice(&len.to_le_bytes());
    w.extend_from_slice(&crc32c(payload).to_le_bytes());
    w.extend_from_slice(payload);
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

// ---- the data (shared with the store's snapshot tests) ----

include!("snapshot_v1_series.rs");

fn main() {
    let path = std::env::args().nth(1).expect("output path");
    let mut w = Vec::new();
    write_frame(&mut w, b"canopy-snapshot-v1");
    let series = v1_series();
    let mut p = vec![0x01];
    put_varint(&mut p, 310_000); // now_ms
    put_uvarint(&mut p, 2); // rejected_series
    put_uvarint(&mut p, 3); // out_of_order
    put_uvarint(&mut p, 1); // sources_died
    put_uvarint(&mut p, 1); // sources
    put_uvarint(&mut p, series.len() as u64);
    write_frame(&mut w, &p);
    p.clear();
    p.push(0x02);
    put_str(&mut p, "n1");
    put_varint(&mut p, 1000);
    put_uvarint(&mut p, 1);
    put_varint(&mut p, 0);
    put_varint(&mut p, 305_000);
    p.push(0);
    write_frame(&mut w, &p);
    for (name, source, samples) in &series {
        p.clear();
        p.push(0x03);
        put_uvarint(&mut p, 2);
        for s in ["__name__", name, "node", "n1"] {
            put_str(&mut p, s);
        }
        put_uvarint(&mut p, *source);
        let mut chunks = vec![Chunk::default()];
        for &(ts, v) in samples {
            if chunks.last().is_some_and(Chunk::is_full) {
                chunks.push(Chunk::default());
            }
            chunks.last_mut().unwrap().push(ts, v);
        }
        put_uvarint(&mut p, chunks.len() as u64);
        for c in &chunks {
            c.write_state(&mut p);
        }
        write_frame(&mut w, &p);
    }
    p.clear();
    p.push(0x04);
    put_uvarint(&mut p, 1);
    put_uvarint(&mut p, series.len() as u64);
    write_frame(&mut w, &p);
    std::fs::write(&path, &w).expect("write");
    println!("{} bytes to {path}", w.len());
}
