//! What the runner does beside native histograms, which the engine does
//! not hold yet: the series a segment loads with histogram samples (or that
//! `load_with_nhcb` builds) are left out, and an eval whose selectors could
//! match one of them is skipped.

use canopy_proto::model::METRIC_NAME;
use promql_parser::parser::Expr;

use crate::store::{Labels, Matcher};

/// The native histogram series `load_with_nhcb` builds from the classic
/// histogram series `l` belongs to (`X_bucket{…, le}`, `X_count{…}` and
/// `X_sum{…}` group into `X{…}` without `le`), or `None` for another series.
pub(super) fn nhcb_series(l: &Labels) -> Option<Labels> {
    let name = l.name();
    let base = ["_bucket", "_count", "_sum"]
        .iter()
        .find_map(|s| name.strip_suffix(s))?;
    Some(Labels::from_pairs(
        l.iter()
            .filter(|(n, _)| *n != "le" && *n != METRIC_NAME)
            .chain([(METRIC_NAME, base)]),
    ))
}

/// True when a selector of `expr` could match one of `series` (or when
/// that cannot be told: the query does not parse, a matcher is refused),
/// so an answer could depend on samples the runner did not load.
/// `info()` without a second argument selects `target_info` implicitly.
pub(super) fn may_select(expr: &str, series: &[Labels]) -> bool {
    let Some(Ok(root)) = super::super::parse_outside_a_query(expr) else {
        return true;
    };
    let info = Matcher::equal(METRIC_NAME, "target_info");
    let mut stack = vec![&root];
    while let Some(e) = stack.pop() {
        let vs = match e {
            Expr::VectorSelector(vs) => Some(vs),
            Expr::MatrixSelector(ms) => Some(&ms.vs),
            _ => None,
        };
        if let Some(vs) = vs {
            match super::super::prepass::matchers(vs) {
                Ok(m) if !series.iter().any(|l| Matcher::all_match(&m, l)) => {}
                _ => return true,
            }
        }
        if let Expr::Call(c) = e
            && c.func.name == "info"
            && c.args.args.len() < 2
            && series
                .iter()
                .any(|l| Matcher::all_match(std::slice::from_ref(&info), l))
        {
            return true;
        }
        stack.extend(super::super::prepass::children(e));
    }
    false
}
