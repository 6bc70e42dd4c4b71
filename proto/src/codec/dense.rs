//! Dense storage keyed by the small ids a link's peer assigns (sans-I/O).
//!
//! A sender hands out series and source ids from a free list (see
//! [`SeriesTable`](super::table::SeriesTable)), so its ids stay below its
//! peak count: a table indexed by id finds a record by shifting the id, with
//! no hashing and no probe, where a hash map's control bytes and bucket were
//! one more cache miss per changed series at a gateway of 10,000 nodes.
//!
//! ```text
//!   id = page << 6 | slot
//!   pages: [ Some(Box<[Option<T>; 64]>) | None | Some(..) | .. ]   (< limit / 64 entries)
//! ```
//!
//! The bound: ids at or above `limit` are refused (the caller answers with a
//! typed error), so the table never holds more than `limit` slots; a page
//! is allocated when its first id appears and freed when its last one goes,
//! so a peer naming one huge or sparse id costs one page, not `limit` slots.

/// Slots per page: a power of two.
const PAGE_BITS: u32 = 6;
const PAGE: usize = 1 << PAGE_BITS;

/// Records of type `T` by peer-chosen id below a fixed bound.
#[derive(Clone, Debug)]
pub(crate) struct IdTable<T> {
    pages: Vec<Option<Page<T>>>,
    live: usize,
    limit: u32,
}

/// One page of slots and how many of them hold a record.
#[derive(Clone, Debug)]
struct Page<T> {
    slots: Box<[Option<T>]>,
    live: u32,
}

impl<T> IdTable<T> {
    /// An empty table accepting ids below `limit` (at most `u32::MAX`).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            pages: Vec::new(),
            live: 0,
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        }
    }

    /// The bound for a link allowed `max` live records: twice as many ids
    /// (a sender's ids stay below its peak count, and ids it freed during
    /// a tick come back only after it), and a page at least.
    pub(crate) fn limit_for(max: usize) -> usize {
        max.saturating_mul(2).max(PAGE)
    }

    /// True when `id` is below the bound (an insert of it can succeed).
    pub(crate) fn in_range(&self, id: u32) -> bool {
        id < self.limit
    }

    /// The record with id `id`.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        let p = self.pages.get((id >> PAGE_BITS) as usize)?.as_ref()?;
        p.slots.get(id as usize & (PAGE - 1))?.as_ref()
    }

    /// Mutable access to the record with id `id`.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        let p = self.pages.get_mut((id >> PAGE_BITS) as usize)?.as_mut()?;
        p.slots.get_mut(id as usize & (PAGE - 1))?.as_mut()
    }

    /// True when a record has id `id`.
    pub(crate) fn contains(&self, id: u32) -> bool {
        self.get(id).is_some()
    }

    /// Number of records.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Stores `v` under `id`, returning the record it replaces; `Err(v)`
    /// when `id` is not below the bound (nothing stored).
    pub(crate) fn insert(&mut self, id: u32, v: T) -> Result<Option<T>, T> {
        if !self.in_range(id) {
            return Err(v);
        }
        let pi = (id >> PAGE_BITS) as usize;
        if self.pages.len() <= pi {
            self.pages.resize_with(pi + 1, || None);
        }
        let p = self.pages[pi].get_or_insert_with(|| Page {
            slots: (0..PAGE).map(|_| None).collect(),
            live: 0,
        });
        let old = p.slots[id as usize & (PAGE - 1)].replace(v);
        if old.is_none() {
            p.live += 1;
            self.live += 1;
        }
        Ok(old)
    }

    /// Removes and returns the record with id `id`; a page left empty is
    /// freed, and so are the empty tail entries of the page list.
    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        let pi = (id >> PAGE_BITS) as usize;
        let p = self.pages.get_mut(pi)?.as_mut()?;
        let old = p.slots.get_mut(id as usize & (PAGE - 1))?.take()?;
        p.live -= 1;
        self.live -= 1;
        if p.live == 0 {
            self.pages[pi] = None;
            while self.pages.last().is_some_and(Option::is_none) {
                self.pages.pop();
            }
        }
        Some(old)
    }

    /// Every record with its id, ascending.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.pages.iter().enumerate().flat_map(|(pi, p)| {
            p.iter().flat_map(move |p| {
                p.slots.iter().enumerate().filter_map(move |(i, s)| {
                    // Below the bound, a `u32`: the id fits.
                    s.as_ref().map(|v| (((pi << PAGE_BITS) | i) as u32, v))
                })
            })
        })
    }

    /// Every record, mutably, ascending by id.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.pages
            .iter_mut()
            .flatten()
            .flat_map(|p| p.slots.iter_mut().flatten())
    }

    /// Every id, ascending.
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(id, _)| id)
    }

    /// Pages allocated (each of [`PAGE`] slots): what the table costs.
    #[cfg(test)]
    pub(crate) fn pages_allocated(&self) -> usize {
        self.pages.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The table answers as an ordered map would, across inserts,
        /// replacements and removals, and refuses ids beyond its bound.
        #[test]
        fn acts_as_a_bounded_map(ops in prop::collection::vec((0u32..3, 0u32..700, any::<u16>()), 0..400)) {
            let mut t = IdTable::new(600);
            let mut want = BTreeMap::new();
            for (op, id, v) in ops {
                match op {
                    0 | 1 => {
                        let got = t.insert(id, v);
                        if id < 600 {
                            prop_assert_eq!(got, Ok(want.insert(id, v)));
                        } else {
                            prop_assert_eq!(got, Err(v));
                        }
                    }
                    _ => prop_assert_eq!(t.remove(id), want.remove(&id)),
                }
                prop_assert_eq!(t.len(), want.len());
            }
            for (id, v) in &want {
                prop_assert_eq!(t.get(*id), Some(v));
            }
            let listed: Vec<(u32, u16)> = t.iter().map(|(k, v)| (k, *v)).collect();
            let expect: Vec<(u32, u16)> = want.iter().map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(listed, expect);
            // No page without a record.
            prop_assert!(t.pages_allocated() <= want.len());
        }
    }

    /// A peer naming sparse ids up to the bound costs a page per id, and
    /// those pages go with the ids.
    #[test]
    fn sparse_ids_cost_a_page_each_and_are_freed() {
        let limit = IdTable::<u64>::limit_for(1 << 20);
        let mut t = IdTable::new(limit);
        let ids: Vec<u32> = (0..10u32).map(|i| i * 200_000 + 7).collect();
        for &id in &ids {
            assert_eq!(t.insert(id, u64::from(id)), Ok(None));
        }
        assert_eq!(t.pages_allocated(), ids.len());
        assert_eq!(t.insert(u32::MAX, 1), Err(1));
        assert_eq!(t.insert(2 << 20, 1), Err(1));
        for &id in &ids {
            assert_eq!(t.remove(id), Some(u64::from(id)));
        }
        assert_eq!((t.len(), t.pages_allocated(), t.pages.len()), (0, 0, 0));
    }
}
