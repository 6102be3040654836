#!/usr/bin/env bash
# Device time of every kernel of steady-state decoder steps, from Nsight Compute on the GPU
# machine: `bash scripts/device/ncu_kernels.sh BIN BUCKET [STEPS]` profiles STEPS (default 2)
# steps' worth of launches of `BIN/replay_bench bf16 BUCKET` after its KV rings are past the
# window, with caches and clocks left as they run, and prints each kernel's duration in launch
# order, then the sums by kernel name (per step). Kernels run one at a time under the profiler,
# so the total exceeds the graph replay's time by the launch overlap the graph gets.
set -euo pipefail
BIN=${1:?binary folder}
BUCKET=${2:?bucket}
STEPS=${3:-2}
NODES=${NODES:-128}
# The replay_bench fill steps replay the bucket's graph 130 times, then 40 timed replays follow:
# skip past the 125th step, so the KV rings hold a full window (every later step is the same
# steady state). NODES: kernels per step, at most the graph's node count.
SKIP=$((128 * NODES))
ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum \
  --launch-skip "$SKIP" --launch-count "$((STEPS * NODES))" \
  "$BIN"/replay_bench bf16 "$BUCKET" 40 mma 2>/dev/null >/tmp/ncu_kernels.csv || true
python3 - "$STEPS" <<'EOF'
import csv, sys
steps = int(sys.argv[1])
rows = [r for r in csv.reader(open("/tmp/ncu_kernels.csv")) if len(r) > 10]
if not rows or "Kernel Name" not in rows[0]:
    sys.exit("no ncu rows (is ncu on PATH?)")
head = rows[0]
name_i, unit_i, val_i = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
seq = []
for r in rows[1:]:
    if not r[val_i].replace(",", "").replace(".", "").isdigit():
        continue
    v = float(r[val_i].replace(",", ""))
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    if r[unit_i] not in scale:
        sys.exit(f"unknown duration unit {r[unit_i]!r}")
    us = scale[r[unit_i]] * v
    seq.append((r[name_i].split("(")[0][:60], us))
print(f"{len(seq)} kernels over {steps} steps, us each in launch order:")
print(" ".join(f"{n}:{us:.1f}" for n, us in seq))
sums = {}
for n, us in seq:
    c, t = sums.get(n, (0, 0.0))
    sums[n] = (c + 1, t + us)
total = sum(t for _, t in sums.values()) / steps
print(f"per step: {total:.1f} us in kernels; by name (calls per step, us per step):")
for n, (c, t) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
    print(f"  {t / steps:8.1f} us  {c / steps:5.1f}x  {n}")
EOF
