//! Prometheus duration notation (`1h30m`, `5m`, `250ms`), shared by the HTTP
//! parameters and the test-script runner.

/// A run of `<digits><unit>` terms (units ms, s, m, h, d, w, y) in ms; `None`
/// when empty, malformed, or out of range.
pub fn parse_units_ms(s: &str) -> Option<i64> {
    if s.is_empty() {
        return None;
    }
    let b = s.as_bytes();
    let mut i = 0;
    let mut total: i64 = 0;
    while i < b.len() {
        let st = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n: i64 = s.get(st..i)?.parse().ok()?;
        let us = i;
        while i < b.len() && b[i].is_ascii_alphabetic() {
            i += 1;
        }
        let mult = match s.get(us..i)? {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "y" => 31_536_000_000,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(mult)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_units_ms;

    #[test]
    fn terms_add_up_and_junk_is_refused() {
        assert_eq!(parse_units_ms("1h30m"), Some(5_400_000));
        assert_eq!(parse_units_ms("250ms"), Some(250));
        assert_eq!(parse_units_ms(""), None);
        assert_eq!(parse_units_ms("5x"), None);
        assert_eq!(parse_units_ms("m"), None);
        assert_eq!(parse_units_ms("99999999999y"), None);
    }
}
