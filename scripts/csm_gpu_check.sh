#!/usr/bin/env bash
# The CSM speech stage's GPU check, run on the device machine from the repository root in one
# call: the stage against the oracle fixtures on CUDA (f32 and bf16 teacher forcing, f32 free
# running), the LM row ops it added against the CPU backend, then the benchmark on random weights
# of csm-1b's architecture (bf16; with and without the in-frame Mimi decode; time to first audio)
# beside transformers' CsmForConditionalGeneration.generate on the same architecture. Expects the binaries of scripts/device/build_bins.sh in .device-bin/.
# Prints labelled results; does not stop at a failure. TTS_UTTERANCES, TTS_CONTEXT, HF_BATCHES
# and HF_FRAMES set the sweeps.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.device-bin
source scripts/device/cuda_env.sh
status=0
section() { echo; echo "=================== $* ==================="; }
run_test() { if [ -x "$BIN/$1" ]; then "$BIN/$1" --test-threads=1 --nocapture "${@:2}" 2>&1 | grep -v '^$' || status=1; else echo "MISSING $BIN/$1"; status=1; fi; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
section "(a) CSM stage on CUDA vs the transformers oracle fixtures"
run_test csm_cuda
section "(b) embed_sum and the guidance-free draw: CUDA vs CPU backend"
run_test lm_rows embed_sum
run_test lm_attention draw
section "(c) chorus tts-bench --device cuda --model random (bf16, Mimi decode in every frame)"
"$BIN"/chorus tts-bench --device cuda --model random --utterances "${TTS_UTTERANCES:-1,8,64,256}" \
  --context "${TTS_CONTEXT:-200}" --frames 10 2>&1 || status=1
section "(c2) the same without the in-frame Mimi decode (the language model alone)"
"$BIN"/chorus tts-bench --device cuda --model random --no-audio --utterances 1,64 \
  --context "${TTS_CONTEXT:-200}" --frames 10 2>&1 || status=1
section "(c3) time to first audio of a 40-token prompt, alone and beside 64 running utterances"
"$BIN"/chorus tts-bench --device cuda --model random --utterances 1,65 --context "${TTS_CONTEXT:-200}" \
  --frames 5 --ttfa-prompt 40 2>&1 || status=1
section "(d) transformers CsmForConditionalGeneration.generate, same architecture, same machine"
PYTHONUNBUFFERED=1 python3 bench/csm_transformers_baseline.py --batches "${HF_BATCHES:-1,8,64}" \
  --frames "${HF_FRAMES:-20}" --prompt 40 2>&1 | grep -v "\[transformers\]" || status=1
section "csm_gpu_check exit status: $status"
exit $status
