#!/usr/bin/env bash
# Chorus's CPU backend and Kyutai's moshi 0.6.4 (candle) decoding Mimi frames on this machine, in
# one command: both at batch 1 and 8, 8 codebooks, random real-architecture weights, warm-up past
# the 250-token window, f32. BOOST=1 (root, Linux) runs each in its own top-priority session so a
# busy shared machine disturbs the figures less. Prints one JSON object per line.
set -euo pipefail
cd "$(dirname "$0")/.."
BATCHES="${BATCHES:-1,8}"
SECONDS_PER_BATCH="${SECONDS_PER_BATCH:-8}"
cargo build --release -p chorus >&2
(cd bench/peer-moshi && RUSTFLAGS="-C target-cpu=native" cargo build --release >&2)
boost() {
  if [[ "${BOOST:-0}" == 1 ]]; then
    setsid bash -c 'echo -20 > /proc/self/autogroup && exec nice -n -20 "$0" "$@"' "$@"
  else
    "$@"
  fi
}
echo "# $(date -u +%FT%TZ) $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, commit $(git rev-parse --short HEAD)" >&2
boost ./target/release/chorus bench --device cpu --model random --batch "$BATCHES" --n-q 8 \
  --seconds "$SECONDS_PER_BATCH" --json 2>/dev/null
boost bench/peer-moshi/target/release/peer-moshi --batches "$BATCHES" --min-secs "$SECONDS_PER_BATCH" 2>/dev/null
