//! The series index of a [`LiveStore`](super::LiveStore): label set to
//! series id, and postings (label name=value to the sorted ids of the series
//! that carry it) so a selector reads only the series it can match.
//!
//! Label sets are found by a keyed 64-bit hash of their strings (one pass
//! of a fast seeded hash over the label set's buffer, so a lookup from the
//! ingest path needs no string-by-string interning), confirmed against the
//! held series' labels; the index does not hold a second copy of every
//! label set, only 32 bits of its key beside its id (8 bytes a series,
//! in a `hashbrown` table that takes equal keys side by side). The hash key is random per store (foldhash, seeded
//! per process and per instance), so crafted label sets cannot force
//! collisions.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use hashbrown::HashTable;
use smallvec::SmallVec;

use foldhash::quality::RandomState;

use super::intern::Interner;
use super::{Labels, MatchOp, Matcher};

/// Passes a `u64` key through: the keys are already keyed hashes (or
/// packed ids), so hashing them again is wasted work.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        // Spread packed (name, value) ids over the whole word.
        self.0 = v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type U64Map<V> = HashMap<u64, V, BuildHasherDefault<PassThrough>>;

/// The 32 bits of a label-set key the index keeps, and the table hash
/// made from them alone (so the table can grow without the labels).
fn short_key(h: u64) -> (u32, u64) {
    let k = (h >> 32) as u32 ^ h as u32;
    (k, short_key_hash(k))
}

/// [`short_key`]'s table hash of a kept short key.
fn short_key_hash(k: u32) -> u64 {
    u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn pair(name: u32, value: u32) -> u64 {
    (u64::from(name) << 32) | u64::from(value)
}

/// Appends the canonical remote_write encoding of label pairs `pairs` to
/// `out`: each a `Label` field (key `0x0a`, its length) holding the name
/// field (`0x0a`) then the value field (`0x12`), lengths as minimal
/// varints, as Prometheus and prost write them for names and values that
/// are not empty (a held label set has none). The label-set key hashes
/// these bytes (stable within a process only: the hash is seeded).
pub(crate) fn encode_pairs<'a>(
    out: &mut SmallVec<[u8; 512]>,
    pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) {
    fn varint(out: &mut SmallVec<[u8; 512]>, mut x: u64) {
        while x >= 0x80 {
            out.push((x as u8) | 0x80);
            x >>= 7;
        }
        out.push(x as u8);
    }
    fn varint_len(x: u64) -> u64 {
        u64::from((64 - (x | 1).leading_zeros()).div_ceil(7))
    }
    for (n, v) in pairs {
        let (nl, vl) = (n.len() as u64, v.len() as u64);
        out.push(0x0a);
        varint(out, 2 + varint_len(nl) + nl + varint_len(vl) + vl);
        out.push(0x0a);
        varint(out, nl);
        out.extend_from_slice(n);
        out.push(0x12);
        varint(out, vl);
        out.extend_from_slice(v);
    }
}

/// Label sets and postings of the live series.
#[derive(Debug, Default)]
pub(crate) struct SeriesIndex {
    hasher: RandomState,
    /// (series id, 32 bits of its label-set key), placed by those 32 bits
    /// (see [`short_key`]): 9 bytes a slot, where a map from the whole
    /// 64-bit key took 17 and a list for keys held twice.
    by_hash: HashTable<(u32, u32)>,
    /// (name id, value id) to sorted series ids.
    postings: U64Map<Vec<u32>>,
    /// Name id to the value ids it has postings for.
    values: HashMap<u32, Vec<u32>>,
}

impl SeriesIndex {
    /// Approximate heap bytes (tables at capacity, postings lists).
    pub(crate) fn heap_bytes(&self) -> usize {
        let table = |cap: usize, item: usize| cap * (item + 1);
        let mut n = table(self.by_hash.capacity(), 8)
            + table(self.postings.capacity(), 32)
            + table(self.values.capacity(), 32);
        n += self
            .postings
            .values()
            .map(|v| v.capacity() * 4)
            .sum::<usize>();
        n += self
            .values
            .values()
            .map(|v| v.capacity() * 4)
            .sum::<usize>();
        n
    }

    /// Every posting as (name id, value id, number of series).
    pub(crate) fn posting_counts(&self) -> impl Iterator<Item = (u32, u32, usize)> + '_ {
        self.postings
            .iter()
            .map(|(&k, ids)| ((k >> 32) as u32, k as u32, ids.len()))
    }

    /// The key of label set `labels`: one seeded hash over its names and
    /// values in order (see [`Self::hash_pairs`]).
    pub(crate) fn hash(&self, labels: &Labels) -> u64 {
        self.hash_pairs(labels.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    /// The key of the label set whose (name, value) pairs, in order, are
    /// `pairs`: the same as [`Self::hash`] of the labels they spell, so a
    /// series can be found from bytes that were never made a label set.
    /// It is [`Self::hash_encoded`] of the pairs' canonical remote_write
    /// encoding ([`encode_pairs`]), so the receiver hashes a request's
    /// label fields in place, in one write, where they are that encoding.
    pub(crate) fn hash_pairs<'a>(&self, pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> u64 {
        let mut buf = SmallVec::<[u8; 512]>::new();
        encode_pairs(&mut buf, pairs);
        self.hash_encoded(&buf)
    }

    /// The key of the label set whose canonical encoding (see
    /// [`encode_pairs`]) is `encoded`: one seeded hash of the bytes.
    #[inline]
    pub(crate) fn hash_encoded(&self, encoded: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(encoded);
        h.finish()
    }

    /// The key of the interned label set `syms` (the same as [`Self::hash`]
    /// of the labels it stands for: label sets are canonical), streamed
    /// from the interned strings without building the label set.
    fn hash_syms(&self, syms: &[u32], strings: &Interner) -> u64 {
        self.hash_pairs(
            syms.chunks_exact(2)
                .map(|p| (strings.get(p[0]).as_bytes(), strings.get(p[1]).as_bytes())),
        )
    }

    /// The id of the series whose label-set key is `h` (from
    /// [`Self::hash`]) and that `is_it` confirms.
    pub(crate) fn find(&self, h: u64, is_it: impl Fn(u32) -> bool) -> Option<u32> {
        let (k, th) = short_key(h);
        // Equal short keys sit side by side: the first the labels confirm.
        self.by_hash
            .iter_hash(th)
            .find(|&&(id, kk)| kk == k && is_it(id))
            .map(|&(id, _)| id)
    }

    /// Adds series `id` with labels `syms` whose key is `h` (not already held).
    pub(crate) fn insert(&mut self, h: u64, syms: &[u32], id: u32) {
        let (k, th) = short_key(h);
        self.by_hash
            .insert_unique(th, (id, k), |&(_, kk)| short_key_hash(kk));
        for p in syms.chunks_exact(2) {
            let list = self.postings.entry(pair(p[0], p[1])).or_default();
            if list.is_empty() {
                self.values.entry(p[0]).or_default().push(p[1]);
            }
            // Ids grow, except when a freed one is reused.
            match list.last() {
                Some(&last) if last > id => {
                    if let Err(at) = list.binary_search(&id) {
                        list.insert(at, id);
                    }
                }
                _ => list.push(id),
            }
        }
    }

    /// Removes the series `dead` (id and labels), in one pass per
    /// posting list they touch.
    pub(crate) fn remove_all(&mut self, dead: &mut [(u32, &[u32])], strings: &Interner) {
        dead.sort_unstable_by_key(|d| d.0);
        let mut touched = Vec::new();
        for (id, syms) in dead.iter() {
            let (_, th) = short_key(self.hash_syms(syms, strings));
            if let Ok(e) = self.by_hash.find_entry(th, |&(i, _)| i == *id) {
                e.remove();
            }
            touched.extend(syms.chunks_exact(2).map(|p| pair(p[0], p[1])));
        }
        touched.sort_unstable();
        touched.dedup();
        let is_dead = |i: &u32| dead.binary_search_by_key(i, |d| d.0).is_ok();
        for key in touched {
            let Some(list) = self.postings.get_mut(&key) else {
                continue;
            };
            list.retain(|i| !is_dead(i));
            if list.is_empty() {
                self.postings.remove(&key);
                let (name, value) = ((key >> 32) as u32, key as u32);
                if let Some(vs) = self.values.get_mut(&name) {
                    vs.retain(|v| *v != value);
                    if vs.is_empty() {
                        self.values.remove(&name);
                    }
                }
            } else if list.capacity() > 2 * list.len() + 16 {
                list.shrink_to_fit();
            }
        }
    }

    /// Sorted ids of the series that can match `matchers`, from the
    /// postings of every matcher that rejects the empty value (an absent
    /// label); `None` when no matcher narrows the search (scan them all).
    /// Every candidate must still be checked against all the matchers.
    pub(crate) fn candidates(&self, matchers: &[Matcher], strings: &Interner) -> Option<Vec<u32>> {
        let mut sets: Vec<Vec<u32>> = Vec::new();
        let mut single: Vec<&[u32]> = Vec::new();
        for m in matchers {
            if m.matches("") {
                continue;
            }
            let Some(name) = strings.id_of(&m.name) else {
                return Some(Vec::new());
            };
            match &m.op {
                MatchOp::Equal(v) => {
                    let list = strings
                        .id_of(v)
                        .and_then(|v| self.postings.get(&pair(name, v)));
                    match list {
                        Some(l) => single.push(l),
                        None => return Some(Vec::new()),
                    }
                }
                _ => {
                    let mut lists: Vec<&[u32]> = self
                        .values
                        .get(&name)
                        .into_iter()
                        .flatten()
                        .filter(|&&v| m.matches(strings.get(v)))
                        .filter_map(|&v| self.postings.get(&pair(name, v)).map(Vec::as_slice))
                        .collect();
                    if lists.len() == 1 {
                        single.extend(lists.pop());
                    } else {
                        let mut u: Vec<u32> = lists.concat();
                        u.sort_unstable();
                        u.dedup();
                        sets.push(u);
                    }
                }
            }
        }
        let mut all: Vec<&[u32]> = single;
        all.extend(sets.iter().map(Vec::as_slice));
        all.sort_by_key(|l| l.len());
        let (first, rest) = all.split_first()?;
        let mut out = first.to_vec();
        for l in rest {
            if out.is_empty() {
                break;
            }
            out.retain(|i| l.binary_search(i).is_ok());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::Labels;

    fn re(f: fn(&str) -> bool) -> MatchOp {
        MatchOp::Regex(Arc::new(f))
    }

    proptest::proptest! {
        /// `encode_pairs` writes what prost writes for the `Label` fields
        /// of a series (one-byte and longer lengths; names and values not
        /// empty, as in every held label set: prost leaves an empty field
        /// out), so the receiver's hash of a request's label bytes is the
        /// store's key.
        #[test]
        fn encoded_pairs_are_the_remote_write_label_fields(
            pairs in proptest::collection::vec(
                (".{1,3}|[a-z]{100,200}", "[a-z0-9]{1,20}|.{120,300}"),
                0..8,
            ),
        ) {
            use canopy_proto::schema::remote::{Label, TimeSeries};
            use prost::Message;
            let ts = TimeSeries {
                labels: pairs
                    .iter()
                    .map(|(n, v)| Label { name: n.clone(), value: v.clone() })
                    .collect(),
                ..TimeSeries::default()
            };
            let mut got = smallvec::SmallVec::<[u8; 512]>::new();
            super::encode_pairs(&mut got, pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
            proptest::prop_assert_eq!(&got[..], &ts.encode_to_vec()[..]);
            let idx = SeriesIndex::default();
            proptest::prop_assert_eq!(
                idx.hash_encoded(&ts.encode_to_vec()),
                idx.hash_pairs(pairs.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
            );
        }
    }

    #[test]
    fn postings_narrow_and_removal_keeps_them_sorted() {
        let mut strings = Interner::default();
        let mut idx = SeriesIndex::default();
        let mut held: Vec<Box<[u32]>> = Vec::new();
        for i in 0..20u32 {
            let l = Labels::metric(
                if i % 2 == 0 { "a" } else { "b" },
                [
                    ("node", format!("n{}", i % 5)),
                    ("job", format!("{}", i % 3)),
                ],
            );
            let syms = strings.intern(&l);
            idx.insert(idx.hash(&l), &syms, i);
            held.push(syms);
        }
        let find = |idx: &SeriesIndex, syms: &[u32]| {
            let l = strings.labels(syms);
            idx.find(idx.hash(&l), |i| {
                held.get(i as usize).is_some_and(|s| strings.same(s, &l))
            })
        };
        for (i, s) in held.iter().enumerate() {
            assert_eq!(find(&idx, s), Some(i as u32));
        }
        let m = |name: &str, op| Matcher {
            name: name.into(),
            op,
        };
        let q = [
            Matcher::equal("__name__", "a"),
            m("node", re(|v| v == "n0" || v == "n2")),
        ];
        // a: even ids; node n0 or n2: i % 5 in {0, 2}.
        assert_eq!(idx.candidates(&q, &strings), Some(vec![0, 2, 10, 12]));
        assert_eq!(
            idx.candidates(&[Matcher::equal("node", "nope")], &strings),
            Some(vec![])
        );
        assert_eq!(
            idx.candidates(&[m("x", MatchOp::NotEqual("1".into()))], &strings),
            None
        );
        let mut dead = vec![(12, &held[12][..]), (0, &held[0][..])];
        idx.remove_all(&mut dead, &strings);
        assert_eq!(idx.candidates(&q, &strings), Some(vec![2, 10]));
        assert_eq!(find(&idx, &held[0]), None);
        assert_eq!(find(&idx, &held[2]), Some(2));
        // A freed id comes back in order.
        let l0 = strings.labels(&held[0]);
        idx.insert(idx.hash(&l0), &held[0], 0);
        assert_eq!(idx.candidates(&q, &strings), Some(vec![0, 2, 10]));
    }
}
