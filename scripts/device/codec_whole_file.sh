#!/usr/bin/env bash
# On the device machine: whole files of 10 s and 60 s at batch 1, 8 and 64 through Chorus's
# long-chunk paths (`chorus bench --whole-file`, bf16 and f32), then transformers' whole-signal
# `MimiModel.encode` / `.decode` on the same random weights in the same call; first the CUDA
# encoder chunk test against the CPU. Binaries from scripts/device/build_bins.sh (add
# it lists encoder_chunk).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
if [ -x "$BIN/encoder_chunk" ]; then
  section "CUDA encoder chunks vs the CPU"
  "$BIN/encoder_chunk" --test-threads=1 --nocapture 2>&1 | grep -E "parity|identical|^test |test result|panicked" || status=1
fi
for p in ${WHOLE_PRECISIONS:-bf16 f32}; do
  section "chorus bench --whole-file ($p)"
  "$BIN"/chorus bench --whole-file --device cuda --model random --precision "$p" \
    --batch 1,8,64 --file-seconds 10,60 --n-q 8 --repeats 3 2>&1 | grep -v "^warning" || status=1
done
section "transformers whole-signal encode and decode (same weights)"
python3 scripts/device/codec_whole_hf_bench.py --device cuda --batches 1,8,64 --seconds 10,60 --n-q 8 || status=1
section "codec_whole_file exit status: $status"
exit $status
