#!/usr/bin/env bash
# On the device machine: correctness of the CUDA backend with programmatic dependent launch (the
# CUDA-vs-CPU op and stage tests), then the same benchmarks with it off and on (CHORUS_PDL=0/1):
# the music stage (bf16 1 and 64 songs, int8 1 song, context 1000) and the Mimi decoder step.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
section "CUDA vs CPU with programmatic launch on"
for t in music_cuda lm_gemv lm_rows lm_attention decoder; do
  "$BIN/$t" --test-threads=1 2>&1 | grep -E "^test |test result|panicked|FAILED" | grep -v " ok$" || true
  "$BIN/$t" --test-threads=1 >/dev/null 2>&1 || { echo "FAILED: $t"; status=1; }
done
for pdl in 0 1; do
  section "CHORUS_PDL=$pdl: music-bench bf16 (songs 1, 64; context 1000)"
  CHORUS_PDL=$pdl "$BIN"/chorus music-bench --device cuda --model random --songs 1,64 --context 1000 --frames 10 2>&1 | grep -v "^warning" || status=1
  section "CHORUS_PDL=$pdl: Mimi decoder step (chorus bench, bf16)"
  CHORUS_PDL=$pdl "$BIN"/chorus bench --device cuda --model random --batch 1,64,1024 --seconds 3 2>&1 | grep -v "^warning" || status=1
done
section "CHORUS_PDL=1: music-bench int8 (1 song, context 1000)"
CHORUS_PDL=1 "$BIN"/chorus music-bench --device cuda --model random-int8 --songs 1,8 --context 1000 --frames 10 2>&1 | grep -v "^warning" || status=1
section "pdl_ab exit status: $status"
exit $status
