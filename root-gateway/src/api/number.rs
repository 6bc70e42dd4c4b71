//! Numbers of the query API's JSON, written straight to bytes: a range
//! answer holds tens of thousands of points, and `fmt`'s float printing
//! was a large part of its cost. The text is what `format!("{v}")` gives
//! (Prometheus' `strconv.FormatFloat(v, 'f', -1, 64)`): the shortest digits
//! that read back to `v`, in plain decimal notation, never an exponent.

/// Appends the decimal text of `n`.
pub(crate) fn write_int(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends finite `v` as `format!("{v}")` writes it: ryu's shortest digits
/// laid out without an exponent (`1e16` becomes `10000000000000000`,
/// `1.5e-7` becomes `0.00000015`, `2.0` becomes `2`, `-0.0` becomes `-0`).
/// The caller writes non-finite values (`NaN`, `+Inf`, `-Inf`) itself.
pub(crate) fn write_finite(out: &mut Vec<u8>, v: f64) {
    debug_assert!(v.is_finite());
    let mut buf = ryu::Buffer::new();
    let s = buf.format_finite(v).as_bytes();
    let (neg, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    // Mantissa and exponent: `d.ddd` or `ddd.d` or `d`, then `e[-]x`.
    let (mant, exp) = match s.iter().position(|&b| b == b'e') {
        Some(i) => (&s[..i], parse_exp(&s[i + 1..])),
        None => (s, 0),
    };
    let (int, frac) = match mant.iter().position(|&b| b == b'.') {
        Some(i) => (&mant[..i], &mant[i + 1..]),
        None => (mant, &[][..]),
    };
    // All digits, and where the point falls among them.
    let mut digits = [0u8; 40];
    let mut n = 0;
    for &b in int.iter().chain(frac) {
        if n < digits.len() {
            digits[n] = b;
            n += 1;
        }
    }
    let mut point = int.len() as i32 + exp;
    let mut d = &digits[..n];
    // Leading zeros move the point; trailing ones past it are implied.
    while let Some((b'0', rest)) = d.split_first() {
        d = rest;
        point -= 1;
    }
    while let Some((b'0', rest)) = d.split_last() {
        d = rest;
    }
    if d.len() >= 16 && may_tie(v, point) {
        // Two shortest forms may be equally near `v`: ryu and `fmt` break
        // that tie differently, so let `fmt` decide (see `may_tie`).
        use std::io::Write as _;
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{v}");
        return;
    }
    if neg {
        out.push(b'-');
    }
    if d.is_empty() {
        out.push(b'0');
        return;
    }
    if point <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', point.unsigned_abs() as usize));
        out.extend_from_slice(d);
    } else if (point as usize) < d.len() {
        let p = point as usize;
        out.extend_from_slice(&d[..p]);
        out.push(b'.');
        out.extend_from_slice(&d[p..]);
    } else {
        out.extend_from_slice(d);
        out.extend(std::iter::repeat_n(b'0', point as usize - d.len()));
    }
}

/// True when `v` (finite, its decimal point `point` digits after its first
/// significant digit's place) could lie exactly halfway between two
/// shortest forms. With 15 digits or fewer the shortest form is unique
/// (15-digit decimals are spaced wider than a double's rounding interval),
/// so only 16 and 17 digits can tie, and only when `v`'s exact decimal
/// expansion ends within 18 significant digits: `m * 2^e` with `m` odd
/// has exactly `-e` digits after the point when `e < 0`, and is an
/// integer when `e >= 0` (below 10^15 its digits are all shortest).
fn may_tie(v: f64, point: i32) -> bool {
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1 << 52) - 1);
    let (m, e) = if biased == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), biased - 1075)
    };
    if m == 0 {
        return false;
    }
    let e = e + m.trailing_zeros() as i32;
    if e >= 0 {
        return v.abs() >= 1e15;
    }
    // Significant digits of the exact expansion: those before the point
    // plus the `-e` after it, less the zeros that lead them when |v| < 1
    // (one more for a shortest form rounded up to the next power of ten).
    -e + point <= 19
}

/// The exponent after ryu's `e` (at most three digits and a sign).
fn parse_exp(s: &[u8]) -> i32 {
    let (neg, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let x = s
        .iter()
        .fold(0i32, |x, &b| x * 10 + i32::from(b.wrapping_sub(b'0')));
    if neg { -x } else { x }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(v: f64) -> String {
        let mut out = Vec::new();
        write_finite(&mut out, v);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn edges_are_written_as_fmt_writes_them() {
        for v in [
            0.0,
            -0.0,
            1.0,
            -2.0,
            0.1,
            1e16,
            1e15,
            1.5e-7,
            123_456.789,
            1e-5,
            1e21,
            1e22,
            5e-324,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            9_007_199_254_740_993.0,
            0.000_123_4,
            273_066.666_666_666_7,
        ] {
            assert_eq!(text(v), format!("{v}"), "{v:e}");
        }
        let mut out = Vec::new();
        write_int(&mut out, -1_700_000_000);
        write_int(&mut out, 0);
        assert_eq!(out, b"-17000000000");
    }

    proptest! {
        #[test]
        fn any_finite_float_is_written_as_fmt_writes_it(bits in any::<u64>()) {
            let v = f64::from_bits(bits);
            prop_assume!(v.is_finite());
            prop_assert_eq!(text(v), format!("{v}"));
        }

        #[test]
        fn near_ties_are_written_as_fmt_writes_them(
            n in 0u64..(1 << 53),
            shift in -60i32..12,
        ) {
            // Few fractional bits: exact expansions short enough to tie.
            let v = n as f64 * 2f64.powi(shift);
            prop_assert_eq!(text(v), format!("{v}"));
            prop_assert_eq!(text(-v), format!("{}", -v));
        }

        #[test]
        fn counters_and_rates_are_written_as_fmt_writes_them(
            m in -10_000_000_000i64..10_000_000_000,
            e in 0u32..12,
            d in 1.0f64..1e6,
        ) {
            let v = m as f64 / 10f64.powi(e as i32);
            prop_assert_eq!(text(v), format!("{v}"));
            let r = m as f64 / d;
            prop_assert_eq!(text(r), format!("{r}"));
        }
    }
}
