#!/usr/bin/env bash
# The LM stages' CUDA checks and capacity in one call on the GPU machine: the draw op's per-row
# sampling and the fused products against the CPU (lm_attention cfg_draw, lm_skinny), the CSM
# stage's CUDA tests, the int8 music frame with the norm and rotation in one kernel and apart
# (CHORUS_FUSED_NORM_ROTATION), then STT and TTS through the server (scripts/device/stt_capacity.sh,
# scripts/device/tts_capacity.sh). Expects .device-bin/ from scripts/device/build_bins.sh with at
# least chorus, lm_attention, lm_skinny and csm_cuda.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
section "lm_attention cfg_draw (per-row temperature and top-k against the CPU)"
"$BIN"/lm_attention --test-threads=1 --nocapture cfg_draw 2>&1 | grep -E "^test |test result|panick|parity" || status=1
section "lm_skinny (fused products, norm + rotation, against the CPU; bandwidth by rows)"
"$BIN"/lm_skinny --test-threads=1 --nocapture 2>&1 | grep -E "^test |test result|panick|GB/s" || status=1
section "csm_cuda"
"$BIN"/csm_cuda --test-threads=1 --nocapture 2>&1 | grep -E "^test |test result|panick|identical|rel L2" || status=1
for fused in 1 0; do
  section "int8 music frame, CHORUS_FUSED_NORM_ROTATION=$fused"
  CHORUS_FUSED_NORM_ROTATION=$fused "$BIN"/chorus music-bench --device cuda --model random-int8 \
    --songs ${INT8_SONGS:-1,8,64} --context 1000 --frames 10 2>&1 | grep -v '^warning' || status=1
done
if [ -z "${SKIP_STT:-}" ]; then
  section "STT through the server"
  STT_STREAMS="${STT_STREAMS:-512 1300}" STT_SECONDS="${STT_SECONDS:-10}" bash scripts/device/stt_capacity.sh || status=1
fi
if [ -z "${SKIP_TTS:-}" ]; then
  section "TTS through the server"
  TTS_STREAMS="${TTS_STREAMS:-96 128 192}" TTS_SECONDS="${TTS_SECONDS:-12}" TTS_FRAMES=60 \
    bash scripts/device/tts_capacity.sh || status=1
fi
section "exit status: $status"
exit $status
