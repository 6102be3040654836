#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs NVRTC (for the CUDA kernel compile
# check; no GPU needed), then runs every workspace test.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f scripts/ci_nvrtc_env.sh ]; then
  eval "$(bash scripts/ci_nvrtc_env.sh)"
fi
cargo test --workspace --release "$@"
