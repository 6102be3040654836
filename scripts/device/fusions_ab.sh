#!/usr/bin/env bash
# The frame's fusions not yet measured, on the GPU machine in one call: the bulk-copy GEMV
# (lm_gemv_tma, CHORUS_GEMV_TMA: tests against the CPU and bit for bit against the register GEMV,
# fused_linear on it with the norm and the epilogues in the product, bandwidth of both kernels by
# shape), the fused attention combine (CHORUS_FUSED_COMBINE: bits of the combine kernel) and the
# rotation with the KV write (CHORUS_FUSED_ROPE_KV: bits of the two ops); the music and CSM
# stages' CUDA tests with all of them on; then `chorus music-bench` (bf16, context 1,000, songs
# FUSION_SONGS, default 1,8) and `chorus tts-bench` (CSM with the Mimi decode in the frame,
# FUSION_UTTERANCES, default 1,8) under each setting, and one frame op by op at
# FUSION_PROFILE_SONGS (default 128; empty: none) songs over the fp8 cache. Expects .device-bin/
# from scripts/device/build_bins.sh (chorus, lm_gemv, lm_skinny, lm_attention, music_cuda, csm_cuda).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
section "lm_gemv (bulk-copy GEMV against the CPU and the register GEMV; bandwidth by shape)"
"$BIN"/lm_gemv --test-threads=1 --nocapture 2>&1 | grep -E "^test |test result|panick|gemv |skinny products|parity|bulk" || status=1
section "lm_skinny bulk_copy (fused_linear on the bulk-copy GEMV: norm, epilogues, against the CPU)"
"$BIN"/lm_skinny --test-threads=1 --nocapture bulk_copy 2>&1 | grep -E "^test |test result|panick" || status=1
section "lm_attention combine (the fused combine against the combine kernel, bit for bit)"
"$BIN"/lm_attention --test-threads=1 --nocapture combine 2>&1 | grep -E "^test |test result|panick" || status=1
section "lm_attention rope_kv (the rotation with the KV write against the two ops, bit for bit)"
"$BIN"/lm_attention --test-threads=1 --nocapture rope_kv 2>&1 | grep -E "^test |test result|panick" || status=1
ALL="CHORUS_GEMV_TMA=1 CHORUS_FUSED_COMBINE=1 CHORUS_FUSED_ROPE_KV=1"
section "music_cuda with every fusion"
env $ALL "$BIN"/music_cuda --test-threads=1 --skip full_size 2>&1 | grep -E "^test |test result|panick" || status=1
section "csm_cuda with every fusion"
env $ALL "$BIN"/csm_cuda --test-threads=1 2>&1 | grep -E "^test |test result|panick" || status=1
# Each setting adds one fusion to the one before, so the differences attribute the gains.
for setting in "" "CHORUS_GEMV_TMA=1" "CHORUS_GEMV_TMA=1 CHORUS_FUSED_COMBINE=1" "$ALL"; do
  section "music-bench bf16, ${setting:-neither}"
  env $setting "$BIN"/chorus music-bench --device cuda --model random --songs "${FUSION_SONGS:-1,8}" \
    --context 1000 --frames 10 2>&1 | grep -v '^warning' || status=1
  section "tts-bench (CSM, Mimi decode in the frame), ${setting:-neither}"
  env $setting "$BIN"/chorus tts-bench --device cuda --model random --utterances "${FUSION_UTTERANCES:-1,8}" \
    --context 200 --frames 10 2>&1 | grep -v '^warning' || status=1
done
if [ -n "${FUSION_PROFILE_SONGS-128}" ]; then
  section "one frame op by op, ${FUSION_PROFILE_SONGS-128} songs, fp8 cache"
  "$BIN"/chorus music-bench --device cuda --model random --kv-cache fp8 --songs "${FUSION_PROFILE_SONGS-128}" \
    --context 1000 --frames 3 --profile-frame 2>&1 | grep -v '^warning' | head -60 || status=1
fi
section "exit status: $status"
exit $status
