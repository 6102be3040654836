#!/usr/bin/env bash
# Builds and runs the moshi 0.6.4 CPU streaming-decode peer benchmark.
# Extra arguments go to the benchmark, e.g. ./run.sh --batches 1,8 --min-secs 5
set -euo pipefail
cd "$(dirname "$0")"
RUSTFLAGS="-C target-cpu=native" cargo build --release
exec ./target/release/peer-moshi "$@"
