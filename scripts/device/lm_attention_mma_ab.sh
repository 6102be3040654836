#!/usr/bin/env bash
# The tensor-core decode attention (kernels/lm_attention_mma.cu) on the GPU machine, in one call:
# the paged-attention tests (its own against the reference and the CPU over bf16 and 8-bit caches,
# and the rest), the music stage's CUDA tests with it on, then `chorus music-bench` with it off
# and on (CHORUS_LM_ATTENTION_MMA), bf16 and fp8 caches, 1 / 64 / 128 songs at context 1,000 in
# a stage sized for 14,000 positions. Expects .device-bin/ from scripts/device/build_bins.sh
# (chorus, lm_attention, music_cuda).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
section "lm_attention (mma, fp8, decode, prefill, window, draw)"
"$BIN"/lm_attention --test-threads=1 --nocapture 2>&1 | grep -E "^test |test result|panick|tensor cores|mma" || status=1
section "music_cuda with the tensor-core decode"
CHORUS_LM_ATTENTION_MMA=1 "$BIN"/music_cuda --test-threads=1 ${MUSIC_FILTER:-} 2>&1 | grep -E "^test |test result|panick" || status=1
for kv in bf16 fp8; do
  for mma in 0 1; do
    section "music-bench --kv-cache $kv, CHORUS_LM_ATTENTION_MMA=$mma"
    CHORUS_LM_ATTENTION_MMA=$mma "$BIN"/chorus music-bench --device cuda --model random --kv-cache $kv \
      --songs ${MMA_SONGS:-1,64,128} --context 1000 --contexts 14000 --frames 10 2>&1 | grep -v '^warning' || status=1
  done
done
section "exit status: $status"
exit $status
