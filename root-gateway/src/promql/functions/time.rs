//! Calendar functions (`hour`, `month`, `days_in_month`, ...).

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
pub(crate) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

pub(super) fn date_part(name: &str, secs: f64) -> f64 {
    if !secs.is_finite() {
        return f64::NAN;
    }
    let s = secs.floor() as i64;
    let days = s.div_euclid(86_400);
    let sod = s.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let doy = cum[(m - 1) as usize] + d as i64 + i64::from(m > 2 && is_leap(y));
    match name {
        "minute" => ((sod / 60) % 60) as f64,
        "hour" => (sod / 3600) as f64,
        "day_of_week" => ((days + 4).rem_euclid(7)) as f64,
        "day_of_month" => f64::from(d),
        "day_of_year" => doy as f64,
        "month" => f64::from(m),
        "year" => y as f64,
        _ => {
            let dim = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
            (dim[(m - 1) as usize] + i64::from(m == 2 && is_leap(y))) as f64
        }
    }
}
