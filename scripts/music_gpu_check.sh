#!/usr/bin/env bash
# The music stage's GPU check, run on the device machine from the repository root in one call:
# the LM ops on CUDA against the CPU backend, the whole stage against the oracle fixtures (f32 and
# bf16) and the CPU backend, then the benchmarks (random weights of the real architecture) with
# the PyTorch seed design and the copy bandwidth measured in the same call. Expects the binaries
# of scripts/device/build_bins.sh in .device-bin/. Prints labelled results; does not stop at a
# failure.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.device-bin
source scripts/device/cuda_env.sh
export RUST_BACKTRACE=1
status=0
section() { echo; echo "=================== $* ==================="; }
run_test() { if [ -x "$BIN/$1" ]; then "$BIN/$1" --test-threads=1 --nocapture 2>&1 | grep -v '^$' || status=1; else echo "MISSING $BIN/$1"; status=1; fi; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
section "(a) LM ops: CUDA vs CPU backend (f32 <= 1e-4, bf16 <= 2e-2), kernel compile check"
for t in nvrtc_compile lm_rows lm_attention lm_gemv; do run_test "$t"; done
section "(a') Mimi ops and decoder still agree (the linear op now takes the GEMV kernel for few rows)"
for t in ops decoder; do run_test "$t"; done
section "(b) music stage on CUDA vs the PyTorch oracle fixtures and the CPU backend"
run_test music_cuda
section "(c) copy bandwidth (torch device-to-device copy of 4 GiB)"
python3 - <<'PY' || status=1
import torch
a = torch.empty(1 << 31, dtype=torch.int16, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): b.copy_(a)
e.record(); torch.cuda.synchronize()
ms = s.elapsed_time(e) / 20
print(f"copy bandwidth: {2 * a.numel() * 2 / ms / 1e9:.0f} GB/s (read + write of {a.numel() * 2 / 2**30:.0f} GiB in {ms:.2f} ms)")
PY
section "(d) chorus music-bench --device cuda --model random (bf16): songs at context 1000, contexts at 1 song"
if [ -x "$BIN"/chorus ]; then
  "$BIN"/chorus music-bench --device cuda --model random --songs ${MUSIC_SONGS:-1,2,4,8,16,32,64,128} --context 1000 \
    --contexts ${MUSIC_CONTEXTS:-300,4000,14000} --frames 10 2>&1 || status=1
else echo "MISSING $BIN/chorus"; status=1; fi
section "(e) the PyTorch seed design, same machine (one song; N songs take N times as long)"
for c in 1000; do PYTHONUNBUFFERED=1 python3 bench/music_seed_baseline.py --context $c --frames 30 2>&1 | grep -v Warning || status=1; done
section "music_gpu_check exit status: $status"
exit $status
