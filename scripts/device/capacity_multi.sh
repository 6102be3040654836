#!/usr/bin/env bash
# Server capacity on several GPUs of one host: starts one `chorus serve --devices DEVICES` (one
# engine per GPU, MAX_STREAMS slots each, random real-architecture weights) and plays real-time
# load at each stream count, printing a header line and one JSON load generator report per count,
# as scripts/capacity.sh does. DEVICES `cuda` (or `cpu`) serves one engine instead (`--device`):
# the single-GPU baseline on the same machine, through the same load path.
#
# One load generator process drives at most PER_LOADGEN streams (default 8000, about 4 cores of
# client work at the H200 capacity runs); larger counts are split over several processes, each
# aimed at its own loopback address (127.0.0.1, 127.0.0.2, ...), because the source ports of one
# client address towards one server address run out near 28,000 connections. Their reports are
# then summed into one of the same shape: counts, frames and CPU added, errors merged, latency
# percentiles the worst process's, the server's counters from the first process's scrapes, and
# `loadgen_processes` added. The server then listens on 0.0.0.0 (HOST overrides).
#
# DEVICES `each:0,1,...` starts one server process per listed GPU instead (`--devices N`, ports
# PORT, PORT+1, ...), and every load generator spreads its streams over all of them (`--url a,b`):
# the deployment of docs/DEPLOY.md on one host, and the way past a per-process open-file limit
# (each stream holds a socket in the server).
#
# Usage: scripts/device/capacity_multi.sh DEVICES MAX_STREAMS "N1 N2 ..." [SECONDS] [VERIFY_STREAMS]
#   e.g. scripts/device/capacity_multi.sh all 12288 "8000 12000 16000 20000" 15 32
#        scripts/device/capacity_multi.sh each:0,1 13312 "22800 24000" 15 32
# CHORUS (default target/release/chorus) names the binary, LOADGEN_CHORUS (default CHORUS) the one
# that runs the load generators (to compare two servers under the same client); MODEL (default random) the model (`fake`
# with SERVE_ARGS="--fake-step-ms 4" measures the host side alone); PORT (default 8091) the port;
# SERVE_ARGS extra `chorus serve` flags (e.g. "--buckets 1,2,4,..."). SERVER_CPUS and
# LOADGEN_CPUS (taskset lists such as 0-15 and 16-31) keep the server and the load generators on
# separate cores of the machine. After each report a line gives the server process's CPU use, in
# cores: a host-bound server shows there.
set -uo pipefail
devices=$1 max_streams=$2 counts=$3 duration=${4:-20} verify=${5:-32}
bin=${CHORUS:-target/release/chorus}
lbin=${LOADGEN_CHORUS:-$bin}
port=${PORT:-8091}
per=${PER_LOADGEN:-8000}
# Command prefixes that keep the server and the load generators on their cores (a prefix that
# execs, so that `$!` is the server itself).
server_on=() loadgen_on=()
[[ -n ${SERVER_CPUS:-} ]] && server_on=(taskset -c "$SERVER_CPUS")
[[ -n ${LOADGEN_CPUS:-} ]] && loadgen_on=(taskset -c "$LOADGEN_CPUS")
# One server per entry of `wheres` (its placement flags), on ports PORT, PORT+1, ...
wheres=()
case $devices in
  auto | cpu | cuda) wheres=("--device $devices") ;;
  each:*)
    IFS=, read -ra ords <<<"${devices#each:}"
    for d in "${ords[@]}"; do wheres+=("--devices $d"); done
    ;;
  *) wheres=("--devices $devices") ;;
esac
# Several load generators need several loopback addresses, so the server listens on all of them.
largest=0
for n in $counts; do ((n > largest)) && largest=$n; done
host=${HOST:-127.0.0.1}
((largest > per)) && host=${HOST:-0.0.0.0}
# Each stream holds a socket in the server and one in a load generator, and both raise their
# soft limit to the hard one: raise the hard limit where it is too low (root may).
need=$((largest + 1024))
hard=$(ulimit -Hn)
if [[ $hard != unlimited ]] && ((hard < need)); then
  ulimit -Hn "$need" 2>/dev/null || echo "# warning: open-file limit $hard is below $need" >&2
fi
log=${SERVE_LOG:-/tmp/chorus-serve.log}
servers=() ports=()
for ((k = 0; k < ${#wheres[@]}; k++)); do
  p=$((port + k))
  # shellcheck disable=SC2086 # SERVE_ARGS and the placement flags are lists of flags.
  # Each load generator's thousands of streams come from one address: no per-client limit.
  ${server_on[@]+"${server_on[@]}"} "$bin" serve --model "${MODEL:-random}" ${wheres[k]} \
    --max-streams "$max_streams" --host "$host" --port "$p" --max-connections-per-client 0 \
    ${SERVE_ARGS:-} >"$log.$k" 2>&1 &
  servers+=($!) ports+=("$p")
done
work=$(mktemp -d)
trap 'kill -TERM "${servers[@]}" 2>/dev/null; wait "${servers[@]}" 2>/dev/null; rm -rf "$work"' EXIT
# Ready before the first count, so that no load phase's server CPU holds the start.
for ((k = 0; k < ${#servers[@]}; k++)); do
  for ((t = 0; t < 600; t++)); do
    curl -sf "http://127.0.0.1:${ports[k]}/healthz" >/dev/null 2>&1 && break
    kill -0 "${servers[k]}" 2>/dev/null || { echo "# a server exited:"; cat "$log.$k"; exit 1; }
    sleep 1
  done
done

# The load generator's --url towards every server through loopback address `ip`.
urls() {
  local ip=$1 out=() p
  for p in "${ports[@]}"; do out+=("ws://$ip:$p"); done
  (IFS=,; echo "${out[*]}")
}

# Sums the reports named as arguments into one JSON report on stdout.
merge() {
  python3 - "$@" <<'PY'
import json, sys
reps = [json.load(open(f)) for f in sys.argv[1:]]
out = dict(reps[0])
for k in ("streams", "streams_opened", "streams_completed", "frames_sent", "frames_received",
          "frames_per_second", "deadline_misses", "client_cpu_cores"):
    out[k] = sum(r[k] for r in reps)
out["elapsed_s"] = max(r["elapsed_s"] for r in reps)
out["url"] = ",".join(r["url"] for r in reps)
lat = {k: max(r["latency_ms"][k] for r in reps) for k in ("p50", "p90", "p99", "max")}
got = sum(r["frames_received"] for r in reps)
lat["mean"] = sum(r["latency_ms"]["mean"] * r["frames_received"] for r in reps) / got if got else 0.0
out["latency_ms"] = lat
errors = {}
for r in reps:
    for k, v in r["errors"].items():
        errors[k] = errors.get(k, 0) + v
out["errors"] = errors
v = dict(reps[0]["verify"])
for k in ("streams_checked", "frames_checked", "frames_mismatched", "pcm_streams_compared"):
    v[k] = sum(r["verify"][k] for r in reps)
for k in ("max_abs_diff", "rel_l2"):
    v[k] = max(r["verify"][k] for r in reps)
v["bit_exact"] = all(r["verify"]["bit_exact"] for r in reps)
out["verify"] = v
secs = {}
for r in reps:
    for t in r.get("timeline", []):
        m = secs.setdefault(t["second"], {"second": t["second"], "frames": 0, "p99_ms": 0.0, "max_ms": 0.0, "misses": 0})
        m["frames"] += t["frames"]
        m["misses"] += t["misses"]
        # The worst process's percentile, as for the whole run.
        m["p99_ms"] = max(m["p99_ms"], t["p99_ms"])
        m["max_ms"] = max(m["max_ms"], t["max_ms"])
out["timeline"] = [secs[k] for k in sorted(secs)]
out["loadgen_processes"] = len(reps)
print(json.dumps(out, indent=2))
PY
}

# CPU seconds (user + system) the servers have used so far.
server_cpu() {
  local pid sum=0 c
  for pid in "${servers[@]}"; do
    c=$(awk -v tck="$(getconf CLK_TCK)" '{ print ($14 + $15) / tck }' "/proc/$pid/stat" 2>/dev/null || echo 0)
    sum=$(awk -v a="$sum" -v b="$c" 'BEGIN { print a + b }')
  done
  echo "$sum"
}

# Plays `n` streams and prints the report.
play() {
  local n=$1 procs=$2
  if ((procs == 1)); then
    ${loadgen_on[@]+"${loadgen_on[@]}"} "$lbin" loadgen --url "$(urls 127.0.0.1)" --streams "$n" \
      --duration "$duration" --rate realtime --n-q 8 --verify-streams "$verify" \
      --wait-ready 600 --json
    return
  fi
  pids=()
  for ((i = 0; i < procs; i++)); do
    share=$(((n + procs - 1 - i) / procs))
    checks=$(((verify + procs - 1 - i) / procs))
    ${loadgen_on[@]+"${loadgen_on[@]}"} "$lbin" loadgen --url "$(urls "127.0.0.$((i + 1))")" \
      --streams "$share" --duration "$duration" --rate realtime --n-q 8 --seed "$i" \
      --verify-streams "$checks" --wait-ready 600 --json \
      >"$work/report-$i.json" 2>"$work/report-$i.err" &
    pids+=($!)
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  if ((failed)); then
    echo "# a load generator failed:"
    cat "$work"/report-*.err
  fi
  merge "$work"/report-*.json || cat "$work"/report-*.json
}

for n in $counts; do
  procs=$(((n + per - 1) / per))
  echo "# $(date -u +%FT%TZ) devices=$devices streams=$n duration=${duration}s loadgen_processes=$procs"
  rm -f "$work"/report-*
  cpu0=$(server_cpu) t0=$(date +%s.%N)
  play "$n" "$procs" | tee "$work/run.json"
  cpu1=$(server_cpu) t1=$(date +%s.%N)
  # p99 and misses by the second in which frames were sent: ramp-up, stalls or a steady tail.
  python3 -c 'import json, sys
t = json.load(open(sys.argv[1])).get("timeline", [])
print("# p99 ms by second sent: " + " ".join("%d:%.0f%s" % (s["second"], s["p99_ms"], "(%d late)" % s["misses"] if s["misses"] else "") for s in t))' "$work/run.json" 2>/dev/null || true
  # Over the load phase and the whole-file decodes of the check.
  awk -v c="$cpu1" -v d="$cpu0" -v a="$t1" -v b="$t0" \
    'BEGIN { printf "# server CPU: %.1f cores over %.1f s\n", (c - d) / (a - b), a - b }'
done
