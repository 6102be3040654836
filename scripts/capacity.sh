#!/usr/bin/env bash
# Server capacity: starts `chorus serve` (random real-architecture weights) and plays real-time
# load at each stream count, printing the load generator's JSON report per count; the capacity is
# the most streams with p99 frame latency under the target and no missed 80 ms deadline.
# Usage: scripts/capacity.sh DEVICE MAX_STREAMS "N1 N2 ..." [SECONDS] [VERIFY_STREAMS]
# CHORUS (default target/release/chorus) names the binary; PORT (default 8091) the port.
set -uo pipefail
device=$1 max_streams=$2 counts=$3 duration=${4:-20} verify=${5:-32}
bin=${CHORUS:-target/release/chorus}
port=${PORT:-8091}
# Every load-generator stream comes from one address: no per-client connection limit.
"$bin" serve --model random --device "$device" --max-streams "$max_streams" --port "$port" \
  --max-connections-per-client 0 >"${SERVE_LOG:-/tmp/chorus-serve.log}" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for n in $counts; do
  echo "# $(date -u +%FT%TZ) device=$device streams=$n duration=${duration}s"
  "$bin" loadgen --url "ws://127.0.0.1:$port" --streams "$n" --duration "$duration" \
    --rate realtime --n-q 8 --verify-streams "$verify" --wait-ready 300 --json
done
