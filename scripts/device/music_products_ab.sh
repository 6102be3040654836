#!/usr/bin/env bash
# The music stage's product paths side by side in one device call: `chorus music-bench` (bf16,
# context 1000) with the skinny kernel off (CHORUS_SKINNY=0: GEMV and cuBLAS for every product),
# the default (int8 on the skinny kernel, bf16 apart) and the batch-invariant mode
# (CHORUS_BATCH_INVARIANT=1), then the int8 model on the default path. Expects
# scripts/device/build_bins.sh's binaries in .device-bin/.
# Usage: scripts/device/music_products_ab.sh [SONGS] [INT8_SONGS]   (defaults 1,2,8,32 and 1,8,32)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu --format=csv
for mode in CHORUS_SKINNY=0 CHORUS_SKINNY=1 CHORUS_BATCH_INVARIANT=1; do
  echo "== bf16 $mode"
  env "$mode" "$BIN"/chorus music-bench --device cuda --model random --songs "${1:-1,2,8,32}" --context 1000 --frames 10 || status=1
done
echo "== int8 default"
"$BIN"/chorus music-bench --device cuda --model random-int8 --songs "${2:-1,8,32}" --context 1000 --frames 10 || status=1
exit $status
