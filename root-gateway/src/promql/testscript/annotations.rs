//! The annotation checks of the test format (§6.2 of FORMAT.md):
//! `expect warn` / `expect info` lines, `no_warn` / `no_info`.

use super::Expect;

/// What an `expect warn` / `expect info` line asks for: an exact message
/// (`msg:`), a regex (`regex:`), or any annotation of that kind (`None`).
pub(super) fn annotation_pattern(tail: &str) -> Option<(bool, String)> {
    let t = tail.trim();
    if let Some(m) = t.strip_prefix("msg:") {
        Some((false, m.trim().to_string()))
    } else {
        t.strip_prefix("regex:")
            .map(|r| (true, r.trim().to_string()))
    }
}

/// The query's annotations against the eval's `expect warn`, `expect info`,
/// `no_warn` and `no_info` lines, each kind on its own.
pub(super) fn check_warnings(exp: &Expect, got: &[String]) -> Result<(), String> {
    let (infos, warnings): (Vec<String>, Vec<String>) = got
        .iter()
        .cloned()
        .partition(|a| a.starts_with("PromQL info:"));
    check_kind("warning", exp.no_warn, &exp.warns, &warnings)?;
    check_kind("info", exp.no_info, &exp.infos, &infos)
}

/// The upstream runner's rules for one kind of annotation: none at all
/// under `no_*`; every expected line matches one; with any expected line,
/// every annotation matches one.
fn check_kind(
    kind: &str,
    none: bool,
    want: &[Option<(bool, String)>],
    got: &[String],
) -> Result<(), String> {
    if none && !got.is_empty() {
        return Err(format!("expected no {kind}s, got {got:?}"));
    }
    if want.is_empty() {
        return Ok(());
    }
    let matches = |want: &Option<(bool, String)>, w: &str| match want {
        None => true,
        Some((false, m)) => w.trim() == m,
        Some((true, r)) => super::super::prepass::regex_matcher(&format!(".*(?:{r}).*"))
            .map(|m| m.is_match(w))
            .unwrap_or(false),
    };
    for w in want {
        if !got.iter().any(|g| matches(w, g)) {
            return Err(format!("expected {kind} {w:?}, got {got:?}"));
        }
    }
    if let Some(extra) = got.iter().find(|g| !want.iter().any(|x| matches(x, g))) {
        return Err(format!("unexpected {kind} {extra:?}"));
    }
    Ok(())
}
