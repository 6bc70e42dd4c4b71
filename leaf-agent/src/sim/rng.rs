//! Stateless randomness: every draw is a hash of (seed, what, when), so a value
//! depends only on its coordinates, never on how many draws came before. That
//! is what lets the simulator give the same state at a virtual time however
//! the caller split the advance calls.

/// The splitmix64 finaliser: a fast, well-mixed 64-bit permutation.
pub(crate) const fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where [`hash`]'s fold starts.
const HASH_INIT: u64 = 0x243f_6a88_85a3_08d3;

/// Hashes a tuple of coordinates into one 64-bit value.
pub(crate) fn hash(parts: &[u64]) -> u64 {
    hash_on(HASH_INIT, parts)
}

/// One step of [`hash`]'s fold: the state after one more coordinate, given
/// `mix` of it (a caller drawing for many series at one step mixes the
/// step once).
#[inline]
pub(crate) fn fold_mixed(state: u64, mixed: u64) -> u64 {
    mix(state ^ mixed)
}

/// The state of [`hash`]'s fold after the coordinate `first`:
/// `hash(&[first, rest..]) == hash_on(hash_state(first), rest)`, so a
/// series keeps the state of its own key instead of mixing it per draw.
pub(crate) fn hash_state(first: u64) -> u64 {
    fold_mixed(HASH_INIT, mix(first))
}

/// Continues [`hash`]'s fold from `state` over `rest`.
pub(crate) fn hash_on(state: u64, rest: &[u64]) -> u64 {
    rest.iter().fold(state, |acc, p| fold_mixed(acc, mix(*p)))
}

/// A uniform draw in [0, 1) from a hash.
#[inline]
pub(crate) fn unit_of(h: u64) -> f64 {
    // The top 53 bits fill an f64 mantissa exactly.
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A uniform draw in [lo, hi) from a hash.
#[inline]
pub(crate) fn range_of(h: u64, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * unit_of(h)
}

/// FNV-1a of a string, to fold names into seeds.
pub(crate) fn str_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A uniform draw in [0, 1) from the coordinates.
pub(crate) fn unit(parts: &[u64]) -> f64 {
    unit_of(hash(parts))
}

/// A uniform draw in [lo, hi).
pub(crate) fn range(parts: &[u64], lo: f64, hi: f64) -> f64 {
    range_of(hash(parts), lo, hi)
}

/// Picks one of `items` from the coordinates.
pub(crate) fn pick<'a, T>(parts: &[u64], items: &'a [T]) -> &'a T {
    // Every call site passes a non-empty constant table, so the modulus is > 0.
    &items[(hash(parts) % items.len() as u64) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fold_resumed_from_a_state_is_the_hash() {
        for (a, b, c) in [(0, 0, 0), (7, 1_700_000_000, 3), (u64::MAX, 5, 4)] {
            let s = hash_state(a);
            assert_eq!(hash_on(s, &[b, c]), hash(&[a, b, c]));
            assert_eq!(fold_mixed(s, mix(b)), hash(&[a, b]));
            assert_eq!(hash_on(s, &[]), hash(&[a]));
            assert_eq!(range_of(hash(&[a, b]), 0.5, 1.5), range(&[a, b], 0.5, 1.5));
        }
    }

    #[test]
    fn unit_is_in_range_and_spread() {
        let xs: Vec<f64> = (0..10_000).map(|i| unit(&[7, i])).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
