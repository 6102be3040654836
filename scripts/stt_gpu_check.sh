#!/usr/bin/env bash
# The STT stage's GPU check, run on the device machine from the repository root in one call: the
# sliding-window attention kernels against the CPU backend and the f64 reference (both STT head
# shapes on the decode kernel, the small model's on the general kernel), the rest of the paged
# attention tests (the window's kernel change must leave them as they were), then the STT stage
# on CUDA against the transformers oracle fixture (f32 and bf16 teacher forcing, f32 greedy
# tokens), at full size (random stt-1b-en_fr, bf16 against f32) and with PCM in (the in-frame
# Mimi encoder against the CPU encoder), then stt-bench at both real sizes and the 1B with
# Mimi's encoder in the step. Expects the binaries of scripts/device/build_bins.sh in
# .device-bin/. The STT test reads its fixture through the path it was built at: run from a
# checkout at that path (or link it there). Does not stop at a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.device-bin
source scripts/device/cuda_env.sh
status=0
section() { echo; echo "=================== $* ==================="; }
run_test() { if [ -x "$BIN/$1" ]; then "$BIN/$1" --test-threads=1 --nocapture "${@:2}" 2>&1 | grep -v '^$' || status=1; else echo "MISSING $BIN/$1"; status=1; fi; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
section "(a) sliding-window paged attention: CUDA vs CPU and f64"
run_test lm_attention window
section "(b) every other paged-attention test (window None)"
run_test lm_attention
section "(c) STT stage on CUDA vs the transformers oracle fixture; full-size bf16 vs f32"
run_test stt_cuda
section "(d) chorus stt-bench --device cuda: both real architectures, a full window"
"$BIN"/chorus stt-bench --device cuda --model random --streams "${STT_STREAMS:-1,64,256,1024}" --steps 10 2>&1 || status=1
"$BIN"/chorus stt-bench --device cuda --model random-2.6b --streams "${STT_STREAMS_2B6:-1,64,256,768}" --steps 10 2>&1 || status=1
section "(e) chorus stt-bench --device cuda --mimi random: PCM in, Mimi's encoder inside the step"
"$BIN"/chorus stt-bench --device cuda --model random --mimi random --streams "${STT_STREAMS_PCM:-1,64,256}" --steps 10 2>&1 || status=1
section "stt_gpu_check exit status: $status"
exit $status
