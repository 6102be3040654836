#!/usr/bin/env bash
# The GPU check, run on the device machine from the repository root in one call. It expects the
# release binaries built on the development machine in .device-bin/ (see scripts/device/build_bins.sh):
# the chorus-cuda test executables, replay_bench, the chorus CLI, and a copy of the seed design
# static_mimi_reference.py. It prints clearly labelled results; it does not stop at a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.device-bin
# The CUDA libraries: the toolkit's, then the ones PyTorch's wheels ship.
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
[ -d /usr/local/cuda/include ] && export CHORUS_CUDA_INCLUDE=/usr/local/cuda/include
export RUST_BACKTRACE=1
status=0
section() { echo; echo "=================== $* ==================="; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
section "(a) CUDA op parity tests and kernel compile check"
for t in "$BIN"/nvrtc_compile "$BIN"/ops; do
  [ -x "$t" ] || { echo "MISSING $t"; status=1; continue; }
  "$t" --test-threads=1 --nocapture 2>&1 || status=1
done
section "(b) whole-decoder parity: CUDA vs CPU backend"
if [ -x "$BIN"/decoder ]; then "$BIN"/decoder --test-threads=1 --nocapture 2>&1 || status=1; else echo "MISSING $BIN/decoder"; fi
section "(b') oracle fixtures"
if [ -x "$BIN"/oracle ]; then "$BIN"/oracle --test-threads=1 --nocapture 2>&1 || status=1; else echo "no oracle test binary"; fi
section "(c) chorus bench --device cuda --model random"
if [ -x "$BIN"/chorus ]; then
  for p in bf16 f32; do
    "$BIN"/chorus bench --device cuda --model random --batch 1,64,1024 --n-q 8 --precision "$p" --seconds 2 2>&1 || status=1
  done
else echo "MISSING $BIN/chorus"; fi
section "(c') replay_bench: device time per step and per-op breakdown"
if [ -x "$BIN"/replay_bench ]; then
  for p in bf16 f32; do "$BIN"/replay_bench "$p" 1,64,1024 100 2>&1 || status=1; done
else echo "MISSING $BIN/replay_bench"; fi
section "(d) the PyTorch seed design, same machine"
if [ -f "$BIN"/static_mimi_reference.py ]; then
  for p in bf16 fp32; do
    PYTHONUNBUFFERED=1 python3 scripts/device/time_seed.py "$BIN"/static_mimi_reference.py --dtype "$p" 2>&1 | grep -v Warning || status=1
  done
else echo "MISSING $BIN/static_mimi_reference.py (copy /work/shared/seeds/static_mimi_reference.py there)"; fi
section "gpu_check exit status: $status"
exit $status
