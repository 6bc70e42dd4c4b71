//! [`LiveStore::find_hint`] and the appends by hint alone.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::store::{Matcher, Querier};
use canopy_proto::model::METRIC_NAME;

fn pairs(l: &Labels) -> Vec<(&[u8], &[u8])> {
    l.iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect()
}

fn find(s: &LiveStore, p: &[(&[u8], &[u8])]) -> Option<SeriesHint> {
    s.find_hint(p.iter().copied())
}

fn smp(ts: i64, v: f64) -> [Sample; 1] {
    [Sample {
        ts_ms: ts,
        value: v,
    }]
}

fn pts(s: &LiveStore, name: &str) -> Vec<(i64, f64)> {
    let r = s
        .select(&[Matcher::equal(METRIC_NAME, name)], 0, i64::MAX, 10)
        .unwrap();
    r.first()
        .map(|x| x.samples.iter().map(|p| (p.ts_ms, p.value)).collect())
        .unwrap_or_default()
}

#[test]
fn a_held_series_is_found_by_its_pairs_and_nothing_else() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let a = Labels::metric("find_a", [("node", "n1"), ("job", "j")]);
    assert_eq!(find(&s, &pairs(&a)), None, "nothing held");
    let mut h = SeriesHint::default();
    s.append_samples_hinted(&a, &smp(1000, 1.0), &mut h, &mut |_, r| r.unwrap());
    assert_eq!(find(&s, &pairs(&a)), Some(h), "the store's own hint");
    // The same strings split or ordered otherwise, a pair short or extra,
    // or bytes that are not UTF-8: all misses.
    let p = pairs(&a);
    let swapped: Vec<_> = p.iter().rev().copied().collect();
    assert_eq!(find(&s, &swapped), None);
    assert_eq!(find(&s, &p[..2]), None);
    let mut extra = p.clone();
    extra.push((b"zone", b"z"));
    assert_eq!(find(&s, &extra), None);
    let mut moved = p.clone();
    moved[0] = (b"__name__f", b"ind_a");
    assert_eq!(find(&s, &moved), None);
    let mut bad = p.clone();
    bad[1] = (b"job", b"\xff");
    assert_eq!(find(&s, &bad), None);
    assert_eq!(find(&s, &[]), None);
    // Appending by the hint alone lands in the series.
    assert!(s.append_samples_at(&h, &smp(2000, 2.0), &mut |_, r| r.unwrap()));
    assert_eq!(pts(&s, "find_a"), vec![(1000, 1.0), (2000, 2.0)]);
    assert_eq!(s.hinted_labels(&h), Some(a));
}

#[test]
fn a_hash_collision_is_a_miss_never_another_series() {
    let mut s = LiveStore::new(LiveStoreConfig::default());
    let a = Labels::metric("coll_a", [("node", "n1")]);
    let b = Labels::metric("coll_b", [("node", "n2")]);
    let mut ha = SeriesHint::default();
    s.append_samples_hinted(&a, &smp(1000, 1.0), &mut ha, &mut |_, r| r.unwrap());
    // Stage a collision: b's key names a's series in the index.
    let hb_key = s.index.hash(&b);
    let syms_a = s.syms(s.entries[ha.id as usize].as_ref().unwrap()).to_vec();
    s.index.insert(hb_key, &syms_a, ha.id);
    assert_eq!(find(&s, &pairs(&b)), None, "a's series under b's key");
    // b is then made by its labels, beside a under the same key.
    let mut hb = SeriesHint::default();
    s.append_samples_hinted(&b, &smp(1000, 5.0), &mut hb, &mut |_, r| r.unwrap());
    assert_ne!(hb.id, ha.id);
    assert_eq!(find(&s, &pairs(&b)), Some(hb));
    assert_eq!(find(&s, &pairs(&a)), Some(ha));
    assert_eq!(pts(&s, "coll_a"), vec![(1000, 1.0)]);
    assert_eq!(pts(&s, "coll_b"), vec![(1000, 5.0)]);
}

#[test]
fn a_removed_series_hint_appends_nothing() {
    let mut s = LiveStore::new(LiveStoreConfig {
        retention_ms: 10_000,
        ..LiveStoreConfig::default()
    });
    let a = Labels::metric("gone_a", [("node", "n1")]);
    let b = Labels::metric("gone_b", [("node", "n2")]);
    let mut ha = SeriesHint::default();
    s.append_samples_hinted(&a, &smp(1000, 1.0), &mut ha, &mut |_, r| r.unwrap());
    s.maintain(100_000);
    assert_eq!(find(&s, &pairs(&a)), None);
    // b takes a's slot: a's hint must not write into it.
    let mut hb = SeriesHint::default();
    s.append_samples_hinted(&b, &smp(100_000, 5.0), &mut hb, &mut |_, r| r.unwrap());
    assert_eq!(hb.id, ha.id);
    let mut called = false;
    assert!(!s.append_samples_at(&ha, &smp(100_500, 3.0), &mut |_, _| called = true));
    assert!(!called);
    assert_eq!(s.hinted_labels(&ha), None);
    assert_eq!(pts(&s, "gone_b"), vec![(100_000, 5.0)]);
    assert!(pts(&s, "gone_a").is_empty());
}
