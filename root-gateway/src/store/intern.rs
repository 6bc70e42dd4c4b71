//! Interned label strings: every series of a [`LiveStore`](super::LiveStore)
//! holds its labels as a compact list of string ids into one shared table,
//! so a label value common to many series (a job, a node, a metric name)
//! is stored once, and a series' label set costs a few bytes per label
//! (varint ids).

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;
use smallvec::SmallVec;

use super::{Labels, Matcher};

/// A series' labels as interned ids: name, value, name, value, ... in the
/// order of [`Labels`] (sorted by name).
#[cfg(test)]
pub(crate) type SymLabels = Box<[u32]>;

/// A series' label ids decoded from the [`LabelArena`]: name, value, ...
/// (on the stack for up to 16 labels).
pub(crate) type Syms = SmallVec<[u32; 32]>;

/// Every held series' label ids, end to end in one byte buffer: at a
/// series' offset the number of ids, then the ids, each a LEB128 varint.
/// Names and common values are interned first and have small ids, so most
/// ids take one or two bytes where a `u32` took four (issue 5: RSS per
/// series; 44 -> ~20 bytes a series in the side-by-side). An entry keeps a
/// 4-byte offset where a boxed slice took 16 bytes in the entry and an
/// allocation of its own. Sets of removed series leave holes until
/// [`LabelArena::compact`] rewrites the buffer.
#[derive(Debug, Default)]
pub(crate) struct LabelArena {
    bytes: Vec<u8>,
    /// Bytes of `bytes` no series uses any more.
    dead: usize,
}

/// Appends `v` as a LEB128 varint.
fn put_id(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 varint at `*at`, moving `*at` past it (`None` past the
/// end or for more than 5 bytes).
#[inline]
fn get_id(b: &[u8], at: &mut usize) -> Option<u32> {
    let mut v = 0u32;
    for shift in (0..35).step_by(7) {
        let x = *b.get(*at)?;
        *at += 1;
        v |= u32::from(x & 0x7f).checked_shl(shift).unwrap_or(0);
        if x < 0x80 {
            return Some(v);
        }
    }
    None
}

impl LabelArena {
    /// The label ids at offset `at` (empty for an offset not from `intern`).
    #[inline]
    pub(crate) fn get(&self, at: u32) -> Syms {
        let mut i = at as usize;
        let mut out = Syms::new();
        let Some(n) = get_id(&self.bytes, &mut i) else {
            return out;
        };
        for _ in 0..n {
            match get_id(&self.bytes, &mut i) {
                Some(id) => out.push(id),
                None => return Syms::new(),
            }
        }
        out
    }

    /// True when the set at `at` stands for exactly the (name, value)
    /// pairs `pairs` (as [`Interner::same_pairs`] of [`LabelArena::get`]),
    /// its ids compared as they are read: no copy of the set is made, and
    /// the first differing string ends the walk. False for an offset not
    /// from `intern`.
    #[inline]
    pub(crate) fn same_pairs<'a>(
        &self,
        at: u32,
        strings: &Interner,
        mut pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> bool {
        let b = &self.bytes;
        let mut i = at as usize;
        // A set that does not decode is `get`'s empty set: only no pairs
        // at all equal it (none was taken from `pairs` before it failed).
        let Some(n) = get_id(b, &mut i) else {
            return pairs.next().is_none();
        };
        let mut first = true;
        for _ in 0..n / 2 {
            let (Some(name), Some(value)) = (get_id(b, &mut i), get_id(b, &mut i)) else {
                return first && pairs.next().is_none();
            };
            let Some((nb, vb)) = pairs.next() else {
                return false;
            };
            first = false;
            if !same_bytes(strings.get(name).as_bytes(), nb)
                || !same_bytes(strings.get(value).as_bytes(), vb)
            {
                return false;
            }
        }
        // An odd count (never written) reads as `get`'s does: its last id
        // is no pair, but it must decode.
        if n % 2 == 1 && get_id(b, &mut i).is_none() {
            return first && pairs.next().is_none();
        }
        pairs.next().is_none()
    }

    /// Bytes the set at `at` takes (its count and ids).
    fn set_len(&self, at: u32) -> usize {
        let mut i = at as usize;
        let Some(n) = get_id(&self.bytes, &mut i) else {
            return 0;
        };
        for _ in 0..n {
            if get_id(&self.bytes, &mut i).is_none() {
                break;
            }
        }
        i - at as usize
    }

    /// The first byte of the set at `at` (0 past the end): reading it
    /// loads the set into the cache.
    #[inline]
    pub(crate) fn touch(&self, at: u32) -> u8 {
        self.bytes.get(at as usize).copied().unwrap_or(0)
    }

    /// Adds `labels` interned in `strings`; its offset, or `None` when the
    /// buffer would pass 2^32 bytes (offsets are `u32`).
    pub(crate) fn intern(&mut self, strings: &mut Interner, labels: &Labels) -> Option<u32> {
        let at = u32::try_from(self.bytes.len()).ok()?;
        let n = u32::try_from(labels.len().checked_mul(2)?).ok()?;
        // At most 5 bytes an id and the count.
        let end = self
            .bytes
            .len()
            .checked_add((n as usize).checked_add(1)?.checked_mul(5)?)?;
        if end > u32::MAX as usize {
            return None;
        }
        put_id(&mut self.bytes, n);
        for (name, value) in labels.iter() {
            let a = strings.acquire(name);
            let b = strings.acquire(value);
            put_id(&mut self.bytes, a);
            put_id(&mut self.bytes, b);
        }
        Some(at)
    }

    /// Marks the set at `at` unused (its bytes are reclaimed by `compact`)
    /// and releases its strings in `strings` (a string no set uses any
    /// more is freed).
    pub(crate) fn free(&mut self, strings: &mut Interner, at: u32) {
        for id in self.get(at) {
            strings.release(id);
        }
        self.dead += self.set_len(at);
    }

    /// Heap bytes (capacity).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }

    /// True when freed sets are more than half the buffer (and not a few,
    /// unless they are all of it).
    pub(crate) fn wants_compaction(&self) -> bool {
        self.dead * 2 > self.bytes.len() && (self.dead > 4096 || self.dead == self.bytes.len())
    }

    /// Copies the sets still in use to a fresh buffer, moving each offset
    /// `offsets` yields (every live series' offset, once) to its new place.
    pub(crate) fn compact<'a>(&mut self, offsets: impl Iterator<Item = &'a mut u32>) {
        let mut bytes = Vec::with_capacity(self.bytes.len().saturating_sub(self.dead));
        for at in offsets {
            let from = *at as usize;
            let set = self
                .bytes
                .get(from..from + self.set_len(*at))
                .unwrap_or_default();
            *at = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
            bytes.extend_from_slice(set);
        }
        self.bytes = bytes;
        self.dead = 0;
    }
}

/// The table of interned strings, counted: every label set that holds a
/// string holds a reference to it, and a string no set holds any more is
/// freed and its id reused. Job ids, users and pod names come and go with
/// the jobs, so on a long-running gateway a table that only grew would
/// hold every job the cluster ever ran.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    /// By id; a freed id holds the empty string until it is reused.
    strings: Vec<Arc<str>>,
    /// References to each id (occurrences in held label sets).
    refs: Vec<u32>,
    /// Freed ids, reused before the table grows (so ids stay small, and
    /// their varints short).
    free: Vec<u32>,
    /// Seeded per process (foldhash): strings come from the network.
    ids: HashMap<Arc<str>, u32, RandomState>,
}

impl Interner {
    /// Number of distinct strings held (freed ones not counted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.strings.len() - self.free.len()
    }

    /// Approximate heap bytes: the strings, their handles, counts, free
    /// list and lookup table.
    pub(crate) fn heap_bytes(&self) -> usize {
        let text: usize = self.strings.iter().map(|s| s.len() + 16).sum();
        text + self.strings.capacity() * 16
            + (self.refs.capacity() + self.free.capacity()) * 4
            + self.ids.capacity() * 25
    }

    /// The table of strings by id (shared, for a snapshot cut).
    pub(crate) fn table(&self) -> Vec<Arc<str>> {
        self.strings.clone()
    }

    /// The string of `id` (empty for an unknown id).
    pub(crate) fn get(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", |s| s)
    }

    /// The id of `s` if it is interned.
    pub(crate) fn id_of(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    /// The id of `s`, interned if new, with one more reference to it
    /// (given back by [`Interner::release`]).
    pub(crate) fn acquire(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            if let Some(r) = self.refs.get_mut(i as usize) {
                // Saturated: never freed (more references than ids).
                *r = r.saturating_add(1);
            }
            return i;
        }
        let a: Arc<str> = Arc::from(s);
        let i = match self.free.pop() {
            Some(i) => {
                self.strings[i as usize] = Arc::clone(&a);
                self.refs[i as usize] = 1;
                i
            }
            None => {
                let i = u32::try_from(self.strings.len()).unwrap_or(u32::MAX);
                self.strings.push(Arc::clone(&a));
                self.refs.push(1);
                i
            }
        };
        self.ids.insert(a, i);
        i
    }

    /// Gives back one reference to `id`; the last one frees the string.
    pub(crate) fn release(&mut self, id: u32) {
        let i = id as usize;
        let Some(r) = self.refs.get_mut(i) else {
            return;
        };
        match *r {
            0 | u32::MAX => {}
            1 => {
                *r = 0;
                let gone = std::mem::replace(&mut self.strings[i], Arc::from(""));
                if self.ids.get(&gone) == Some(&id) {
                    self.ids.remove(&gone);
                }
                self.free.push(id);
            }
            _ => *r -= 1,
        }
    }

    /// True when `syms` stands for exactly the label set `labels`.
    pub(crate) fn same(&self, syms: &[u32], labels: &Labels) -> bool {
        syms.len() == 2 * labels.len()
            && syms.chunks_exact(2).zip(labels.iter()).all(|(p, (n, v))| {
                same_bytes(self.get(p[0]).as_bytes(), n.as_bytes())
                    && same_bytes(self.get(p[1]).as_bytes(), v.as_bytes())
            })
    }

    /// True when `syms` stands for exactly the (name, value) pairs `pairs`,
    /// given as bytes in order (no label set needed; bytes that are not
    /// UTF-8 never equal an interned string). The reference that
    /// [`LabelArena::same_pairs`] is tested against.
    #[cfg(test)]
    pub(crate) fn same_pairs<'a>(
        &self,
        syms: &[u32],
        mut pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> bool {
        let mut held = syms.chunks_exact(2);
        loop {
            match (held.next(), pairs.next()) {
                (None, None) => return true,
                (Some(p), Some((n, v))) => {
                    if !same_bytes(self.get(p[0]).as_bytes(), n)
                        || !same_bytes(self.get(p[1]).as_bytes(), v)
                    {
                        return false;
                    }
                }
                _ => return false,
            }
        }
    }

    /// Interns `labels` (the store interns into its [`LabelArena`]).
    #[cfg(test)]
    pub(crate) fn intern(&mut self, labels: &Labels) -> SymLabels {
        let mut out = Vec::with_capacity(labels.len() * 2);
        for (n, v) in labels.iter() {
            let a = self.acquire(n);
            let b = self.acquire(v);
            out.extend([a, b]);
        }
        out.into_boxed_slice()
    }

    /// The label set of `syms`.
    pub(crate) fn labels(&self, syms: &[u32]) -> Labels {
        // Interned sets are canonical: packed in one pass.
        Labels::from_sorted_pairs(
            syms.chunks_exact(2)
                .map(|p| (self.get(p[0]), self.get(p[1]))),
        )
    }

    /// The value of label `name` in `syms`, if present.
    pub(crate) fn value<'a>(&'a self, syms: &[u32], name: &str) -> Option<&'a str> {
        syms.chunks_exact(2)
            .find(|p| self.get(p[0]) == name)
            .map(|p| self.get(p[1]))
    }

    /// Orders two interned label sets as [`Labels`] orders the label sets
    /// they stand for: pair by pair, name then value. Equal ids are equal
    /// strings, so only the first differing id is looked up.
    pub(crate) fn cmp_syms(&self, a: &[u32], b: &[u32]) -> std::cmp::Ordering {
        for (x, y) in a.iter().zip(b) {
            if x != y {
                return self.get(*x).cmp(self.get(*y));
            }
        }
        a.len().cmp(&b.len())
    }

    /// Sorts `order` (indices into `sets`) so the label sets it names come
    /// in [`Labels`] order, as sorting with [`Interner::cmp_syms`] would
    /// (the sets must be distinct, as a store's are). A selection's sets
    /// share most of their ids position by position, so it sorts by one
    /// position at a time: indices grouped by the id there (an integer
    /// sort), the groups ordered by their strings (one string comparison
    /// per pair of distinct ids, not per pair of sets), then each group by
    /// the next position; small groups go to `cmp_syms` directly.
    pub(crate) fn sort_sets(&self, sets: &[&[u32]], order: &mut [u32]) {
        let mut runs = Vec::new();
        let mut tmp = Vec::new();
        self.sort_from(sets, order, 0, &mut runs, &mut tmp);
    }

    fn sort_from(
        &self,
        sets: &[&[u32]],
        order: &mut [u32],
        mut pos: usize,
        runs: &mut Vec<(Option<u32>, usize, usize)>,
        tmp: &mut Vec<u32>,
    ) {
        // The id at `pos` of set `i` (`None` past its end: sorts first, as
        // a shorter set sorts before a longer one it is a prefix of).
        let at_pos = |i: u32, pos: usize| sets[i as usize].get(pos).copied();
        loop {
            if order.len() <= 16 {
                order.sort_unstable_by(|&a, &b| self.cmp_syms(sets[a as usize], sets[b as usize]));
                return;
            }
            let first = at_pos(order[0], pos);
            if order.iter().all(|&i| at_pos(i, pos) == first) {
                if first.is_none() {
                    return;
                }
                pos += 1;
                continue;
            }
            break;
        }
        let at = |i: u32| at_pos(i, pos);
        order.sort_unstable_by_key(|&i| at(i));
        let start = runs.len();
        let mut a = 0;
        while a < order.len() {
            let id = at(order[a]);
            let mut b = a + 1;
            while b < order.len() && at(order[b]) == id {
                b += 1;
            }
            runs.push((id, a, b));
            a = b;
        }
        runs[start..].sort_unstable_by(|x, y| match (x.0, y.0) {
            (Some(p), Some(q)) => self.get(p).cmp(self.get(q)),
            (p, q) => p.cmp(&q),
        });
        tmp.clear();
        for &(_, a, b) in &runs[start..] {
            tmp.extend_from_slice(&order[a..b]);
        }
        order.copy_from_slice(tmp);
        let mut a = 0;
        for r in start..runs.len() {
            let (id, x, y) = runs[r];
            let b = a + (y - x);
            if id.is_some() {
                self.sort_from(sets, &mut order[a..b], pos + 1, runs, tmp);
            }
            a = b;
        }
        runs.truncate(start);
    }

    /// True when every matcher accepts the series `syms`.
    pub(crate) fn all_match(&self, matchers: &[Matcher], syms: &[u32]) -> bool {
        matchers
            .iter()
            .all(|m| m.matches(self.value(syms, &m.name).unwrap_or("")))
    }
}

/// `a == b`, with strings of up to 16 bytes (most label names and values)
/// compared as two overlapping words in place instead of by a call to
/// `memcmp`: the remote_write receiver compares every label of every series
/// of a request.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |x: &[u8], at: usize| {
        x.get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map(u64::from_ne_bytes)
    };
    let half = |x: &[u8], at: usize| {
        x.get(at..at + 4)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .map(u32::from_ne_bytes)
    };
    match n {
        0 => true,
        1..=3 => a == b,
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MatchOp;

    #[test]
    fn shared_strings_are_stored_once_and_round_trip() {
        let mut i = Interner::default();
        let a = Labels::metric("cpu_seconds_total", [("job", "node"), ("mode", "idle")]);
        let b = Labels::metric("cpu_seconds_total", [("job", "node"), ("mode", "user")]);
        let sa = i.intern(&a);
        let sb = i.intern(&b);
        // __name__, cpu_seconds_total, job, node, mode, idle, user.
        assert_eq!(i.len(), 7);
        assert_eq!(sa.len(), 6);
        assert_eq!(i.labels(&sa), a);
        assert_eq!(i.labels(&sb), b);
        assert!(i.same(&sb, &b));
        assert!(!i.same(&sa, &b));
        assert!(!i.same(&sb, &Labels::metric("cpu_seconds_total", [("job", "node")])));
        assert_eq!(i.value(&sa, "mode"), Some("idle"));
        assert_eq!(i.value(&sa, "absent"), None);
        let m = [
            Matcher::equal("job", "node"),
            Matcher {
                name: "mode".into(),
                op: MatchOp::NotEqual("idle".into()),
            },
        ];
        assert!(!i.all_match(&m, &sa));
        assert!(i.all_match(&m, &sb));
    }

    proptest::proptest! {
        #[test]
        fn sorting_sets_by_position_is_sorting_by_labels(
            sets in proptest::collection::btree_set(
                proptest::collection::btree_map(0u8..4, 0u8..6, 0..4), 0..80),
            shuffle in proptest::collection::vec(0usize..1000, 0..80),
        ) {
            let mut i = Interner::default();
            // Names and values whose ids are interned out of string order.
            let name = |n: u8| ["zz", "b", "a_", "q"][n as usize];
            let value = |v: u8| ["9", "10", "x", "1", "Z", "ab"][v as usize];
            let labels: Vec<Labels> = sets
                .iter()
                .map(|m| Labels::from_pairs(m.iter().map(|(n, v)| (name(*n), value(*v)))))
                .collect();
            let syms: Vec<SymLabels> = labels.iter().rev().map(|l| i.intern(l)).rev().collect();
            let refs: Vec<&[u32]> = syms.iter().map(|s| &s[..]).collect();
            let mut order: Vec<u32> = (0..refs.len() as u32).collect();
            for (k, &j) in shuffle.iter().enumerate().take(order.len()) {
                let n = order.len();
                order.swap(k, j % n);
            }
            i.sort_sets(&refs, &mut order);
            let got: Vec<&Labels> = order.iter().map(|&k| &labels[k as usize]).collect();
            let mut want: Vec<&Labels> = labels.iter().collect();
            want.sort();
            proptest::prop_assert_eq!(got, want);
        }
    }

    proptest::proptest! {
        #[test]
        fn same_bytes_is_equality(
            a in proptest::collection::vec(0u8..3, 0..40),
            flip in proptest::option::of(0usize..40),
            extra in proptest::option::of(0u8..3),
        ) {
            let mut b = a.clone();
            if let Some(i) = flip && let Some(x) = b.get_mut(i) {
                *x ^= 1;
            }
            if let Some(x) = extra {
                b.push(x);
            }
            proptest::prop_assert_eq!(same_bytes(&a, &b), a == b);
            proptest::prop_assert!(same_bytes(&a, &a));
        }
    }

    #[test]
    fn arena_sets_round_trip_and_survive_compaction() {
        let mut strings = Interner::default();
        let mut arena = LabelArena::default();
        let sets: Vec<Labels> = (0..3000)
            .map(|i| Labels::metric("m", [("node", format!("n{i}")), ("job", "j".into())]))
            .collect();
        let mut at: Vec<u32> = sets
            .iter()
            .map(|l| arena.intern(&mut strings, l).expect("fits"))
            .collect();
        for (l, &a) in sets.iter().zip(&at) {
            assert!(strings.same(&arena.get(a), l));
        }
        assert!(arena.get(u32::MAX).is_empty());
        // Free two thirds: past half the buffer, so compaction is due.
        let mut kept = Vec::new();
        let mut dead_bytes = 0;
        for (i, a) in at.drain(..).enumerate() {
            if i % 3 == 0 {
                kept.push((i, a));
            } else {
                dead_bytes += arena.set_len(a);
                arena.free(&mut strings, a);
            }
        }
        // Ids past 127 take two bytes: the set of the 3000th node does.
        assert!(arena.set_len(kept[kept.len() - 1].1) > 7);
        assert!(arena.wants_compaction());
        let before = arena.bytes.len();
        arena.compact(kept.iter_mut().map(|(_, a)| a));
        assert!(!arena.wants_compaction());
        assert_eq!(arena.bytes.len(), before - dead_bytes);
        for (i, a) in &kept {
            assert_eq!(strings.labels(&arena.get(*a)), sets[*i]);
        }
    }

    proptest::proptest! {
        /// The arena compares a set's ids to byte pairs as it reads them,
        /// as a copy of the set compared pair by pair would: equal sets,
        /// a string changed, a pair more or less, and bytes of other
        /// sets all get the copy's verdict.
        #[test]
        fn arena_same_pairs_is_the_copy_s_verdict(
            sets in proptest::collection::vec(
                proptest::collection::btree_map(0u8..5, 0u8..200, 0..6), 1..12),
            probes in proptest::collection::vec(
                (0usize..12, proptest::collection::vec((0u8..6, 0u8..201), 0..7), 0u8..4), 1..24),
        ) {
            let mut strings = Interner::default();
            let mut arena = LabelArena::default();
            // Ids past 127 take two bytes: 200 values and 5 names pass it.
            let name = |n: u8| format!("n{n}");
            let value = |v: u8| format!("value-{v}");
            let mut at = Vec::new();
            for m in &sets {
                let l = Labels::from_pairs(m.iter().map(|(n, v)| (name(*n), value(*v))));
                at.push(arena.intern(&mut strings, &l).expect("fits"));
            }
            at.push(u32::MAX);
            for (k, pairs, how) in probes {
                let a = at[k % at.len()];
                // Either a set's own pairs, edited, or pairs made up.
                let mut p: Vec<(String, String)> = match sets.get(k % at.len()) {
                    Some(m) if how != 0 => m.iter().map(|(n, v)| (name(*n), value(*v))).collect(),
                    _ => pairs.iter().map(|(n, v)| (name(*n), value(*v))).collect(),
                };
                match (how, pairs.first()) {
                    (2, Some((_, v))) if !p.is_empty() => p[0].1 = value(*v),
                    (3, Some((n, v))) => p.push((name(*n), value(*v))),
                    _ => {}
                }
                let bytes = || p.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes()));
                proptest::prop_assert_eq!(
                    arena.same_pairs(a, &strings, bytes()),
                    strings.same_pairs(&arena.get(a), bytes())
                );
            }
        }
    }

    #[test]
    fn strings_no_set_holds_are_freed_and_their_ids_reused() {
        let mut strings = Interner::default();
        let mut arena = LabelArena::default();
        let job = |j: u32| Labels::metric("cpu", [("job_id", j.to_string())]);
        let a = arena.intern(&mut strings, &job(1)).expect("fits");
        let b = arena.intern(&mut strings, &job(1)).expect("fits");
        let c = arena.intern(&mut strings, &job(2)).expect("fits");
        // __name__, cpu, job_id, 1, 2.
        assert_eq!(strings.len(), 5);
        let one = strings.id_of("1").expect("held");
        arena.free(&mut strings, a);
        // Another set still holds "1".
        assert_eq!(strings.id_of("1"), Some(one));
        assert_eq!(strings.labels(&arena.get(b)), job(1));
        arena.free(&mut strings, b);
        assert_eq!(strings.id_of("1"), None);
        assert_eq!(strings.len(), 4);
        // The freed id is the next one given out.
        let d = arena.intern(&mut strings, &job(3)).expect("fits");
        assert_eq!(strings.id_of("3"), Some(one));
        assert_eq!(strings.labels(&arena.get(d)), job(3));
        assert_eq!(strings.labels(&arena.get(c)), job(2));
        // Giving back what is not held changes nothing.
        strings.release(u32::MAX);
        assert_eq!(strings.len(), 5);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Interning and freeing label sets in any order: every held set
        /// reads back, and the table holds exactly the strings of the held
        /// sets (a model: the sets themselves).
        #[test]
        fn the_table_holds_exactly_the_strings_of_held_sets(
            ops in proptest::collection::vec((proptest::prelude::any::<bool>(), 0u8..12, 0u8..4, 0usize..64), 1..200)
        ) {
            let mut strings = Interner::default();
            let mut arena = LabelArena::default();
            let mut held: Vec<(u32, Labels)> = Vec::new();
            for (add, job, user, pick) in ops {
                if add || held.is_empty() {
                    let l = Labels::metric(
                        if job % 2 == 0 { "io" } else { "cpu" },
                        [("job_id", format!("j{job}")), ("user", format!("u{user}"))],
                    );
                    let at = arena.intern(&mut strings, &l).expect("fits");
                    held.push((at, l));
                } else {
                    let (at, _) = held.swap_remove(pick % held.len());
                    arena.free(&mut strings, at);
                }
                let mut want = std::collections::BTreeSet::new();
                for (at, l) in &held {
                    proptest::prop_assert_eq!(&strings.labels(&arena.get(*at)), l);
                    for (n, v) in l.iter() {
                        want.insert(n.to_string());
                        want.insert(v.to_string());
                    }
                }
                proptest::prop_assert_eq!(strings.len(), want.len());
                for w in &want {
                    proptest::prop_assert!(strings.id_of(w).is_some(), "{} held", w);
                }
                for j in 0..12 {
                    let s = format!("j{j}");
                    proptest::prop_assert_eq!(strings.id_of(&s).is_some(), want.contains(&s));
                }
            }
        }
    }

    #[test]
    fn interned_order_is_label_order() {
        let mut i = Interner::default();
        let sets = [
            Labels::metric("b", [("x", "1")]),
            Labels::metric("a", [("x", "2"), ("y", "0")]),
            Labels::metric("a", [("x", "2")]),
            Labels::metric("a", [("x", "10")]),
            Labels::metric("a", [("w", "9")]),
            Labels::from_pairs([("x", "1")]),
            Labels::from_pairs([("__name__", "a")]),
        ];
        // Interned in an order unlike the strings' order.
        let syms: Vec<SymLabels> = sets.iter().map(|l| i.intern(l)).collect();
        for (a, sa) in sets.iter().zip(&syms) {
            for (b, sb) in sets.iter().zip(&syms) {
                assert_eq!(i.cmp_syms(sa, sb), a.cmp(b), "{a} vs {b}");
            }
        }
    }
}
