//! Keyed fast hashing of wire values and peer-chosen ids (sans-I/O): the
//! twin finding of packed sections and the maps a link keys by ids its
//! peer chose.

/// Hashes the wire values of one section for twin finding
/// (`LinkModel::note`), and the peer-chosen ids of a link's maps (the
/// decoder's series and sources, a merger's per-child caches): one keyed
/// folded multiply per value where SipHash cost ~200 instructions, on both
/// ends of every link, once per changed value (7 % of a leaf's tick under
/// callgrind). The keys are drawn per map from std's random source, so a
/// peer cannot aim values at one bucket.
#[derive(Clone, Debug)]
pub struct ValueHashState {
    k0: u64,
    k1: u64,
}

impl ValueHashState {
    /// A hasher state with keys drawn from std's random source.
    pub(crate) fn new() -> Self {
        use std::hash::BuildHasher;
        let r = std::collections::hash_map::RandomState::new();
        Self {
            k0: r.hash_one(0u64),
            k1: r.hash_one(1u64) | 1,
        }
    }
}

impl Default for ValueHashState {
    fn default() -> Self {
        Self::new()
    }
}

impl std::hash::BuildHasher for ValueHashState {
    type Hasher = ValueHasher;

    fn build_hasher(&self) -> ValueHasher {
        ValueHasher {
            k0: self.k0,
            k1: self.k1,
            h: 0,
        }
    }
}

/// The hasher of [`ValueHashState`].
pub struct ValueHasher {
    k0: u64,
    k1: u64,
    h: u64,
}

impl std::hash::Hasher for ValueHasher {
    fn finish(&self) -> u64 {
        // One more folded multiply, by a fixed odd constant: with a single
        // round the low bits (the bucket index) of small or structured
        // values spread poorly for some keys (seen: 9,823 distinct low
        // halves of 12,287 values, where random hashing gives ~11,250).
        let p = u128::from(self.h) * u128::from(0x9e37_79b9_7f4a_7c15_u64);
        (p as u64) ^ ((p >> 64) as u64)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Keys here are i64 (`write_i64`); any other input still hashes.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        let p = u128::from(self.h ^ v ^ self.k0) * u128::from(self.k1);
        self.h = (p as u64) ^ ((p >> 64) as u64);
    }
}

/// The first series id to take each wire value in one packed section
/// (twin finding, `LinkModel::note`): an open-addressing table keyed by
/// [`ValueHashState`], emptied per section by moving a stamp instead of
/// clearing, at most two thirds full. Asked once per changed value on both
/// ends of a link, where a general map's entry cost ~75 instructions.
///
/// The table is cold at every tick (a leaf sleeps a second between
/// sections), so each probe is a cache miss: ~10 % of a leaf's CPU samples
/// with 1,050 changes a tick (perf). Two thirds full instead of half keeps
/// those 1,050 in 2,048 slots (32 KiB) instead of 4,096, halving the cache
/// lines touched for a probe or so more each; the answers do not depend on
/// the table's size.
#[derive(Clone, Debug)]
pub(crate) struct FirstSeen {
    slots: Vec<Slot>,
    /// Slots holding this stamp are in the table; others are free. Never 0.
    stamp: u32,
    len: usize,
    keys: ValueHashState,
    /// Most values a section held since the last [`SHRINK_EVERY`] sections
    /// began, and how many sections have passed since.
    peak: usize,
    sections: u32,
}

/// Every this many sections, a table larger than the busiest of them needed
/// is made that small again (one busy section, e.g. a burst of changes,
/// does not leave every later one spread over twice the cache lines).
const SHRINK_EVERY: u32 = 64;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    value: i64,
    id: u32,
    stamp: u32,
}

impl Default for FirstSeen {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            stamp: 1,
            len: 0,
            keys: ValueHashState::new(),
            peak: 0,
            sections: 0,
        }
    }
}

impl FirstSeen {
    /// Forgets every value (a new section).
    pub(crate) fn clear(&mut self) {
        self.peak = self.peak.max(self.len);
        self.sections += 1;
        if self.sections >= SHRINK_EVERY {
            let need = capacity_for(self.peak);
            if self.slots.len() > need {
                // Emptied anyway: no value to keep.
                self.slots = vec![Slot::default(); need];
            }
            self.peak = 0;
            self.sections = 0;
        }
        self.len = 0;
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            // Once in 2^32 sections: old stamps could come back.
            for s in &mut self.slots {
                s.stamp = 0;
            }
            self.stamp = 1;
        }
    }

    /// The id that took `value` first in this section; when none did,
    /// records `id` as that one and returns `None`.
    pub(crate) fn first_or_insert(&mut self, value: i64, id: u32) -> Option<u32> {
        if (self.len + 1) * 3 > self.slots.len() * 2 {
            self.grow();
        }
        let r = self.probe(value, id);
        if r.is_none() {
            self.len += 1;
        }
        r
    }

    fn probe(&mut self, value: i64, id: u32) -> Option<u32> {
        // The length is a power of two and the table at most 2/3 full:
        // the probe ends at a free slot or at the value. The slot: the top
        // bits of a keyed multiply (values that differ only in high bits,
        // as counters in bytes do, still differ there; the keys are the
        // link's random ones, so a peer cannot aim values at one slot).
        let mask = self.slots.len() - 1;
        let bits = self.slots.len().trailing_zeros();
        let h = ((value as u64) ^ self.keys.k0).wrapping_mul(self.keys.k1);
        let mut i = (h >> (64 - bits)) as usize & mask;
        loop {
            let s = &mut self.slots[i];
            if s.stamp != self.stamp {
                *s = Slot {
                    value,
                    id,
                    stamp: self.stamp,
                };
                return None;
            }
            if s.value == value {
                return Some(s.id);
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the table (at least 64 slots), keeping this section's values.
    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(64);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); cap]);
        for s in old {
            if s.stamp == self.stamp {
                self.probe(s.value, s.id);
            }
        }
    }
}

/// Slots of a table holding `n` values at most two thirds full (a power of
/// two, at least 64; the size [`FirstSeen`] grows to for `n` values).
fn capacity_for(n: usize) -> usize {
    let mut cap = 64;
    while (n + 1) * 3 > cap * 2 {
        cap *= 2;
    }
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table answers as a map from value to its first id would, across
    /// growth and many sections (stamps moving on).
    #[test]
    fn first_seen_is_a_first_taker_map() {
        let mut t = FirstSeen::default();
        for section in 0..300u32 {
            t.clear();
            let mut want = std::collections::HashMap::new();
            let n = (section * 37) % 500;
            for id in 0..n {
                // Repeats within a section, and values shared across sections.
                let v = i64::from((id * 7 + section) % 211) << (id % 3 * 20);
                let got = t.first_or_insert(v, id);
                let expect = want.get(&v).copied();
                want.entry(v).or_insert(id);
                assert_eq!(got, expect, "section {section} id {id}");
            }
            assert!(t.len * 3 <= t.slots.len().max(1) * 2);
        }
    }

    /// A burst makes the table grow; once [`SHRINK_EVERY`] quieter sections
    /// passed it is as small as they need, and answers as before.
    #[test]
    fn a_burst_does_not_keep_the_table_large() {
        let mut t = FirstSeen::default();
        t.clear();
        for id in 0..3_000u32 {
            assert_eq!(t.first_or_insert(i64::from(id), id), None);
        }
        assert_eq!(t.slots.len(), capacity_for(3_000));
        for section in 0..SHRINK_EVERY * 2 {
            t.clear();
            for id in 0..1_000u32 {
                let v = i64::from(id % 500) + i64::from(section);
                let want = (id >= 500).then(|| id - 500);
                assert_eq!(t.first_or_insert(v, id), want, "section {section} id {id}");
            }
        }
        // 500 distinct values a section: 1,024 slots, not the burst's 8,192.
        assert_eq!(t.slots.len(), capacity_for(500));
        assert_eq!((capacity_for(500), capacity_for(3_000)), (1_024, 8_192));
    }

    /// Regression: the twin-finding hasher must spread values that differ
    /// only in high bits or in sign (counters in bytes, multiples of 2^32),
    /// not just consecutive ones, over a hash table's low bits.
    #[test]
    fn value_hash_spreads_structured_values() {
        use std::hash::BuildHasher;
        let mut vals: Vec<i64> = (0..4096).collect();
        vals.extend((1..4096).map(|i| i << 32));
        vals.extend((1..4096).map(|i| -i));
        // Keys are random per link: every one of many draws must spread.
        for _ in 0..64 {
            let st = ValueHashState::new();
            let mut low: Vec<u64> = vals.iter().map(|v| st.hash_one(v) & 0xffff).collect();
            low.sort_unstable();
            low.dedup();
            // 12,287 values into 65,536 buckets: random hashing leaves ~11,250
            // distinct; a hasher that ignores the high bits or the sign, ~4,100.
            assert!(low.len() > 10_000, "{} distinct low halves", low.len());
        }
    }
}
