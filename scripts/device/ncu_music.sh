#!/usr/bin/env bash
# Nsight Compute's figures for chosen kernels inside `chorus music-bench` frames on the GPU
# machine, one line per launch: grid, registers, duration, DRAM bytes and throughput, achieved
# occupancy, issue utilisation and the long-scoreboard stall share. COUNT launches of the kernels
# matching KERNELS (a regex) after skipping SKIP of them (past the warm-up), those with a grid of
# at least MIN_GRID blocks printed (the LM's launches, not the depth decoder's), e.g.
# `KERNELS=lm_paged_attention SONGS=64 MODEL=random EXTRA="--kv-cache fp8" bash
# scripts/device/ncu_music.sh`. Expects .device-bin/chorus (CHORUS_BIN: another binary).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
ncu --clock-control none --csv --metrics "$M" --kernel-name "regex:${KERNELS:-lm_paged_attention}" \
  --launch-skip "${SKIP:-72}" --launch-count "${COUNT:-8}" \
  "${CHORUS_BIN:-$BIN/chorus}" music-bench --device cuda --model "${MODEL:-random}" --songs "${SONGS:-64}" \
  --context 1000 --frames 2 ${EXTRA:-} >/tmp/ncu_music.csv 2>/dev/null || true
python3 - <<'PY'
import csv, collections
rows = [r for r in csv.reader(open("/tmp/ncu_music.csv")) if len(r) > 10]
if not rows or "Kernel Name" not in rows[0]:
    raise SystemExit("no ncu rows (is ncu on PATH?)")
h = rows[0]
ii = {k: h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
launches = collections.OrderedDict()
for r in rows[1:]:
    key = (r[ii["ID"]], r[ii["Kernel Name"]].split("(")[0])
    launches.setdefault(key, {})[r[ii["Metric Name"]]] = (r[ii["Metric Value"]].replace(",", ""), r[ii["Metric Unit"]])
def val(m, k):
    v, u = m.get(k, ("nan", ""))
    try:
        x = float(v)
    except ValueError:
        return float("nan")
    return x * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
                "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(u, 1.0)
print(f"{'kernel':28} {'grid':>7} {'regs':>4} {'us':>8} {'MB read':>8} {'GB/s':>6} {'dram%':>5} {'occ%':>5} {'issue%':>6} {'lsb':>5}")
import os
min_grid = float(os.environ.get("MIN_GRID", "0"))
for (i, name), m in launches.items():
    if val(m, "launch__grid_size") < min_grid:
        continue
    us = val(m, "gpu__time_duration.sum")
    b = val(m, "dram__bytes_read.sum")
    print(f"{name[:28]:28} {val(m, 'launch__grid_size'):7.0f} {val(m, 'launch__registers_per_thread'):4.0f} {us:8.1f} "
          f"{b / 1e6:8.2f} {b / us / 1e3:6.0f} {val(m, 'dram__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f} "
          f"{val(m, 'sm__warps_active.avg.pct_of_peak_sustained_active'):5.1f} "
          f"{val(m, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):6.1f} "
          f"{val(m, 'smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio'):5.2f}")
PY
