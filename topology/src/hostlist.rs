//! Slurm-style hostlist expressions and host files, and their inverse.
//!
//! Grammar (whitespace inside brackets is ignored; at top level, commas and
//! whitespace separate terms, and empty terms are skipped):
//!
//! ```text
//! list    := term { (',' | ws) term }
//! term    := { literal | group }          e.g. rack[1-2]-n[01-04]
//! group   := '[' element { ',' element } ']'
//! element := digits | digits '-' digits   zero padding = width of the low end
//! ```
//!
//! Several groups in one term expand as a cartesian product, leftmost group
//! varying slowest (as Slurm does): `r[1-2]n[1-2]` is `r1n1 r1n2 r2n1 r2n2`.
//! Expansion order is the textual order, and it matters: the planner assigns
//! subtrees by position in the list.

use std::collections::HashSet;

use crate::{MAX_HOSTS, TopologyError};

/// Longest run of digits accepted in a range end (fits in a `u64`).
const MAX_DIGITS: usize = 19;

/// Expands a hostlist expression such as `node[001-512,600]` or
/// `a[1-3],b,c[7]` into host names, in textual order.
///
/// Errors on unbalanced or nested brackets, malformed or reversed ranges,
/// duplicate hosts, an empty list, or more than [`MAX_HOSTS`] hosts (checked
/// before anything is expanded).
pub fn parse_hostlist(expr: &str) -> Result<Vec<String>, TopologyError> {
    let mut hosts = Vec::new();
    expand_into(expr, &mut hosts)?;
    finish(hosts)
}

/// Parses the *content* of a host file: one host or hostlist expression per
/// line (several per line are allowed, comma or space separated), `#` starts a
/// comment, blank lines are skipped. Hosts come out in file order.
///
/// Errors are those of [`parse_hostlist`]; syntax errors are wrapped in
/// [`TopologyError::HostFile`] with the 1-based line number.
pub fn parse_hostfile(content: &str) -> Result<Vec<String>, TopologyError> {
    let mut hosts = Vec::new();
    for (n, line) in content.lines().enumerate() {
        let line = line.split_once('#').map_or(line, |(before, _)| before);
        expand_into(line, &mut hosts).map_err(|error| match error {
            // The size limit is about the whole file, not one line.
            TopologyError::TooManyHosts { .. } => error,
            _ => TopologyError::HostFile {
                line: n + 1,
                error: Box::new(error),
            },
        })?;
    }
    finish(hosts)
}

/// The shortest-effort inverse of [`parse_hostlist`], for display: adjacent
/// hosts that differ only in their last run of digits share one bracket
/// group, and consecutive numbers of the same width become ranges.
///
/// Order is preserved, so `parse_hostlist(&compress_hostlist(h)) == h` for
/// any list of distinct hosts whose names contain no `[`, `]`, `,`, `#` or
/// whitespace (such names are emitted verbatim and will not parse back).
pub fn compress_hostlist(hosts: &[String]) -> String {
    let mut terms: Vec<String> = Vec::new();
    let mut group: Option<Group<'_>> = None;
    for host in hosts {
        let Some((prefix, digits, suffix)) = split_last_number(host) else {
            if let Some(g) = group.take() {
                terms.push(g.render());
            }
            terms.push(host.clone());
            continue;
        };
        // `split_last_number` only returns short all-digit runs.
        let Ok(value) = digits.parse::<u64>() else {
            terms.push(host.clone());
            continue;
        };
        let width = digits.len();
        match &mut group {
            Some(g) if g.prefix == prefix && g.suffix == suffix => g.push(value, width, digits),
            _ => {
                if let Some(g) = group.take() {
                    terms.push(g.render());
                }
                group = Some(Group {
                    prefix,
                    suffix,
                    runs: vec![(value, value, width)],
                });
            }
        }
    }
    if let Some(g) = group.take() {
        terms.push(g.render());
    }
    terms.join(",")
}

/// Hosts sharing a prefix and suffix, as runs `(first, last, width)`.
struct Group<'a> {
    prefix: &'a str,
    suffix: &'a str,
    runs: Vec<(u64, u64, usize)>,
}

impl Group<'_> {
    fn push(&mut self, value: u64, width: usize, digits: &str) {
        if let Some((_, last, run_width)) = self.runs.last_mut() {
            // Extend only if re-expanding the run with its width gives back
            // exactly these digits (so `9-10` but not `9` then `010`).
            if last.checked_add(1) == Some(value) && pad(value, *run_width) == digits {
                *last = value;
                return;
            }
        }
        self.runs.push((value, value, width));
    }

    fn render(&self) -> String {
        let body: Vec<String> = self
            .runs
            .iter()
            .map(|&(first, last, width)| {
                if first == last {
                    pad(first, width)
                } else {
                    format!("{}-{}", pad(first, width), pad(last, width))
                }
            })
            .collect();
        let bracketed = format!("{}[{}]{}", self.prefix, body.join(","), self.suffix);
        if self.runs.iter().all(|&(first, last, _)| first == last) {
            // Lone hosts: brackets only pay off when they save characters.
            let plain: Vec<String> = body
                .iter()
                .map(|b| format!("{}{b}{}", self.prefix, self.suffix))
                .collect();
            let plain = plain.join(",");
            if plain.len() <= bracketed.len() {
                return plain;
            }
        }
        bracketed
    }
}

fn pad(value: u64, width: usize) -> String {
    format!("{value:0width$}")
}

/// Splits `host` around its last run of ASCII digits, if that run is short
/// enough to count with, and the name has nothing the parser would treat as
/// syntax.
fn split_last_number(host: &str) -> Option<(&str, &str, &str)> {
    if host
        .chars()
        .any(|c| matches!(c, '[' | ']' | ',' | '#') || c.is_whitespace())
    {
        return None;
    }
    let bytes = host.as_bytes();
    let end = bytes.iter().rposition(u8::is_ascii_digit)? + 1;
    let start = bytes[..end]
        .iter()
        .rposition(|b| !b.is_ascii_digit())
        .map_or(0, |i| i + 1);
    if end - start > 18 {
        return None;
    }
    // Digits are ASCII, so both cuts are on char boundaries.
    Some((&host[..start], &host[start..end], &host[end..]))
}

/// Rejects duplicates and empty lists.
fn finish(hosts: Vec<String>) -> Result<Vec<String>, TopologyError> {
    if hosts.is_empty() {
        return Err(TopologyError::EmptyList);
    }
    if let Some(host) = first_duplicate(&hosts) {
        return Err(TopologyError::DuplicateHost {
            host: host.to_owned(),
        });
    }
    Ok(hosts)
}

/// The first name (in list order) seen for the second time.
fn first_duplicate(hosts: &[String]) -> Option<&str> {
    let mut seen = HashSet::with_capacity(hosts.len());
    hosts
        .iter()
        .map(String::as_str)
        .find(|&host| !seen.insert(host))
}

/// Splits `expr` into top-level terms and appends their expansions to `out`.
fn expand_into(expr: &str, out: &mut Vec<String>) -> Result<(), TopologyError> {
    let mut term = String::new();
    let mut open: Option<usize> = None;
    for (pos, c) in expr.char_indices() {
        match c {
            '[' if open.is_some() => {
                return Err(TopologyError::NestedBrackets {
                    expr: expr.to_owned(),
                    pos,
                });
            }
            '[' => {
                open = Some(pos);
                term.push(c);
            }
            ']' if open.is_none() => {
                return Err(TopologyError::UnbalancedBrackets {
                    expr: expr.to_owned(),
                    pos,
                });
            }
            ']' => {
                open = None;
                term.push(c);
            }
            ',' if open.is_none() => expand_term(expr, &std::mem::take(&mut term), out)?,
            c if c.is_whitespace() => {
                if open.is_none() {
                    expand_term(expr, &std::mem::take(&mut term), out)?;
                }
            }
            c => term.push(c),
        }
    }
    if let Some(pos) = open {
        return Err(TopologyError::UnbalancedBrackets {
            expr: expr.to_owned(),
            pos,
        });
    }
    expand_term(expr, &term, out)
}

/// One piece of a term: literal text, or the numbers of a bracket group.
enum Segment<'a> {
    Literal(&'a str),
    Group(Vec<Range>),
}

/// `first..=last`, printed zero-padded to `width`.
#[derive(Clone, Copy)]
struct Range {
    first: u64,
    last: u64,
    width: usize,
}

impl Range {
    /// Number of values; at least 1, saturating for absurd ranges (which the
    /// size check rejects anyway).
    fn len(self) -> usize {
        usize::try_from(self.last - self.first).map_or(usize::MAX, |d| d.saturating_add(1))
    }
}

/// Expands one term (brackets already known to be balanced and flat).
fn expand_term(expr: &str, term: &str, out: &mut Vec<String>) -> Result<(), TopologyError> {
    if term.is_empty() {
        return Ok(());
    }
    let mut segments = Vec::new();
    let mut rest = term;
    while let Some(open) = rest.find('[') {
        if open > 0 {
            segments.push(Segment::Literal(&rest[..open]));
        }
        let after = &rest[open + 1..];
        // Balanced and flat: the caller checked, so a `]` follows.
        let close = after
            .find(']')
            .ok_or_else(|| TopologyError::UnbalancedBrackets {
                expr: expr.to_owned(),
                pos: 0,
            })?;
        segments.push(Segment::Group(parse_group(expr, &after[..close])?));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        segments.push(Segment::Literal(rest));
    }

    // Size check before any allocation proportional to the size.
    let too_many = TopologyError::TooManyHosts { limit: MAX_HOSTS };
    let mut size: usize = 1;
    for segment in &segments {
        if let Segment::Group(ranges) = segment {
            let group_len = ranges
                .iter()
                .try_fold(0usize, |acc, r| acc.checked_add(r.len()))
                .ok_or_else(|| too_many.clone())?;
            size = size
                .checked_mul(group_len)
                .filter(|&s| s <= MAX_HOSTS)
                .ok_or_else(|| too_many.clone())?;
        }
    }
    if out.len().saturating_add(size) > MAX_HOSTS {
        return Err(too_many);
    }

    // Every segment as a list of alternatives, then a mixed-radix odometer.
    let choices: Vec<Vec<String>> = segments
        .iter()
        .map(|segment| match segment {
            Segment::Literal(text) => vec![(*text).to_owned()],
            Segment::Group(ranges) => ranges
                .iter()
                .flat_map(|r| (r.first..=r.last).map(move |v| pad(v, r.width)))
                .collect(),
        })
        .collect();
    out.reserve(size);
    let max_len: usize = choices
        .iter()
        .map(|c| c.iter().map(String::len).max().unwrap_or(0))
        .sum();
    let mut digits = vec![0usize; choices.len()];
    loop {
        let mut host = String::with_capacity(max_len);
        for (choice, &d) in choices.iter().zip(&digits) {
            host.push_str(&choice[d]);
        }
        out.push(host);
        // Increment, rightmost fastest.
        let mut i = choices.len();
        loop {
            if i == 0 {
                return Ok(());
            }
            i -= 1;
            digits[i] += 1;
            if digits[i] < choices[i].len() {
                break;
            }
            digits[i] = 0;
        }
    }
}

/// Parses the inside of one bracket group, e.g. `001-512,600`.
fn parse_group(expr: &str, body: &str) -> Result<Vec<Range>, TopologyError> {
    let bad = |range: &str, reason| TopologyError::BadRange {
        expr: expr.to_owned(),
        range: range.to_owned(),
        reason,
    };
    if body.is_empty() {
        return Err(bad("", "empty brackets"));
    }
    body.split(',')
        .map(|element| {
            if element.is_empty() {
                return Err(bad(element, "empty element"));
            }
            let (lo, hi) = element.split_once('-').unwrap_or((element, element));
            let number = |s: &str| {
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                    Err(bad(element, "expected digits or digits-digits"))
                } else if s.len() > MAX_DIGITS {
                    Err(bad(element, "number too long"))
                } else {
                    s.parse::<u64>()
                        .map_err(|_| bad(element, "number out of range"))
                }
            };
            let (first, last) = (number(lo)?, number(hi)?);
            if first > last {
                return Err(TopologyError::ReversedRange {
                    expr: expr.to_owned(),
                    range: element.to_owned(),
                });
            }
            Ok(Range {
                first,
                last,
                width: lo.len(),
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may panic.
mod tests {
    use super::*;

    fn hl(expr: &str) -> Vec<String> {
        parse_hostlist(expr).unwrap()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn zero_padding_is_kept() {
        let hosts = hl("node[001-512,600]");
        assert_eq!(hosts.len(), 513);
        assert_eq!(hosts[0], "node001");
        assert_eq!(hosts[511], "node512");
        assert_eq!(hosts[512], "node600");
    }

    #[test]
    fn width_comes_from_the_low_end() {
        assert_eq!(hl("n[8-10]"), strings(&["n8", "n9", "n10"]));
        assert_eq!(hl("n[098-100]"), strings(&["n098", "n099", "n100"]));
    }

    #[test]
    fn cartesian_product_leftmost_slowest() {
        assert_eq!(
            hl("rack[1-2]-n[01-02]"),
            strings(&["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"])
        );
    }

    #[test]
    fn top_level_list_and_whitespace() {
        let want = strings(&["a1", "a2", "a3", "b", "c7"]);
        assert_eq!(hl("a[1-3],b,c[7]"), want);
        assert_eq!(hl("  a[ 1 - 3 ] , b\tc[7],  "), want);
        assert_eq!(hl("a[1-3]\nb c[7]"), want);
    }

    #[test]
    fn bracket_only_term_and_suffix() {
        assert_eq!(hl("[1-2]x"), strings(&["1x", "2x"]));
    }

    #[test]
    fn errors() {
        use TopologyError as E;
        assert!(matches!(
            parse_hostlist("a[1-3"),
            Err(E::UnbalancedBrackets { pos: 1, .. })
        ));
        assert!(matches!(
            parse_hostlist("a1-3]"),
            Err(E::UnbalancedBrackets { pos: 4, .. })
        ));
        assert!(matches!(
            parse_hostlist("a[1[2]]"),
            Err(E::NestedBrackets { .. })
        ));
        assert!(matches!(
            parse_hostlist("a[5-3]"),
            Err(E::ReversedRange { .. })
        ));
        for bad in ["a[]", "a[1,,2]", "a[x]", "a[1-]", "a[-1]", "a[1-2-3]"] {
            assert!(
                matches!(parse_hostlist(bad), Err(E::BadRange { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_hostlist("a[99999999999999999999]"),
            Err(E::BadRange { .. })
        ));
        assert_eq!(
            parse_hostlist("a[1-3],a2"),
            Err(E::DuplicateHost { host: "a2".into() })
        );
        assert_eq!(parse_hostlist(" , "), Err(E::EmptyList));
        assert_eq!(
            parse_hostlist("a[0-9999999999]"),
            Err(E::TooManyHosts { limit: MAX_HOSTS })
        );
        assert_eq!(
            parse_hostlist("a[0-9999]b[0-9999]"),
            Err(E::TooManyHosts { limit: MAX_HOSTS })
        );
    }

    #[test]
    fn size_limit_is_checked_before_expansion() {
        // 3163^2 = 10_004_569: one product just over the limit.
        assert!(matches!(
            parse_hostlist("a[0-3162]b[0-3162]"),
            Err(TopologyError::TooManyHosts { .. })
        ));
        // The limit counts the whole list: 2 + (MAX_HOSTS - 1) is one too many.
        let expr = format!("a[1-2],b[1-{}]", MAX_HOSTS - 1);
        assert!(matches!(
            parse_hostlist(&expr),
            Err(TopologyError::TooManyHosts { .. })
        ));
    }

    #[test]
    fn hostfile_comments_blank_lines_and_line_numbers() {
        let content = "# cluster\n\nlogin1  # head node\nnode[01-03]\n  \ngpu[1-2],bigmem\n";
        assert_eq!(
            parse_hostfile(content).unwrap(),
            strings(&[
                "login1", "node01", "node02", "node03", "gpu1", "gpu2", "bigmem"
            ])
        );
        let err = parse_hostfile("a\nb[1-\n").unwrap_err();
        assert!(matches!(err, TopologyError::HostFile { line: 2, .. }));
        assert!(err.to_string().contains("line 2"));
        assert_eq!(
            parse_hostfile("# nothing\n\n"),
            Err(TopologyError::EmptyList)
        );
        assert_eq!(
            parse_hostfile("a\na\n"),
            Err(TopologyError::DuplicateHost { host: "a".into() })
        );
    }

    #[test]
    fn compress_examples() {
        let c = |v: &[&str]| compress_hostlist(&strings(v));
        assert_eq!(
            c(&["node001", "node002", "node003", "node600"]),
            "node[001-003,600]"
        );
        assert_eq!(c(&["a1", "a2", "a3", "b", "c7"]), "a[1-3],b,c7");
        assert_eq!(c(&["n8", "n9", "n10"]), "n[8-10]");
        assert_eq!(c(&["n9", "n010"]), "n9,n010");
        assert_eq!(c(&["r1-n01", "r1-n02", "r2-n01"]), "r1-n[01-02],r2-n01");
        assert_eq!(c(&["n3", "n1", "n2"]), "n[3,1-2]");
        assert_eq!(c(&[]), "");
    }

    #[test]
    fn compress_round_trips_fixed_cases() {
        for expr in ["node[001-512,600]", "a[1-3],b,c[7]", "rack[1-3]-n[08-11]x"] {
            let hosts = hl(expr);
            assert_eq!(hl(&compress_hostlist(&hosts)), hosts, "{expr}");
        }
    }
}
