#!/usr/bin/env bash
# The bulk-copy GEMV (lm_gemv_tma, CudaOptions::gemv_tma) on the GPU machine, in one call: its
# tests against the CPU and bit for bit against the register GEMV, fused_linear on it (the norm
# and the epilogues in the product), the bandwidth of both on the
# LM's product shapes, the music stage's CUDA tests with it on, then `chorus music-bench` with
# it off and on (CHORUS_GEMV_TMA) at 1 and 8 songs (bf16, context 1,000), `chorus tts-bench` (CSM)
# off and on at 1 and 8 utterances, and one frame op by op
# at TMA_PROFILE_SONGS (default 128) songs over the fp8 cache. Expects .device-bin/ from
# scripts/device/build_bins.sh (chorus, lm_gemv, lm_skinny, music_cuda).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
section "lm_gemv (bulk-copy GEMV against the CPU and the register GEMV; bandwidth by shape)"
"$BIN"/lm_gemv --test-threads=1 --nocapture 2>&1 | grep -E "^test |test result|panick|gemv |skinny products|parity|bulk" || status=1
section "lm_skinny bulk_copy (fused_linear on the bulk-copy GEMV: norm, epilogues, against the CPU)"
"$BIN"/lm_skinny --test-threads=1 --nocapture bulk_copy 2>&1 | grep -E "^test |test result|panick" || status=1
section "music_cuda with the bulk-copy GEMV"
CHORUS_GEMV_TMA=1 "$BIN"/music_cuda --test-threads=1 --skip full_size 2>&1 | grep -E "^test |test result|panick" || status=1
for tma in 0 1; do
  section "music-bench bf16, CHORUS_GEMV_TMA=$tma"
  CHORUS_GEMV_TMA=$tma "$BIN"/chorus music-bench --device cuda --model random \
    --songs ${TMA_SONGS:-1,8} --context 1000 --frames 10 2>&1 | grep -v '^warning' || status=1
done
for tma in 0 1; do
  section "tts-bench (CSM, Mimi decode in the frame), CHORUS_GEMV_TMA=$tma"
  CHORUS_GEMV_TMA=$tma "$BIN"/chorus tts-bench --device cuda --model random --utterances ${TMA_UTTERANCES:-1,8} \
    --context 200 --frames 10 2>&1 | grep -v '^warning' || status=1
done
if [ -n "${TMA_PROFILE_SONGS:-128}" ]; then
  section "one frame op by op, ${TMA_PROFILE_SONGS:-128} songs, fp8 cache"
  "$BIN"/chorus music-bench --device cuda --model random --kv-cache fp8 --songs "${TMA_PROFILE_SONGS:-128}" \
    --context 1000 --frames 3 --profile-frame 2>&1 | grep -v '^warning' | head -60 || status=1
fi
section "exit status: $status"
exit $status
