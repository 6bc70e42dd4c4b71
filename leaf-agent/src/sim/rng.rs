//! Stateless randomness: every draw is a hash of (seed, what, when), so a value
//! depends only on its coordinates, never on how many draws came before. That
//! is what lets the simulator give the same state at a virtual time however
//! the caller split the advance calls.

/// The splitmix64 finaliser: a fast, well-mixed 64-bit permutation.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hashes a tuple of coordinates into one 64-bit value.
pub(crate) fn hash(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x243f_6a88_85a3_08d3, |acc, p| mix(acc ^ mix(*p)))
}

/// FNV-1a of a string, to fold names into seeds.
pub(crate) fn str_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A uniform draw in [0, 1) from the coordinates.
pub(crate) fn unit(parts: &[u64]) -> f64 {
    // The top 53 bits fill an f64 mantissa exactly.
    (hash(parts) >> 11) as f64 / (1u64 << 53) as f64
}

/// A uniform draw in [lo, hi).
pub(crate) fn range(parts: &[u64], lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * unit(parts)
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
    fn unit_is_in_range_and_spread() {
        let xs: Vec<f64> = (0..10_000).map(|i| unit(&[7, i])).collect();
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}
