#!/usr/bin/env bash
# The shortest form of scripts/device/fp8_kv_check.sh, for a call with little device time left:
# the paged-attention and music CUDA tests, the STT CUDA tests, music-bench with the bf16 and the
# fp8 cache at 1, 64 and 128 songs (context 1000; the bf16 run also sized for 14,000 positions),
# and the fp8 accuracy over FRAMES frames at full size.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
run_test() { "$BIN/$1" --test-threads=1 --nocapture "${@:2}" 2>&1 | grep -v '^$' | grep -v '^test .* ok$' | grep -v '^parity\|^reference\|^exact \|^timing' || status=1; }
section "lm_attention"
run_test lm_attention
section "music_cuda"
run_test music_cuda
section "stt_cuda"
run_test stt_cuda
section "music-bench --kv-cache bf16, sized for 14,000 positions"
"$BIN"/chorus music-bench --device cuda --model random --songs 1,64,128 --context 1000 --contexts 14000 --frames 10 2>&1 || status=1
section "music-bench --kv-cache fp8"
"$BIN"/chorus music-bench --device cuda --model random --kv-cache fp8 --songs 1,64,128 --context 1000 --frames 10 2>&1 || status=1
section "fp8 KV cache accuracy against bf16, full size"
"$BIN"/chorus music-bench --device cuda --model random --kv-accuracy ${KV_FRAMES:-500} --prefill-tokens 300 2>&1 || status=1
section "exit status: $status"
exit $status
