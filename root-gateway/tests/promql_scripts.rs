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
