#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs NVRTC (for the CUDA kernel compile
# check; no GPU needed), then runs every workspace test and the Python package's tests, and closes
# with one summary line.
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
