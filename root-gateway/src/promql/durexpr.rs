//! A small text pre-pass in front of `promql-parser` for Prometheus 3
//! duration expressions, which the parser does not know: arithmetic in
//! ranges, subquery steps and offsets (`[5m+1m]`, `[1h/2:step()*2]`,
//! `offset -(1m*2)`), with `step()`, `range()`, `min_of()` and `max_of()`.
//! Each such expression is evaluated (float seconds, as Prometheus does)
//! and replaced by a plain `<n>ms` literal; everything else is left as is.

use super::PromqlError;
use super::duration::parse_units_ms;

/// Query parameters duration expressions may refer to.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DurCtx {
    /// `step()`: the range query step (0 for an instant query), ms.
    pub step_ms: i64,
    /// `range()`: end minus start of the query, ms.
    pub range_ms: i64,
}

fn err(msg: impl Into<String>) -> PromqlError {
    PromqlError::Parse(msg.into())
}

/// Rewrites every duration expression of `q` into a literal.
pub(crate) fn rewrite(q: &str, ctx: DurCtx) -> Result<String, PromqlError> {
    let b = q.as_bytes();
    let mut out = String::with_capacity(q.len());
    let mut i = 0;
    let mut braces = 0usize;
    // The last significant byte copied (for deciding if `offset` is a keyword).
    let mut prev: u8 = 0;
    // Where the most recent selector ends in `out` (for `anchored`/`smoothed`).
    let mut last_sel: Option<usize> = None;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => {
                let end = string_end(b, i);
                if c == b'`' {
                    out.push_str(&q[i..end]);
                } else {
                    out.push_str(&hex_escapes(&q[i..end]));
                }
                i = end;
                prev = c;
            }
            b'#' if braces == 0 => {
                // A comment runs to the end of the line.
                let end = b[i..]
                    .iter()
                    .position(|x| *x == b'\n')
                    .map_or(b.len(), |k| i + k);
                out.push_str(&q[i..end]);
                i = end;
            }
            b'{' => {
                braces += 1;
                out.push('{');
                i += 1;
                prev = c;
            }
            b'}' => {
                braces = braces.saturating_sub(1);
                out.push('}');
                if braces == 0 {
                    last_sel = Some(out.len());
                }
                i += 1;
                prev = c;
            }
            b'[' if braces == 0 => {
                let close =
                    matching(b, i, b'[', b']').ok_or_else(|| err("unclosed '[' in query"))?;
                let inner = &q[i + 1..close];
                out.push('[');
                let mut parts = split_top(inner, b':').into_iter();
                if let Some(range) = parts.next() {
                    out.push_str(&literal(range, ctx, false)?);
                }
                for step in parts {
                    out.push(':');
                    if step.trim().is_empty() {
                        out.push_str(step);
                    } else {
                        out.push_str(&literal(step, ctx, false)?);
                    }
                }
                out.push(']');
                i = close + 1;
                prev = b']';
            }
            _ if braces == 0 && is_ident_start(c) && (i == 0 || !is_ident(b[i - 1])) => {
                let mut j = i;
                while j < b.len() && is_ident(b[j]) {
                    j += 1;
                }
                let word = &q[i..j];
                let next = b[j..].iter().copied().find(|x| !x.is_ascii_whitespace());
                let is_mode = (word == "anchored" || word == "smoothed")
                    && (prev == b']' || prev == b'}' || prev == b')' || is_ident(prev))
                    && !ends_with_keyword(&out)
                    && !matches!(next, Some(b'(' | b'{' | b'['));
                if let (true, Some(at)) = (is_mode, last_sel) {
                    mark_selector(&mut out, at, word);
                    last_sel = None;
                    i = j;
                    continue;
                }
                out.push_str(word);
                i = j;
                if !matches!(next, Some(b'(' | b'{'))
                    && !KEYWORDS.iter().any(|k| word.eq_ignore_ascii_case(k))
                {
                    last_sel = Some(out.len());
                }
                if word.eq_ignore_ascii_case("offset")
                    && (prev == b']' || prev == b'}' || prev == b')' || is_ident(prev))
                    && let Some((end, text)) = offset_operand(q, j, ctx)?
                {
                    if text.is_empty() {
                        // A zero offset: the parser refuses `offset 0ms`.
                        out.truncate(out.len() - word.len());
                    } else {
                        out.push(' ');
                        out.push_str(&text);
                    }
                    i = end;
                }
                prev = b'a';
            }
            _ => {
                out.push(c as char);
                if !c.is_ascii_whitespace() {
                    prev = c;
                }
                i += 1;
            }
        }
    }
    Ok(mark_info_selectors(out))
}

/// The data-label selector of `info(v, {…})` may match only empty values
/// (`{data=~".*"}`), which the parser refuses for a selector: a marker
/// matcher (dropped again by the engine) keeps it parseable.
fn mark_info_selectors(q: String) -> String {
    let b = q.as_bytes();
    let mut inserts = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' | b'`' => {
                i = string_end(b, i);
                continue;
            }
            c if is_ident_start(c) && (i == 0 || !is_ident(b[i - 1])) => {
                let mut j = i;
                while j < b.len() && is_ident(b[j]) {
                    j += 1;
                }
                let open = b[j..]
                    .iter()
                    .position(|x| !x.is_ascii_whitespace())
                    .map(|k| j + k);
                if q[i..j].eq_ignore_ascii_case("info")
                    && let Some(open) = open.filter(|o| b[*o] == b'(')
                    && let Some(close) = matching(b, open, b'(', b')')
                    && let Some(comma) = last_top_comma(b, open + 1, close)
                    && let Some(brace) = b[comma + 1..close]
                        .iter()
                        .position(|x| !x.is_ascii_whitespace())
                        .map(|k| comma + 1 + k)
                        .filter(|k| b[*k] == b'{')
                {
                    let empty = b[brace + 1..close]
                        .iter()
                        .find(|x| !x.is_ascii_whitespace())
                        == Some(&b'}');
                    inserts.push((brace + 1, empty));
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let mut out = q;
    for (at, empty) in inserts.into_iter().rev() {
        let sep = if empty { "" } else { "," };
        out.insert_str(at, &format!("{MODE_LABEL}=\"info\"{sep}"));
    }
    out
}

/// The last comma in `b[from..to]` outside brackets and strings.
fn last_top_comma(b: &[u8], from: usize, to: usize) -> Option<usize> {
    let mut depth = 0i32;
    let mut found = None;
    let mut k = from;
    while k < to {
        match b[k] {
            b'"' | b'\'' | b'`' => {
                k = string_end(b, k);
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 => found = Some(k),
            _ => {}
        }
        k += 1;
    }
    found
}

/// Go reads `\xHH` in a string as a raw byte; the parser crate reads it as
/// the char U+00HH. Runs of such escapes are decoded as bytes here: valid
/// UTF-8 becomes `\u` escapes of its chars, invalid bytes U+FFFD (which
/// label-name validation then refuses, as Go refuses invalid UTF-8).
fn hex_escapes(lit: &str) -> String {
    let b = lit.as_bytes();
    let mut out = String::with_capacity(lit.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let mut bytes = Vec::new();
        let mut j = i;
        while j + 3 < b.len() && b[j] == b'\\' && (b[j + 1] == b'x' || b[j + 1] == b'X') {
            match lit
                .get(j + 2..j + 4)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(v) => bytes.push(v),
                None => break,
            }
            j += 4;
        }
        if bytes.is_empty() {
            i += 2;
            continue;
        }
        if bytes.iter().any(|x| *x >= 0x80) {
            out.push_str(&lit[last..i]);
            for ch in String::from_utf8_lossy(&bytes).chars() {
                out.push_str(&format!("\\U{:08x}", u32::from(ch)));
            }
            last = j;
        }
        i = j;
    }
    out.push_str(&lit[last..]);
    out
}

/// Words after which a name is an operand, never a modifier.
const KEYWORDS: [&str; 11] = [
    "offset",
    "bool",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
];

/// True when `out` ends (before whitespace) with a keyword of [`KEYWORDS`].
fn ends_with_keyword(out: &str) -> bool {
    let t = out.trim_end();
    let start = t
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |k| k + 1);
    let w = &t[start..];
    KEYWORDS.iter().any(|k| w.eq_ignore_ascii_case(k))
}

/// The label matcher that carries an `anchored`/`smoothed` modifier to the
/// engine (the parser has no field for it); removed before selection.
pub(crate) const MODE_LABEL: &str = "__canopy_range_mode__";

/// Adds the modifier matcher to the selector ending at `at` in `out`.
fn mark_selector(out: &mut String, at: usize, mode: &str) {
    let matcher = format!("{MODE_LABEL}=\"{mode}\"");
    if out[..at].ends_with('}') {
        let before = out[..at - 1].trim_end();
        let sep = if before.ends_with('{') || before.ends_with(',') {
            ""
        } else {
            ","
        };
        out.insert_str(at - 1, &format!("{sep}{matcher}"));
    } else {
        out.insert_str(at, &format!("{{{matcher}}}"));
    }
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// The index just past the string literal starting at `i`.
fn string_end(b: &[u8], i: usize) -> usize {
    let q = b[i];
    let mut j = i + 1;
    while j < b.len() {
        if b[j] == b'\\' && q != b'`' {
            j += 2;
            continue;
        }
        if b[j] == q {
            return j + 1;
        }
        j += 1;
    }
    b.len()
}

/// Index of the bracket closing the one at `i` (strings skipped).
fn matching(b: &[u8], i: usize, open: u8, close: u8) -> Option<usize> {
    let mut depth = 0usize;
    let mut j = i;
    while j < b.len() {
        match b[j] {
            b'"' | b'\'' | b'`' => {
                j = string_end(b, j);
                continue;
            }
            x if x == open => depth += 1,
            x if x == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
}

/// Splits `s` at `sep` outside parentheses.
fn split_top(s: &str, sep: u8) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut last = 0;
    for (k, c) in s.bytes().enumerate() {
        match c {
            b'(' => depth += 1,
            b')' => depth -= 1,
            x if x == sep && depth == 0 => {
                out.push(&s[last..k]);
                last = k + 1;
            }
            _ => {}
        }
    }
    out.push(&s[last..]);
    out
}

/// A range or step: kept when already a plain duration, else evaluated.
fn literal(s: &str, ctx: DurCtx, negative_ok: bool) -> Result<String, PromqlError> {
    let t = s.trim();
    if parse_units_ms(t).is_some() {
        return Ok(s.to_string());
    }
    let ms = evaluate(t, ctx)?;
    if ms <= 0 && !negative_ok {
        return Err(err("duration must be greater than 0"));
    }
    Ok(format!("{ms}ms"))
}

/// After `offset` at byte `j`: the operand (signs, then one primary) as a
/// literal, with the index where it ends; `None` if it is a plain literal.
fn offset_operand(q: &str, j: usize, ctx: DurCtx) -> Result<Option<(usize, String)>, PromqlError> {
    let b = q.as_bytes();
    let mut k = j;
    let skip_ws = |k: &mut usize| {
        while *k < b.len() && b[*k].is_ascii_whitespace() {
            *k += 1;
        }
    };
    skip_ws(&mut k);
    let start = k;
    while k < b.len() && (b[k] == b'-' || b[k] == b'+' || b[k].is_ascii_whitespace()) {
        k += 1;
    }
    if k >= b.len() {
        return Ok(None);
    }
    let end = if b[k] == b'(' {
        matching(b, k, b'(', b')').ok_or_else(|| err("unclosed '(' after offset"))? + 1
    } else if b[k].is_ascii_alphanumeric() || b[k] == b'.' {
        let mut e = k;
        while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'_' || b[e] == b'.') {
            e += 1;
        }
        let word = &q[k..e];
        if is_dur_fn(word) {
            let mut f = e;
            skip_ws(&mut f);
            if f < b.len() && b[f] == b'(' {
                matching(b, f, b'(', b')').ok_or_else(|| err("unclosed '(' after offset"))? + 1
            } else {
                return Ok(None);
            }
        } else {
            e
        }
    } else {
        return Ok(None);
    };
    let text = &q[start..end];
    let body = text.trim_start_matches(|c: char| c == '-' || c == '+' || c.is_ascii_whitespace());
    let prefix = &text[..text.len() - body.len()];
    if parse_units_ms(body).is_some() && !prefix.contains('+') && prefix.matches('-').count() <= 1 {
        let plain = if prefix.contains('-') {
            format!("-{body}")
        } else {
            body.to_string()
        };
        return Ok(Some((end, plain)));
    }
    let ms = evaluate(text, ctx)?;
    let lit = if ms == 0 {
        String::new()
    } else {
        format!("{ms}ms")
    };
    Ok(Some((end, lit)))
}

fn is_dur_fn(w: &str) -> bool {
    ["step", "range", "min_of", "max_of"]
        .iter()
        .any(|f| w.eq_ignore_ascii_case(f))
}

/// Evaluates a duration expression to whole milliseconds (truncated).
pub(crate) fn evaluate(s: &str, ctx: DurCtx) -> Result<i64, PromqlError> {
    let toks = tokens(s)?;
    let mut p = Parser { toks, pos: 0, ctx };
    let v = p.expr()?;
    if p.pos != p.toks.len() {
        return Err(err(format!(
            "unexpected input in duration expression {s:?}"
        )));
    }
    let ms = v * 1000.0;
    if !ms.is_finite() || ms.abs() >= 9.2e18 {
        return Err(err("duration is out of range"));
    }
    Ok(ms.trunc() as i64)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Ident(String),
    Op(u8),
}

fn tokens(s: &str) -> Result<Vec<Tok>, PromqlError> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == b'.' {
            let st = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
            let w = &s[st..i];
            let v = match parse_units_ms(w) {
                Some(ms) => ms as f64 / 1000.0,
                None => w
                    .parse::<f64>()
                    .map_err(|_| err(format!("bad number {w:?} in duration expression")))?,
            };
            out.push(Tok::Num(v));
        } else if is_ident_start(c) {
            let st = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            out.push(Tok::Ident(s[st..i].to_ascii_lowercase()));
        } else if b"+-*/%^(),".contains(&c) {
            out.push(Tok::Op(c));
            i += 1;
        } else {
            return Err(err(format!(
                "unexpected character {:?} in duration expression",
                c as char
            )));
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    ctx: DurCtx,
}

impl Parser {
    fn peek_op(&self) -> Option<u8> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(c)) => Some(*c),
            _ => None,
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), PromqlError> {
        if self.peek_op() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(err(format!(
                "expected {:?} in duration expression",
                c as char
            )))
        }
    }

    fn expr(&mut self) -> Result<f64, PromqlError> {
        let mut v = self.term()?;
        while let Some(op @ (b'+' | b'-')) = self.peek_op() {
            self.pos += 1;
            let r = self.term()?;
            v = if op == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<f64, PromqlError> {
        let mut v = self.unary()?;
        while let Some(op @ (b'*' | b'/' | b'%')) = self.peek_op() {
            self.pos += 1;
            let r = self.unary()?;
            v = match op {
                b'*' => v * r,
                _ if r == 0.0 => {
                    return Err(err(if op == b'/' {
                        "division by zero"
                    } else {
                        "modulo by zero"
                    }));
                }
                b'/' => v / r,
                _ => v % r,
            };
        }
        Ok(v)
    }

    fn unary(&mut self) -> Result<f64, PromqlError> {
        match self.peek_op() {
            Some(b'-') => {
                self.pos += 1;
                Ok(-self.unary()?)
            }
            Some(b'+') => {
                self.pos += 1;
                self.unary()
            }
            _ => {
                let base = self.primary()?;
                if self.peek_op() == Some(b'^') {
                    self.pos += 1;
                    let e = self.unary()?;
                    return Ok(base.powf(e));
                }
                Ok(base)
            }
        }
    }

    fn primary(&mut self) -> Result<f64, PromqlError> {
        let t = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or_else(|| err("unexpected end of duration expression"))?;
        self.pos += 1;
        match t {
            Tok::Num(v) => Ok(v),
            Tok::Op(b'(') => {
                let v = self.expr()?;
                self.expect(b')')?;
                Ok(v)
            }
            Tok::Ident(name) => {
                self.expect(b'(')?;
                let mut args = Vec::new();
                if self.peek_op() != Some(b')') {
                    args.push(self.expr()?);
                    while self.peek_op() == Some(b',') {
                        self.pos += 1;
                        args.push(self.expr()?);
                    }
                }
                self.expect(b')')?;
                match (name.as_str(), args.as_slice()) {
                    ("step", []) => Ok(self.ctx.step_ms as f64 / 1000.0),
                    ("range", []) => Ok(self.ctx.range_ms as f64 / 1000.0),
                    ("min_of", [a, rest @ ..]) if !rest.is_empty() => {
                        Ok(rest.iter().fold(*a, |m, x| m.min(*x)))
                    }
                    ("max_of", [a, rest @ ..]) if !rest.is_empty() => {
                        Ok(rest.iter().fold(*a, |m, x| m.max(*x)))
                    }
                    _ => Err(err(format!("unknown duration function {name}()"))),
                }
            }
            Tok::Op(c) => Err(err(format!(
                "unexpected {:?} in duration expression",
                c as char
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(q: &str, step: i64, range: i64) -> String {
        rewrite(
            q,
            DurCtx {
                step_ms: step,
                range_ms: range,
            },
        )
        .expect("rewrites")
    }

    #[test]
    fn ranges_steps_and_offsets_become_literals() {
        assert_eq!(rw("changes(x[26m+4m])", 0, 0), "changes(x[1800000ms])");
        assert_eq!(rw("x[5m]", 0, 0), "x[5m]");
        assert_eq!(rw("x[1h/2:step()*2]", 5000, 0), "x[1800000ms:10000ms]");
        assert_eq!(rw("x[30m1s-30m1s % 1m]", 0, 0), "x[1800000ms]");
        assert_eq!(rw("x offset 100 + 2", 0, 0), "x offset 100000ms + 2");
        assert_eq!(rw("x offset -2 ^ 2", 0, 0), "x offset -2000ms ^ 2");
        assert_eq!(rw("x offset (-2 ^ 2)", 0, 0), "x offset -4000ms");
        assert_eq!(rw("x offset -5m", 0, 0), "x offset -5m");
        assert_eq!(rw("x offset range()", 0, 10_000), "x offset 10000ms");
        assert_eq!(rw("x offset range()", 0, 0), "x ");
        assert_eq!(
            rw("x offset -min_of(step(), 1s)+8000", 5000, 0),
            "x offset -1000ms+8000"
        );
        assert_eq!(rw(r#"x{a="[1+1]"}[1m]"#, 0, 0), r#"x{a="[1+1]"}[1m]"#);
        assert_eq!(rw("x{offset=\"1\"}", 0, 0), "x{offset=\"1\"}");
        assert_eq!(
            rw("rate(x[1m] anchored)", 0, 0),
            format!("rate(x{{{MODE_LABEL}=\"anchored\"}}[1m] )")
        );
        assert_eq!(
            rw("x{a=\"b\"} offset -100 smoothed + 0", 0, 0),
            format!("x{{a=\"b\",{MODE_LABEL}=\"smoothed\"}} offset -100000ms  + 0")
        );
        assert_eq!(rw("sum(smoothed)", 0, 0), "sum(smoothed)");
        assert_eq!(rw("x and smoothed", 0, 0), "x and smoothed");
        assert_eq!(
            rw("info(x, {data=~\".*\"})", 0, 0),
            format!("info(x, {{{MODE_LABEL}=\"info\",data=~\".*\"}})")
        );
        assert_eq!(rw("info(x)", 0, 0), "info(x)");
        assert_eq!(
            rw("x[5m] # see [docs]\n+ y", 0, 0),
            "x[5m] # see [docs]\n+ y"
        );
        assert_eq!(rw(r#"f("\xff")"#, 0, 0), r#"f("\U0000fffd")"#);
        assert_eq!(
            rw(r#"f("\xc3\xa9\x41")"#, 0, 0),
            r#"f("\U000000e9\U00000041")"#
        );
        assert_eq!(rw(r#"f("\x41")"#, 0, 0), r#"f("\x41")"#);
    }

    #[test]
    fn bad_durations_are_errors() {
        let c = DurCtx::default();
        assert!(rewrite("x[1m-1m]", c).is_err());
        assert!(rewrite("x[1m/0]", c).is_err());
        assert!(rewrite("x[foo()]", c).is_err());
        assert!(rewrite("x[1m", c).is_err());
    }
}
