#!/usr/bin/env bash
# Canopy's test command (the README's, and what .ci/run calls): everything a
# fresh Debian machine needs for the tests on real parts, then every test.
#
#   - Prometheus 2.42 and VictoriaMetrics (remote_write tests),
#   - Chromium (the dashboard's end-to-end test),
#   - a real single-node Slurm (per-job attribution tests),
#   - cargo test --workspace --locked, ending with one summary line.
#
# Idempotent: what is installed or running already is left as it is.
# Must run as root (apt and Slurm), as CI does.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/install-tsdbs.sh
bash .ci/install-chromium.sh
bash scripts/local-slurm.sh start

log=$(mktemp)
set +e
cargo test --workspace --locked "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# One closing line for the whole workspace (cargo prints one per test binary,
# the last of which is often the empty doc-test run).
awk '/^test result:/ { p += $4; f += $6; s += $8 } END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$log"
rm -f "$log"
exit "$rc"
