//! Numeric helpers shared by functions and aggregations: Kahan sums,
//! quantiles, variance, means, Go-style min/max and the plain math functions.

/// Kahan-compensated `sum + inc`, as Prometheus' `kahanSumInc`.
pub(crate) fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

/// The q-quantile of `vals` (sorted in place), Prometheus' interpolation.
pub(crate) fn quantile(q: f64, vals: &mut [f64]) -> f64 {
    if vals.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    // NaN sorts first, as Go's sort.Float64s does.
    vals.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        _ => a.total_cmp(b),
    });
    let n = vals.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let w = rank - rank.floor();
    vals[lower as usize] * (1.0 - w) + vals[upper as usize] * w
}

/// Variance with Kahan-compensated Welford updates.
pub(crate) fn variance(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut count, mut mean, mut cmean, mut aux, mut caux) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for f in vals {
        count += 1.0;
        let delta = f - (mean + cmean);
        (mean, cmean) = kahan_inc(delta / count, mean, cmean);
        (aux, caux) = kahan_inc(delta * (f - (mean + cmean)), aux, caux);
    }
    (aux + caux) / count
}

/// Go's math.Max: NaN wins.
pub(crate) fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Go's math.Min: NaN wins.
pub(crate) fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

pub(super) fn math_fn(name: &str) -> Option<fn(f64) -> f64> {
    Some(match name {
        "abs" => f64::abs,
        "ceil" => f64::ceil,
        "floor" => f64::floor,
        "exp" => f64::exp,
        "ln" => f64::ln,
        "log2" => f64::log2,
        "log10" => f64::log10,
        "sqrt" => f64::sqrt,
        "sgn" => |x: f64| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        },
        "sin" => f64::sin,
        "cos" => f64::cos,
        "tan" => f64::tan,
        "asin" => f64::asin,
        "acos" => f64::acos,
        "atan" => f64::atan,
        "sinh" => f64::sinh,
        "cosh" => f64::cosh,
        "tanh" => f64::tanh,
        "asinh" => f64::asinh,
        "acosh" => f64::acosh,
        "atanh" => f64::atanh,
        "deg" => |x: f64| x * 180.0 / std::f64::consts::PI,
        "rad" => |x: f64| x * std::f64::consts::PI / 180.0,
        _ => return None,
    })
}

/// Mean with Kahan summation, falling back to an incremental mean on overflow.
pub(crate) fn avg(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut c, mut mean, mut cmean, mut n) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let mut incremental = false;
    for v in vals {
        n += 1.0;
        if n == 1.0 {
            sum = v;
            mean = v;
            continue;
        }
        if !incremental {
            let (s2, c2) = kahan_inc(v, sum, c);
            if !s2.is_infinite() {
                (sum, c) = (s2, c2);
                continue;
            }
            incremental = true;
            mean = sum / (n - 1.0);
            cmean = c / (n - 1.0);
        }
        let q = (n - 1.0) / n;
        (mean, cmean) = kahan_inc(v / n, q * mean, q * cmean);
    }
    if incremental {
        mean + cmean
    } else {
        sum / n + c / n
    }
}
