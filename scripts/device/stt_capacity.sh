#!/usr/bin/env bash
# Speech-to-text streams through the server on the GPU machine: for each of STT_STREAMS counts,
# `chorus serve` with the Kyutai STT stage on CUDA (random weights of stt-1b-en_fr's architecture
# and of Mimi, that many stream slots), then `chorus loadgen --input audio` with as many real-time streams for
# STT_SECONDS, each run's JSON report kept, and the largest count whose step outputs came with a
# p99 delay past their audio under STT_P99_MS (100) and no missed deadline (a step later than one
# 80 ms frame) printed at the end. Expects .device-bin/chorus (scripts/device/build_bins.sh).
# Settings: STT_STREAMS ("256 512 1024 1300"), STT_SECONDS (20), STT_P99_MS (100), STT_ENDPOINT
# (v1, or asr for /api/asr-streaming), STT_MODEL (random; random-2.6b), STT_KV_CACHE (bf16, or
# fp8), STT_PORT (8094), STT_OUT (/tmp/stt_capacity), STT_RAMP_MS (unset: a second run with the
# streams connecting over that many milliseconds).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
PORT=${STT_PORT:-8094}
COUNTS=${STT_STREAMS:-256 512 1024 1300}
P99_MS=${STT_P99_MS:-100}
OUT=${STT_OUT:-/tmp/stt_capacity}
MODEL=${STT_MODEL:-random}
KV=${STT_KV_CACHE:-bf16}
mkdir -p "$OUT"
# Each stream holds a socket in the server and one in the load generator.
largest=0
for n in $COUNTS; do ((n > largest)) && largest=$n; done
need=$((2 * largest + 1024))
hard=$(ulimit -Hn)
if [[ $hard != unlimited ]] && ((hard < need)); then
  ulimit -Hn "$need" 2>/dev/null || echo "# warning: open-file limit $hard is below $need" >&2
fi
ulimit -Sn "$(ulimit -Hn)" 2>/dev/null || true

# One server per count with exactly that many slots (each slot reserves its KV ring and Mimi
# state at start-up: about 0.1 GB per 1B stream, so the largest counts may not fit, which is a
# result too). The decoder is the stand-in: the GPU is the STT stage's alone. Every stream comes
# from this one address, past the default 1,024 connections per client: that limit is off.
start_server() {
  "$BIN"/chorus serve --port "$PORT" --model fake --stt-model "$MODEL" --stt-mimi random \
    --stt-device cuda --stt-streams "$1" --stt-kv-cache "$KV" --max-connections-per-client 0 \
    > "$OUT/serve_$1.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    grep -q "listening" "$OUT/serve_$1.log" 2>/dev/null && return 0
    kill -0 $server 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

# verdict REPORT N: PASS or FAIL with the report's figures.
verdict_of() {
  python3 - "$1" "$2" "$P99_MS" <<'PY'
import json, sys
path, n, p99_max = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    r = json.load(open(path))
except Exception as e:
    print(f"no report ({e})")
    sys.exit(0)
d = r["delay_ms"]
ok = (r["errors"] == {} and r["streams_completed"] == n and r["frames_sent"] > 0
      and r["steps_timed"] == r["frames_sent"] and r["missed_deadlines"] == 0
      and d["p99"] < p99_max)
print(f"{'PASS' if ok else 'FAIL'} streams {n}: p50 {d['p50']:.1f} p99 {d['p99']:.1f} max {d['max']:.1f} ms, "
      f"missed {r['missed_deadlines']}, steps {r['steps_timed']}/{r['frames_sent']}, "
      f"completed {r['streams_completed']}, errors {r['errors']}, client CPU {r['client_cpu_cores']:.2f} cores")
f = r.get("first_step_ms")
if f:
    print(f"  admission to position 0's output: p50 {f['p50']:.1f} p99 {f['p99']:.1f} max {f['max']:.1f} ms")
if r["missed_deadlines"]:
    by = r.get("missed_by_second", [])
    print("  missed by second: " + " ".join(f"{s}:{n}" for s, n in enumerate(by) if n))
PY
}

best=0
for n in $COUNTS; do
  echo "=================== $n streams ($MODEL, $KV rings): serve --stt-streams $n, loadgen --input audio ==================="
  if ! start_server "$n"; then
    echo "FAIL streams $n: the server did not start (tail of $OUT/serve_$n.log):"
    tail -5 "$OUT/serve_$n.log"
    kill $server 2>/dev/null; wait $server 2>/dev/null
    status=1
    continue
  fi
  grep -E "^stt:" "$OUT/serve_$n.log"
  echo "GPU memory with $n streams' slots: $(nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader)"
  report="$OUT/loadgen_$n.json"
  # The stage's step counters every quarter second through the first STT_SAMPLE_SECONDS (4) of
  # the load: how many steps ran, how long they took and how many streams each carried while
  # the streams connected.
  samples="$OUT/metrics_$n.txt"
  : > "$samples"
  (
    t0=$(date +%s.%N)
    end=$(python3 -c "print($t0 + ${STT_SAMPLE_SECONDS:-4})")
    while python3 -c "import sys,time; sys.exit(time.time() > $end)"; do
      m=$(curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^chorus_stt_(step_seconds_(sum|count)|step_streams|active_streams|frames_total) ' | tr '\n' ' ')
      echo "$(python3 -c "import time; print(f'{time.time() - $t0:.3f}')") $m" >> "$samples"
      sleep 0.25
    done
  ) &
  sampler=$!
  "$BIN"/chorus loadgen --url "ws://127.0.0.1:$PORT" --input audio --stt-endpoint "${STT_ENDPOINT:-v1}" \
    --streams "$n" --duration "${STT_SECONDS:-20}" --json > "$report" 2> "$OUT/loadgen_$n.err" || status=1
  wait $sampler 2>/dev/null
  python3 - "$samples" <<'PY'
import sys
rows = []
for line in open(sys.argv[1]):
    f = line.split()
    if not f:
        continue
    t, kv = float(f[0]), dict(zip(f[1::2], f[2::2]))
    rows.append((t, {k: float(v) for k, v in kv.items()}))
print("t s | steps | mean step ms | streams in last step | active")
for (t0, a), (t1, b) in zip(rows, rows[1:]):
    k = "chorus_stt_step_seconds_count"
    if k not in a or k not in b:
        continue
    steps = b[k] - a[k]
    ms = (b["chorus_stt_step_seconds_sum"] - a["chorus_stt_step_seconds_sum"]) / steps * 1e3 if steps else 0
    print(f"{t1:5.2f} | {steps:4.0f} | {ms:7.2f} | {b.get('chorus_stt_step_streams', 0):5.0f} | {b.get('chorus_stt_active_streams', 0):5.0f}")
PY
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('missed by position (1..8, later):', r.get('missed_by_position'))" "$report" 2>/dev/null
  # The step-time histogram and the stage's gauges as the run left them.
  curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^chorus_stt_(step_seconds_(sum|count)|frames_total|words_total|streams_refused_total)' || true
  verdict=$(verdict_of "$report" "$n")
  echo "$verdict"
  case "$verdict" in
    PASS*) [ "$n" -gt "$best" ] && best=$n ;;
  esac
  # STT_RAMP_MS: the same load again on the same server, the streams connecting over that many
  # milliseconds instead of at once (reported, not counted in the verdict above).
  if [ -n "${STT_RAMP_MS:-}" ]; then
    echo "--- the same $n streams connecting over ${STT_RAMP_MS} ms:"
    "$BIN"/chorus loadgen --url "ws://127.0.0.1:$PORT" --input audio --stt-endpoint "${STT_ENDPOINT:-v1}" \
      --streams "$n" --duration "${STT_SECONDS:-20}" --ramp-ms "$STT_RAMP_MS" --json \
      > "$OUT/loadgen_${n}_ramp.json" 2> "$OUT/loadgen_${n}_ramp.err"
    verdict_of "$OUT/loadgen_${n}_ramp.json" "$n" | sed 's/^/ramp: /'
  fi
  kill $server 2>/dev/null; wait $server 2>/dev/null
done
echo "largest real-time count (p99 < ${P99_MS} ms, no missed deadline): $best of ${COUNTS// /, }"
exit $status
