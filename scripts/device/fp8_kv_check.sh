#!/usr/bin/env bash
# The 8-bit KV cache and the adaptive decode splits on the GPU machine, in one call, with the
# STT stage's GPU check: the paged-attention tests (8-bit caches against the CPU's same format,
# windows, first_token), the music stage's CUDA tests (fp8 teacher forcing, chunked prefill, the
# invariance test), then `chorus music-bench` with the bf16 and the fp8 cache (bf16 storage,
# context 1000, the stage sized for 14,000 positions as servers size it), the fp8 cache's
# accuracy over 500 frames at full size (--kv-accuracy), scripts/stt_gpu_check.sh and
# scripts/device/tts_capacity.sh. Expects
# .device-bin/ from scripts/device/build_bins.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
export RUST_BACKTRACE=1
run_test() { "$BIN/$1" --test-threads=1 --nocapture "${@:2}" 2>&1 | grep -v '^$' | grep -v '^test .* ok$' || status=1; }
section "lm_attention (fp8, window, first_token, decode, prefill)"
run_test lm_attention
section "music_cuda"
run_test music_cuda ${MUSIC_FILTER:-}
for kv in bf16 fp8; do
  section "music-bench --kv-cache $kv (bf16 storage, context 1000; contexts 14000 at 1 song)"
  "$BIN"/chorus music-bench --device cuda --model random --kv-cache $kv --songs ${FP8_SONGS:-1,64,128} \
    --context 1000 --contexts 14000 --frames 10 2>&1 || status=1
done
section "fp8 KV cache accuracy against bf16: 500 frames, full size"
"$BIN"/chorus music-bench --device cuda --model random --kv-accuracy ${KV_FRAMES:-500} --prefill-tokens 300 2>&1 || status=1
if [ -z "${SKIP_STT:-}" ]; then bash scripts/stt_gpu_check.sh || status=1; fi
if [ -z "${SKIP_TTS:-}" ]; then section "TTS through the server"; bash scripts/device/tts_capacity.sh || status=1; fi
section "exit status: $status"
exit $status
