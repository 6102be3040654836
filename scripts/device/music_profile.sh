#!/usr/bin/env bash
# Where a frame's and a prefill's device time goes, on the GPU machine: `chorus music-bench` on
# random weights of the real architecture (bf16, then int8) with one frame per point and one
# warm prefill of PREFILL tokens (default 300) run op by op (`--profile-frame`,
# `--prefill-tokens`). Op times are each op alone (no overlap between kernels, unlike the graph).
# PROFILE_KV=fp8 profiles over the 8-bit KV cache. Expects .device-bin/chorus from scripts/device/build_bins.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
PREFILL=${PREFILL:-300}
for model in ${PROFILE_MODELS:-random random-int8}; do
  echo "=================== $model: songs ${PROFILE_SONGS:-1,8} at context 1000 ==================="
  "$BIN"/chorus music-bench --device cuda --model "$model" --songs "${PROFILE_SONGS:-1,8}" --context 1000 \
    ${PROFILE_KV:+--kv-cache $PROFILE_KV} --frames 10 --prefill-tokens "$PREFILL" --profile-frame 2>&1
done
