#!/usr/bin/env bash
# Chunked prefill on the GPU machine, in one call: the music stage's CUDA tests (chunked equals
# whole prefill, the batch-invariant song test at 1 to 128 songs), the LM op tests the chunk
# touches (first_token in attention and RoPE, the skinny kernel's row groups), then
# `chorus music-bench` timing the running songs' frames while a 300-token song joins
# (`--join-songs`), the batch-invariant mode's cost at 64 and 128 songs, and one 64-song frame op by
# op. Expects .device-bin/ from scripts/device/build_bins.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
export RUST_BACKTRACE=1
run_test() { "$BIN/$1" --test-threads=1 --nocapture "${@:2}" 2>&1 | grep -v '^$' || status=1; }
section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
section "music_cuda"
run_test music_cuda
section "lm_attention prefill (first_token), lm_rows rope (first_token), lm_skinny (row groups)"
run_test lm_attention prefill
run_test lm_rows rope
run_test lm_skinny fused_products_match_the_cpu
run_test lm_skinny a_rows_bits
section "join: bf16, context 1000, a 300-token song joining 1, 8 and 64 running songs"
"$BIN"/chorus music-bench --device cuda --model random --songs ${JOIN_POINTS:-1,3,8,10,64,66} --context 1000 \
  --frames 10 --prefill-tokens 300 --join-songs ${JOIN_SONGS:-1,8,64} 2>&1 || status=1
if [ -n "${INVARIANT_SONGS:-1,8,64,128}" ]; then
  section "batch-invariant mode: bf16, context 1000"
  "$BIN"/chorus music-bench --device cuda --model random --batch-invariant --songs ${INVARIANT_SONGS:-1,8,64,128} \
    --context 1000 --frames 5 2>&1 || status=1
fi
section "one 64-song frame op by op (bf16, context 1000)"
"$BIN"/chorus music-bench --device cuda --model random --songs 64 --context 1000 --frames 5 --profile-frame 2>&1 || status=1
section "exit status: $status"
exit $status
