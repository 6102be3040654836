#!/usr/bin/env bash
# The music stage's GPU check, run on the device machine from the repository root in one call:
# the whole stage against the oracle fixtures (random-small in f32 and bf16, and the full-size
# fixture when CHORUS_MUSIC_FULL_FIXTURE names one, made by scripts/device/music_full_oracle.sh)
# and the CPU backend, the benchmarks (random weights of the real architecture) with the copy
# bandwidth and the PyTorch seed design measured in the same call, then the LM ops against the
# CPU backend. Expects the binaries of scripts/device/build_bins.sh in .device-bin/. Prints
# labelled results; does not stop at a failure. MUSIC_INVARIANT_SONGS and MUSIC_INT8_SONGS set the
# song counts of the batch-invariant and int8 sweeps (empty: skipped).
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
section "(a) music stage on CUDA vs the PyTorch oracle fixtures and the CPU backend"
run_test music_cuda
section "(b) copy bandwidth (torch device-to-device copy of 4 GiB)"
python3 - <<'PY' || status=1
import torch
a = torch.empty(1 << 31, dtype=torch.int16, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): b.copy_(a)
e.record(); torch.cuda.synchronize()
ms = s.elapsed_time(e) / 20
print(f"copy bandwidth: {2 * a.numel() * 2 / (ms * 1e-3) / 1e9:.0f} GB/s (read + write of {a.numel() * 2 / 2**30:.0f} GiB in {ms:.2f} ms)")
PY
section "(c) chorus music-bench --device cuda --model random (bf16): songs at context 1000, contexts at 1 song"
if [ -x "$BIN"/chorus ]; then
  "$BIN"/chorus music-bench --device cuda --model random --songs ${MUSIC_SONGS:-1,2,4,8,16,32,64,128} --context 1000 \
    --contexts ${MUSIC_CONTEXTS:-300,4000,14000} --frames 10 2>&1 || status=1
else echo "MISSING $BIN/chorus"; status=1; fi
INVARIANT_SONGS=${MUSIC_INVARIANT_SONGS-1,2,8,32}
INT8_SONGS=${MUSIC_INT8_SONGS-1,2,8,16,32,64}
if [ -x "$BIN"/chorus ] && [ -n "$INVARIANT_SONGS" ]; then
  section "(c2) chorus music-bench --batch-invariant (bf16, every product on the skinny kernel, fixed attention splits)"
  "$BIN"/chorus music-bench --device cuda --model random --batch-invariant --songs "$INVARIANT_SONGS" \
    --context 1000 --frames 10 2>&1 || status=1
fi
if [ -x "$BIN"/chorus ] && [ -n "$INT8_SONGS" ]; then
  section "(c3) chorus music-bench --model random-int8 (W8A16 on the skinny kernel)"
  "$BIN"/chorus music-bench --device cuda --model random-int8 --songs "$INT8_SONGS" \
    --context 1000 --frames 10 2>&1 || status=1
fi
section "(d) the PyTorch seed design, same machine (one song; N songs take N times as long)"
PYTHONUNBUFFERED=1 python3 bench/music_seed_baseline.py --context 1000 --frames 30 2>&1 | grep -v Warning || status=1
if [ -n "${MUSIC_SKIP_OPS:-}" ]; then section "music_gpu_check exit status: $status"; exit $status; fi
section "(e) LM ops: CUDA vs CPU backend (f32 <= 1e-4, bf16 <= 2e-2), skinny-kernel batch invariance and bandwidth by row count, kernel compile check"
for t in ${MUSIC_OP_TESTS:-lm_skinny lm_q8 lm_gemv lm_rows lm_attention nvrtc_compile}; do run_test "$t"; done
section "(f) Mimi decoder still agrees (its linears now take the GEMV kernel for few rows)"
run_test decoder
section "music_gpu_check exit status: $status"
exit $status
