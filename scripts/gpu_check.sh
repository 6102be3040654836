#!/usr/bin/env bash
# The GPU check, run on the device machine from the repository root in one call. It expects the
# release binaries built on the development machine in .device-bin/ (see scripts/device/build_bins.sh):
# the chorus-cuda test executables, replay_bench, the chorus CLI, and a copy of the seed design
# static_mimi_reference.py. It prints clearly labelled results; it does not stop at a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.device-bin
source scripts/device/cuda_env.sh
export RUST_BACKTRACE=1
status=0
section() { echo; echo "=================== $* ==================="; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
section "(a) CUDA op parity tests and kernel compile check"
for t in "$BIN"/nvrtc_compile "$BIN"/ops "$BIN"/res_block; do
  [ -x "$t" ] || { echo "MISSING $t"; status=1; continue; }
  "$t" --test-threads=1 --nocapture 2>&1 || status=1
done
section "(b) whole-decoder parity: CUDA vs CPU backend"
if [ -x "$BIN"/decoder ]; then "$BIN"/decoder --test-threads=1 --nocapture 2>&1 || status=1; else echo "MISSING $BIN/decoder"; fi
section "(b') oracle fixtures"
if [ -x "$BIN"/oracle ]; then "$BIN"/oracle --test-threads=1 --nocapture 2>&1 || status=1; else echo "no oracle test binary"; fi
section "(b'') encoder: CUDA vs CPU, and vs transformers MimiModel.encode"
if [ -x "$BIN"/encoder ]; then "$BIN"/encoder --test-threads=1 --nocapture 2>&1 || status=1; else echo "MISSING $BIN/encoder"; fi
section "(c) chorus bench --device cuda --model random"
if [ -x "$BIN"/chorus ]; then
  "$BIN"/chorus bench --device cuda --model random --batch 1,2,4,8,16,32,64,128,256,512,1024 --n-q 8 --precision bf16 --seconds 1 2>&1 || status=1
  "$BIN"/chorus bench --device cuda --model random --batch 1,64,1024 --n-q 8 --precision f32 --seconds 1 2>&1 || status=1
else echo "MISSING $BIN/chorus"; fi
section "(c') replay_bench: device time per step and per-op breakdown"
if [ -x "$BIN"/replay_bench ]; then
  for p in bf16 f32; do "$BIN"/replay_bench "$p" 1,64,1024 100 2>&1 || status=1; done
  # A/B, same call, each against the default: the upsampling as transposed convolutions;
  # attention on the CUDA cores; bias and residual in a second pass instead of the products'
  # epilogues; residual blocks as two convolutions; the wide tensor-core kernel (off by default).
  "$BIN"/replay_bench bf16 1,64,1024 100 mma-transposed 2>&1 || status=1
  "$BIN"/replay_bench bf16 1,64,1024 100 mma-scalar-attn 2>&1 || status=1
  REPLAY_GEMM_EPILOGUE=0 "$BIN"/replay_bench bf16 1,64,1024 100 2>&1 || status=1
  "$BIN"/replay_bench bf16 1,64,1024 100 mma-apart 2>&1 || status=1
  "$BIN"/replay_bench bf16 1,64,1024 100 mma-wide 2>&1 || status=1
  # The default again, last: the spread between the first and last run of one build.
  "$BIN"/replay_bench bf16 1,64,1024 100 2>&1 || status=1
else echo "MISSING $BIN/replay_bench"; fi
section "(e) encoder: chorus bench --encode, then transformers' encoder in the same call"
if [ -x "$BIN"/chorus ]; then
  "$BIN"/chorus bench --encode --device cuda --model random --batch 1,64,1024 --n-q 8 --precision bf16 --seconds 1 2>&1 || status=1
  "$BIN"/chorus bench --encode --device cuda --model random --batch 1,64,1024 --n-q 8 --precision f32 --seconds 1 2>&1 || status=1
  "$BIN"/chorus bench --encode --device cuda --model random --batch 1,64,1024 --n-q 32 --precision bf16 --seconds 1 2>&1 || status=1
else echo "MISSING $BIN/chorus"; fi
PYTHONUNBUFFERED=1 python3 scripts/device/encoder_hf_bench.py --batches 1,64,1024 --frames 125 2>&1 | grep -v Warning || status=1
section "(d) the PyTorch seed design, same machine"
if [ -f "$BIN"/static_mimi_reference.py ]; then
  for p in bf16 fp32; do
    PYTHONUNBUFFERED=1 python3 scripts/device/time_seed.py "$BIN"/static_mimi_reference.py --dtype "$p" 2>&1 | grep -v Warning || status=1
  done
else echo "MISSING $BIN/static_mimi_reference.py (copy /work/shared/seeds/static_mimi_reference.py there)"; fi
section "gpu_check exit status: $status"
exit $status
