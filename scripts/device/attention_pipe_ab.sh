#!/usr/bin/env bash
# A/B of the pipelined LM decode attention (CHORUS_ATTN_PIPE=1) on the GPU machine, in one call:
# the attention tests under both kernels, the music stage's CUDA tests (the invariance test at 1
# to 128 songs), then `chorus music-bench` (bf16, context 1000) under each, with one 64-song frame
# op by op under each. Expects .device-bin/ from scripts/device/build_bins.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
BIN=.device-bin
export RUST_BACKTRACE=1
status=0
section() { echo; echo "=================== $* ==================="; }
run_test() { "$BIN/$1" --test-threads=1 --nocapture "${@:2}" 2>&1 | grep -v '^$' | grep -v '^test .* ok$' || status=1; }
section "lm_attention, plain and pipelined decode kernels"
CHORUS_ATTN_PIPE=0 run_test lm_attention
CHORUS_ATTN_PIPE=1 run_test lm_attention
section "music_cuda (pipelined decode attention)"
CHORUS_ATTN_PIPE=1 run_test music_cuda cuda_bf16_song_is_bit_identical
CHORUS_ATTN_PIPE=1 run_test music_cuda cuda_teacher_forcing
for pipe in 0 1; do
  section "music-bench bf16, context 1000, CHORUS_ATTN_PIPE=$pipe"
  CHORUS_ATTN_PIPE=$pipe "$BIN"/chorus music-bench --device cuda --model random --songs ${AB_SONGS:-1,8,64,128} \
    --context 1000 --contexts 14000 --frames 10 2>&1 || status=1
  CHORUS_ATTN_PIPE=$pipe "$BIN"/chorus music-bench --device cuda --model random --songs 64 --context 1000 \
    --frames 3 --profile-frame 2>&1 | grep -E "paged_attention|^ +64 " || status=1
done
section "exit status: $status"
exit $status
