#!/usr/bin/env bash
# Installs Debian's Prometheus (2.42) and VictoriaMetrics for the
# remote_write tests (tests/remote_write.rs starts both as real processes).
# Idempotent: does nothing when both are already on PATH.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v victoria-metrics >/dev/null 2>&1; then
  echo "prometheus present: $(prometheus --version 2>&1 | head -n 1)"
  echo "victoria-metrics present: $(command -v victoria-metrics)"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y --no-install-recommends prometheus victoria-metrics
# The packages start system services; the tests run their own instances.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $sudo systemctl disable --now prometheus victoria-metrics >/dev/null 2>&1 || true
fi
prometheus --version 2>&1 | head -n 1
command -v victoria-metrics
