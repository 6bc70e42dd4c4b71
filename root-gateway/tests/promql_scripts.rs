//! Runs Canopy's own PromQL cases (`tests/promql/*.test`) through the
//! test-script runner; every eval must pass and none may be skipped.

use std::path::Path;

#[test]
fn canopy_promql_scripts_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/promql");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/promql exists") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "test") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("readable");
        let r = canopy_gateway::promql::testscript::run_script(&text);
        assert!(
            r.failed == 0 && r.skipped == 0 && r.passed > 0,
            "{}: passed {} failed {} skipped {}: {:#?}",
            path.display(),
            r.passed,
            r.failed,
            r.skipped,
            r.failures
        );
    }
    assert!(files > 0);
}

/// A selector matching more series than the engine allows fails with the
/// typed, Prometheus-worded error instead of loading them.
#[test]
fn series_per_selector_limit_is_a_clear_error() {
    use canopy_gateway::promql::{Engine, EngineOpts, PromqlError};
    use canopy_gateway::store::{Appender, Labels, MemStore};

    let mut store = MemStore::new();
    for node in ["n1", "n2", "n3"] {
        let l = Labels::metric("up", [("node", node)]);
        store.append(None, &l, 0, 1.0).expect("append");
    }
    let engine = Engine::new(EngineOpts {
        max_series_per_selector: 2,
        ..EngineOpts::default()
    });
    let err = engine.instant(&store, "sum(up)", 0).expect_err("limit hit");
    assert_eq!(err, PromqlError::TooManySeries { limit: 2 });
    assert!(
        err.to_string()
            .starts_with("query processing would load too many series into memory"),
        "{err}"
    );
    let ok = engine.instant(&store, "up{node=~\"n1|n2\"}", 0);
    assert!(ok.is_ok(), "{ok:?}");
}

/// A segment that loads native histograms (or builds them with
/// `load_with_nhcb`) runs every eval whose selectors cannot match a
/// histogram series (and really checks it: a wrong expectation fails), and
/// skips those that could.
#[test]
fn evals_beside_native_histograms_run_unless_they_could_select_them() {
    let script = r#"
load 1m
	floats{k="a"} 1+1x4
	hist{k="a"} {{count:1 sum:1}}+{{count:1 sum:1}}x4

eval instant at 2m floats
	floats{k="a"} 3

eval instant at 2m floats + 1
	{k="a"} 99

eval instant at 2m count({__name__=~".+"})
	{} 2

eval instant at 2m hist
	{k="a"} 1

eval instant at 2m sum(rate(floats[2m])) + count(hist)
	{} 1

clear

load 1m
	floats{k="a"} 1+1x4

eval instant at 2m count({__name__=~".+"})
	{} 1

clear

load_with_nhcb 1m
	lat_bucket{le="1"} 0+1x4
	lat_bucket{le="+Inf"} 0+2x4

eval instant at 2m histogram_quantile(0.5, lat_bucket)
	{} 1

eval instant at 2m histogram_count(lat)
	{} 4

eval instant at 2m count({__name__=~"lat.*"})
	{} 2
"#;
    let r = canopy_gateway::promql::testscript::run_script(script);
    assert_eq!(
        (r.passed, r.failed, r.skipped),
        (3, 1, 5),
        "{:#?}",
        r.failures
    );
}
