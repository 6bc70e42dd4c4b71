//! Parsing pieces of the `.test` format: durations, numbers, series lines.

use crate::store::Labels;
use canopy_proto::model::{METRIC_NAME, stale_nan};

/// One position of a series line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Item {
    /// No sample at this position (`_`).
    Omitted,
    /// A float (possibly the staleness marker).
    Float(f64),
}

/// Splits the first whitespace-separated word off `s`.
pub(crate) fn word(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => (&s[..i], s[i..].trim_start()),
        None => (s, ""),
    }
}

/// A Prometheus duration (`1h30m`, `5m`, `0`) in ms; a leading `-` negates.
pub(crate) fn duration_ms(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    if s == "0" {
        return Some(0);
    }
    if s.is_empty() {
        return None;
    }
    let total = crate::promql::duration::parse_units_ms(s)?;
    Some(if neg { -total } else { total })
}

/// Go's `ParseInt(s, 0, 64)` then `ParseFloat(s, 64)`, as the runner reads scalars.
pub(crate) fn go_number(s: &str) -> Option<f64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let lower = body.to_ascii_lowercase();
    let int = if let Some(h) = lower.strip_prefix("0x") {
        i64::from_str_radix(&h.replace('_', ""), 16).ok()
    } else if let Some(o) = lower.strip_prefix("0o") {
        i64::from_str_radix(&o.replace('_', ""), 8).ok()
    } else if let Some(bn) = lower.strip_prefix("0b") {
        i64::from_str_radix(&bn.replace('_', ""), 2).ok()
    } else if lower.len() > 1 && lower.starts_with('0') && lower.bytes().all(|c| c.is_ascii_digit())
    {
        i64::from_str_radix(&lower[1..], 8).ok()
    } else {
        None
    };
    if let Some(i) = int {
        let f = i as f64;
        return Some(if neg { -f } else { f });
    }
    let ok = matches!(lower.as_str(), "inf" | "infinity" | "nan")
        || (!lower.is_empty()
            && lower
                .bytes()
                .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'+' | b'-' | b'_')));
    if !ok {
        return None;
    }
    let f: f64 = lower.replace('_', "").parse().ok()?;
    Some(if neg { -f } else { f })
}

/// Reads a Go-quoted string at the start of `s`; returns it and the rest.
pub(crate) fn quoted(s: &str) -> Option<(String, &str)> {
    let mut chars = s.char_indices();
    let (_, q) = chars.next()?;
    if !matches!(q, '"' | '\'' | '`') {
        return None;
    }
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        if c == q {
            return Some((out, &s[i + c.len_utf8()..]));
        }
        if c == '\\' && q != '`' {
            let (_, e) = chars.next()?;
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'a' => out.push('\u{7}'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'v' => out.push('\u{b}'),
                'x' | 'u' | 'U' => {
                    let n = match e {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let mut h = String::new();
                    for _ in 0..n {
                        h.push(chars.next()?.1);
                    }
                    out.push(char::from_u32(u32::from_str_radix(&h, 16).ok()?)?);
                }
                '0'..='7' => {
                    let mut o = String::from(e);
                    for _ in 0..2 {
                        o.push(chars.next()?.1);
                    }
                    out.push(char::from_u32(u32::from_str_radix(&o, 8).ok()?)?);
                }
                other => out.push(other),
            }
        } else {
            out.push(c);
        }
    }
    None
}

fn ident(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '.'))
        .unwrap_or(s.len());
    (&s[..end], &s[end..])
}

/// Parses `name{l="v", ...}` at the start of `s`; returns labels and the rest.
pub(crate) fn metric(s: &str) -> Option<(Labels, &str)> {
    let s = s.trim_start();
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut rest = s;
    if !rest.starts_with('{') {
        let (name, r) = if rest.starts_with(['"', '\'', '`']) {
            quoted(rest)?
        } else {
            let (n, r) = ident(rest);
            (n.to_string(), r)
        };
        if name.is_empty() {
            return None;
        }
        pairs.push((METRIC_NAME.into(), name));
        rest = r;
    }
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let (name, r) = if rest.starts_with(['"', '\'', '`']) {
                quoted(rest)?
            } else {
                let (n, r) = ident(rest);
                if n.is_empty() {
                    return None;
                }
                (n.to_string(), r)
            };
            rest = r.trim_start();
            if let Some(r) = rest.strip_prefix('=') {
                let (v, r) = quoted(r.trim_start())?;
                pairs.push((name, v));
                rest = r;
            } else {
                pairs.push((METRIC_NAME.into(), name));
            }
            rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else if !rest.starts_with('}') {
                return None;
            }
        }
    }
    Some((Labels::from_pairs(pairs), rest))
}

fn float(s: &str) -> Option<f64> {
    let t = s.replace('_', "");
    let l = t.to_ascii_lowercase();
    let body = l.trim_start_matches(['+', '-']);
    if !(matches!(body, "inf" | "nan")
        || body
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'+' | b'-')))
    {
        return None;
    }
    t.parse().ok()
}

/// Expands the value items of a series line (§3.2 of FORMAT.md).
pub(crate) fn values(s: &str) -> Option<Vec<Item>> {
    let mut out = Vec::new();
    for it in s.split_whitespace() {
        if it == "_" {
            out.push(Item::Omitted);
            continue;
        }
        if let Some(n) = it.strip_prefix("_x") {
            let n: usize = n.parse().ok()?;
            out.extend(std::iter::repeat_n(Item::Omitted, n));
            continue;
        }
        if it == "stale" {
            out.push(Item::Float(stale_nan()));
            continue;
        }
        let Some(xi) = it.rfind('x') else {
            out.push(Item::Float(float(it)?));
            continue;
        };
        let n: usize = it[xi + 1..].parse().ok()?;
        if n > 1_000_000 {
            return None;
        }
        let base = &it[..xi];
        let b = base.as_bytes();
        let op =
            (1..b.len()).find(|&i| matches!(b[i], b'+' | b'-') && !matches!(b[i - 1], b'e' | b'E'));
        let (start, delta) = match op {
            Some(i) => {
                let d = float(&base[i + 1..])?;
                (float(&base[..i])?, if b[i] == b'-' { -d } else { d })
            }
            None => (float(base)?, 0.0),
        };
        let mut v = start;
        for _ in 0..=n {
            out.push(Item::Float(v));
            v += delta;
        }
    }
    Some(out)
}

/// A signed duration (`-30s`, `+1m`, `0`, `-0ms`) in ms.
fn signed_duration_ms(s: &str) -> Option<i64> {
    match s.strip_prefix('+') {
        Some(r) => duration_ms(r),
        None => duration_ms(s),
    }
}

/// Expands the items of a start-timestamp line (`…@st`, §3.5 of FORMAT.md):
/// per position, the offset in ms from the sample's time to its start time,
/// `None` where no start time is given.
pub(crate) fn st_offsets(s: &str) -> Option<Vec<Option<i64>>> {
    let mut out = Vec::new();
    for it in s.split_whitespace() {
        if it == "_" {
            out.push(None);
            continue;
        }
        if let Some(n) = it.strip_prefix("_x") {
            let n: usize = n.parse().ok().filter(|&n| n <= 1_000_000)?;
            out.extend(std::iter::repeat_n(None, n));
            continue;
        }
        let (base, n) = match it.rfind('x') {
            Some(xi) => (
                &it[..xi],
                Some(
                    it[xi + 1..]
                        .parse::<usize>()
                        .ok()
                        .filter(|&n| n <= 1_000_000)?,
                ),
            ),
            None => (it, None),
        };
        // `<dur>±<dur>`: the second sign after the first character.
        let split = base
            .char_indices()
            .skip(1)
            .find(|&(_, c)| c == '+' || c == '-')
            .map(|(i, _)| i);
        let (start, step) = match split {
            Some(i) => (
                signed_duration_ms(&base[..i])?,
                signed_duration_ms(&base[i..])?,
            ),
            None => (signed_duration_ms(base)?, 0),
        };
        match n {
            None if split.is_some() => return None,
            None => out.push(Some(start)),
            Some(n) => {
                let mut v = start;
                for _ in 0..=n {
                    out.push(Some(v));
                    v = v.checked_add(step)?;
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_items() {
        let v = values("1+1x2 _x2 stale -1-1x1 5").unwrap_or_default();
        assert_eq!(v.len(), 3 + 2 + 1 + 2 + 1);
        assert_eq!(v[2], Item::Float(3.0));
        assert_eq!(v[6], Item::Float(-1.0));
        assert_eq!(v[7], Item::Float(-2.0));
        assert_eq!(duration_ms("1h30m"), Some(5_400_000));
        let (l, rest) = metric("foo{a=\"x\", \"b.c\"='y',} 1 2").unwrap_or_default();
        assert_eq!(l.to_string(), "foo{a=\"x\",b.c=\"y\"}");
        assert_eq!(rest.trim(), "1 2");
        assert_eq!(go_number("0x10"), Some(16.0));
        assert_eq!(go_number("-Inf"), Some(f64::NEG_INFINITY));
        assert_eq!(go_number("foo"), None);
    }

    #[test]
    fn expands_start_timestamp_items() {
        let v = st_offsets("_ _x2 -30s-1mx2 +1m 0-1mx1 -0msx1 1ms").expect("parses");
        assert_eq!(
            v,
            vec![
                None,
                None,
                None,
                Some(-30_000),
                Some(-90_000),
                Some(-150_000),
                Some(60_000),
                Some(0),
                Some(-60_000),
                Some(0),
                Some(0),
                Some(1),
            ]
        );
        assert_eq!(st_offsets("-59999msx1"), Some(vec![Some(-59_999); 2]));
        assert_eq!(st_offsets("1s-1s"), None);
        assert_eq!(st_offsets("bogus"), None);
    }
}
