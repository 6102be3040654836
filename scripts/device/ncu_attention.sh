#!/usr/bin/env bash
# Nsight Compute's sections for one decode-attention launch inside a benchmark, for each binary
# of NCU_BINS (default: chorus_base, when packed, and chorus): speed of light, memory workload,
# warp state, scheduler, occupancy, launch, instruction and source counters. NCU_KERNEL (a regex,
# default lm_paged_attention_mma8) picks the kernel; NCU_BENCH is the benchmark's arguments
# (default: the STT 1B's LM step over 8-bit rings at 2,500 streams after a fill of 750 steps);
# NCU_SKIP launches of the kernel are skipped (default 12,040: past the fill's 751 steps of 16
# layers, whose launches see few keys; ncu only counts the skipped ones, so this costs little).
# Each report goes to $OUT/ncu-BINARY.ncu-rep with its details page (.txt) and its SASS source
# counters (-source.csv, for executed instructions and sectors by opcode); the lines that carry
# figures are printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
OUT=${OUT:-/tmp/ncu}
mkdir -p "$OUT"
bins=${NCU_BINS:-chorus}
[ -z "${NCU_BINS:-}" ] && [ -x "$BIN/chorus_base" ] && bins="chorus_base chorus"
BENCH=${NCU_BENCH:-stt-bench --device cuda --fill 750 --steps 6 --model random --kv-cache fp8 --streams 2500}
for b in $bins; do
  section "$b: ncu ${NCU_KERNEL:-lm_paged_attention_mma8} in $BENCH"
  ncu --clock-control none --kernel-name "regex:${NCU_KERNEL:-lm_paged_attention_mma8}" \
    --launch-skip "${NCU_SKIP:-12040}" --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
    --section ComputeWorkloadAnalysis --section SourceCounters -f -o "$OUT/ncu-$b" \
    "$BIN/$b" $BENCH > "$OUT/ncu-$b.log" 2>&1
  echo "ncu exit $?"
  ncu -i "$OUT/ncu-$b.ncu-rep" > "$OUT/ncu-$b.txt" 2>&1
  ncu -i "$OUT/ncu-$b.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu-$b-source.csv" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Stall|stall|Grid Size|Waves Per SM|Compute \(SM\)|Executed Ipc|==PROF==|==ERROR==|==WARNING==" \
    "$OUT/ncu-$b.txt" | head -60
done
