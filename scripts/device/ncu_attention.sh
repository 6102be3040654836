#!/usr/bin/env bash
# Nsight Compute's sections for one decode-attention launch inside a benchmark, for each binary
# of NCU_BINS (default: chorus_base, when packed, and chorus): speed of light, memory workload,
# warp state (the stall reasons), scheduler, occupancy and launch statistics. NCU_KERNEL (a
# regex, default lm_paged_attention_mma8) picks the kernel, NCU_SKIP launches of it are skipped
# (past the warm-up: the stage's first steps have few rows), NCU_BENCH is the benchmark's
# arguments (default: the STT 1B's LM step over 8-bit rings at 500 streams; ncu backs up the
# device memory the process holds before each replay, so thousands of streams take minutes per
# launch). Each full report goes to $OUT/ncu-BINARY.txt; the lines that carry figures are printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
OUT=${OUT:-/tmp/ncu}
mkdir -p "$OUT"
bins=${NCU_BINS:-chorus}
[ -z "${NCU_BINS:-}" ] && [ -x "$BIN/chorus_base" ] && bins="chorus_base chorus"
BENCH=${NCU_BENCH:-stt-bench --device cuda --steps 4 --model random --kv-cache fp8 --streams 500}
for b in $bins; do
  section "$b: ncu ${NCU_KERNEL:-lm_paged_attention_mma8} in $BENCH"
  ncu --clock-control none --kernel-name "regex:${NCU_KERNEL:-lm_paged_attention_mma8}" \
    --launch-skip "${NCU_SKIP:-48}" --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats \
    "$BIN/$b" $BENCH > "$OUT/ncu-$b.txt" 2>&1
  echo "ncu exit $?"
  grep -E "Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Stall|stall|Grid Size|Waves Per SM|Compute \(SM\)|Executed Ipc|==PROF==|==ERROR==|==WARNING==" \
    "$OUT/ncu-$b.txt" | head -60
done
