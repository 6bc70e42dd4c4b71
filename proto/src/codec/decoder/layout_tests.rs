//! Layout of the hot records and the members set against a reference.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::super::packed::SourceCoding;
use super::records::MEMBERS_VEC_MAX;
use super::*;

/// A source's record is three aligned cache lines, what every
/// section reads (timestamp, tag, coding with its inline ids) is in the
/// first, and what a lazy repeat reads besides in the second.
#[test]
fn a_source_record_is_three_lines_its_hot_parts_in_the_first_two() {
    assert_eq!(std::mem::size_of::<RxSource>(), 192);
    assert_eq!(std::mem::align_of::<RxSource>(), 64);
    assert!(std::mem::offset_of!(RxSource, coding) + std::mem::size_of::<SourceCoding>() <= 64);
    let lazy = std::mem::offset_of!(RxSource, lazy);
    assert!(lazy >= 64 && lazy + std::mem::size_of::<Lazy>() <= 128);
}

proptest! {
    /// Members answer as an ordered set would, in the vector form and
    /// (`big`: started past its bound) the tree form.
    #[test]
    fn members_act_as_an_ordered_set(big in any::<bool>(), ops in prop::collection::vec((any::<bool>(), 0u32..6000), 0..600)) {
        let mut m = Members::default();
        let mut want = BTreeSet::new();
        if big {
            for id in 10_000..10_000 + MEMBERS_VEC_MAX as u32 + 1 {
                m.insert(id);
                want.insert(id);
            }
            prop_assert!(matches!(m, Members::Many(_)));
        }
        for (add, id) in ops {
            if add {
                m.insert(id);
                want.insert(id);
            } else {
                m.remove(id);
                want.remove(&id);
            }
            prop_assert_eq!(m.len(), want.len());
            prop_assert_eq!(m.first(), want.first().copied());
        }
        let got = m.ids();
        prop_assert_eq!(got, want.into_iter().collect::<Vec<_>>());
    }
}

/// Past the vector's bound the members become a tree, in order.
#[test]
fn many_members_become_a_tree() {
    let mut m = Members::default();
    // Descending: every insert lands at the front.
    for id in (0..=MEMBERS_VEC_MAX as u32).rev() {
        m.insert(id);
    }
    assert!(matches!(m, Members::Many(_)));
    assert_eq!(m.len(), MEMBERS_VEC_MAX + 1);
    assert_eq!(m.ids(), (0..=MEMBERS_VEC_MAX as u32).collect::<Vec<_>>());
}
