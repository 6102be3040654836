#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs NVRTC (for the CUDA kernel compile
# check; no GPU needed), then runs every workspace test, the Python package's tests and two
# minutes of the server soak, and closes with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f scripts/ci_nvrtc_env.sh ]; then
  eval "$(bash scripts/ci_nvrtc_env.sh)"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --release "$@" 2>&1 | tee "$log" || status=$?
# The Python package (built with maturin) and its tests against the CLI and a live server.
bash scripts/python_tests.sh 2>&1 | tee -a "$log" || status=$?
# Two minutes of the soak: `chorus serve` with decode, encode and music under a mixed load loses
# no frame and grows nothing (scripts/soak.sh; it drives the server with curl and jq).
if ! command -v curl >/dev/null || ! command -v jq >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq curl jq) >/dev/null 2>&1 || true
fi
bash scripts/soak.sh 120 2>&1 | tail -n 25 | tee -a "$log" || status=1
awk '
  /^test result:/ { p += $4; f += $6 }
  /^[0-9]+ (passed|failed)/ || /^[0-9]+ failed, [0-9]+ passed/ {
    for (i = 2; i <= NF; i++) {
      if ($i ~ /^passed/) p += $(i - 1)
      if ($i ~ /^failed/) f += $(i - 1)
    }
  }
  END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"
