//! Request parameters: GET query strings and POST form bodies alike.

use axum::extract::{Form, FromRequest, Query, Request};
use axum::http::{Method, header};

use super::ApiError;

/// All `key=value` pairs of a request, query string first, then form body.
#[derive(Debug, Default)]
pub(crate) struct Params(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequest<S> for Params {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let mut out = match req.uri().query() {
            Some(q) => Query::<Vec<(String, String)>>::try_from_uri(req.uri())
                .map(|Query(v)| v)
                .map_err(|e| ApiError::BadData(format!("invalid query string {q:?}: {e}")))?,
            None => Vec::new(),
        };
        let is_form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if req.method() == Method::POST && is_form {
            let Form(v) = Form::<Vec<(String, String)>>::from_request(req, state)
                .await
                .map_err(|e| ApiError::BadData(format!("invalid form body: {e}")))?;
            out.extend(v);
        }
        Ok(Params(out))
    }
}

impl Params {
    /// The first value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key` (for `match[]`).
    pub(crate) fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn rfc3339_ms(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let st = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = s.get(st..i)?;
        let mut ms = String::from(digits);
        ms.truncate(3);
        while ms.len() < 3 {
            ms.push('0');
        }
        frac_ms = ms.parse().ok()?;
    }
    let off_s = match s.get(i..)? {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) => {
            let oh: i64 = tz.get(1..3)?.parse().ok()?;
            let om: i64 = tz.get(4..6)?.parse().ok()?;
            let o = oh * 3600 + om * 60;
            if tz.starts_with('-') { -o } else { o }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se - off_s;
    Some(secs * 1000 + frac_ms)
}

/// A time as unix seconds (float) or RFC 3339, in ms.
pub(crate) fn parse_time(s: &str) -> Option<i64> {
    if let Ok(f) = s.parse::<f64>() {
        if !f.is_finite() || f.abs() > 9.2e15 {
            return None;
        }
        return Some((f * 1000.0).round() as i64);
    }
    rfc3339_ms(s)
}

/// A duration as float seconds or a Prometheus duration (`15s`, `1m30s`), in ms.
pub(crate) fn parse_duration(s: &str) -> Option<i64> {
    if let Ok(f) = s.parse::<f64>() {
        if !f.is_finite() || f.abs() > 9.2e15 {
            return None;
        }
        return Some((f * 1000.0).round() as i64);
    }
    crate::promql::duration::parse_units_ms(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        assert_eq!(parse_time("1435781451.781"), Some(1_435_781_451_781));
        assert_eq!(
            parse_time("2015-07-01T20:10:51.781Z"),
            Some(1_435_781_451_781)
        );
        assert_eq!(
            parse_time("2015-07-01T22:10:51+02:00"),
            Some(1_435_781_451_000)
        );
        assert_eq!(parse_time("garbage"), None);
        assert_eq!(parse_duration("15s"), Some(15_000));
        assert_eq!(parse_duration("0.5"), Some(500));
        assert_eq!(parse_duration("1m30s"), Some(90_000));
    }
}
