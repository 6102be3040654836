#!/usr/bin/env bash
# Kyutai STT's LM step on the GPU machine, side by side in one call: `chorus stt-bench` (random
# weights of each model, bf16, every stream's window full, one graph replay per step; ms per
# step, real time and GB/s read against the copy bandwidth) with bf16 and 8-bit rings, then
# transformers' KyutaiSpeechToTextForConditionalGeneration on the same architecture
# (bench/stt_transformers_baseline.py: its LM step alone, batch 64 up to the largest that fits).
# Expects .device-bin/chorus (scripts/device/build_bins.sh). Settings: SIDE_1B_STREAMS
# (64,256,512,1024,1300), SIDE_FP8_STREAMS (1024,2500), SIDE_2B6_STREAMS (64,512,850),
# SIDE_HF_1B (64,128,256,512,1024), SIDE_HF_2B6 (64,128,256,512).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
bench() {
  "$BIN"/chorus stt-bench --device cuda --steps 10 "$@" 2>&1 | grep -v '^warning' || status=1
}
section "chorus stt-bench, stt-1b-en_fr (random), bf16 rings"
bench --model random --streams "${SIDE_1B_STREAMS:-64,256,512,1024,1300}"
section "chorus stt-bench, stt-1b-en_fr (random), 8-bit rings"
bench --model random --kv-cache fp8 --streams "${SIDE_FP8_STREAMS:-1024,2500}"
section "chorus stt-bench, stt-2.6b-en (random-2.6b), bf16 rings"
bench --model random-2.6b --streams "${SIDE_2B6_STREAMS:-64,512,850}"
section "transformers, stt-1b-en_fr architecture"
python3 bench/stt_transformers_baseline.py --model 1b --batches "${SIDE_HF_1B:-64,128,256,512,1024}" 2>&1 \
  | grep -v Warning || status=1
section "transformers, stt-2.6b-en architecture"
python3 bench/stt_transformers_baseline.py --model 2.6b --batches "${SIDE_HF_2B6:-64,128,256,512}" 2>&1 \
  | grep -v Warning || status=1
section "stt side by side exit status: $status"
exit $status
