#!/usr/bin/env bash
# Installs Debian's Chromium for the dashboard's end-to-end test
# (tests/dashboard.rs drives it headless). Idempotent: does nothing when a
# working chromium is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && chromium --version >/dev/null 2>&1; then
  echo "chromium present: $(chromium --version 2>/dev/null | tail -n 1)"
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y --no-install-recommends chromium
chromium --version
