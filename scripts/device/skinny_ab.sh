#!/usr/bin/env bash
# The skinny-product kernel on the device machine, in one call: the fused products against the CPU
# backend (every epilogue, norm, dense and int8), their batch invariance in bits, the bandwidth by
# row count beside the ops apart, the LM and codec product tests it touches, the music stage's CUDA
# tests, the copy bandwidth, then `chorus music-bench` with the kernel on and off
# (CHORUS_SKINNY=1/0), bf16 and int8. Expects scripts/device/build_bins.sh's binaries in
# .device-bin/. Usage: scripts/device/skinny_ab.sh [SONGS] [INT8_SONGS]. Prints labelled results.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=.device-bin
SONGS=${1:-1,2,8,32,64,128}
INT8_SONGS=${2:-1,8,32}
source scripts/device/cuda_env.sh
export RUST_BACKTRACE=1
status=0
section() { echo; echo "=================== $* ==================="; }
run_test() { section "$1"; "$BIN/$1" --test-threads=1 --nocapture 2>&1 | grep -v '^$' || status=1; }
section machine
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
for t in nvrtc_compile lm_skinny lm_q8 lm_gemv lm_rows music_cuda; do run_test "$t"; done
section "copy bandwidth (torch device-to-device copy of 4 GiB)"
python3 - <<'PY' || status=1
import torch
a = torch.empty(1 << 31, dtype=torch.int16, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): b.copy_(a)
e.record(); torch.cuda.synchronize()
ms = s.elapsed_time(e) / 20
print(f"copy bandwidth: {2 * a.numel() * 2 / (ms * 1e-3) / 1e9:.0f} GB/s")
PY
for sk in 1 0; do
  section "music-bench bf16, CHORUS_SKINNY=$sk"
  CHORUS_SKINNY=$sk "$BIN"/chorus music-bench --device cuda --model random --songs "$SONGS" --context 1000 --frames 10 2>&1 || status=1
done
for sk in 1 0; do
  section "music-bench int8, CHORUS_SKINNY=$sk"
  CHORUS_SKINNY=$sk "$BIN"/chorus music-bench --device cuda --model random-int8 --songs "$INT8_SONGS" --context 1000 --frames 10 2>&1 || status=1
done
section "skinny_ab exit status: $status"
exit $status
