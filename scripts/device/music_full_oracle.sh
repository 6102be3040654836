#!/usr/bin/env bash
# Full-size MiniMax Music 3 semantic-stage oracle, on the GPU machine (one H200; fp32, TF32 off).
#
# Builds transformers' Qwen3ForCausalLM (4096 hidden, 36 layers, vocab 200000) and the RVQ depth
# decoder (4096, 4 layers) in float32 on the GPU, draws their 9.2e9 seeded random weights there
# (music_weights' torch backend, bit-identical to the numpy reference and to chorus_core::rng), and
# writes one teacher-forcing fixture, full_noise.safetensors (noise seed 7, END disallowed, the
# 33-token synthetic prompt, FRAMES emitted frames = FRAMES + 1 loop frames), for the Rust test
# `full_size_teacher_forcing_matches_the_oracle` (CHORUS_MUSIC_FULL_FIXTURE=<dir>/full_noise.safetensors).
#
# Usage, from the repository root: scripts/device/music_full_oracle.sh [OUT_DIR]   (default .device-out/full)
# Environment: FRAMES (default 6), PYTHON (default python3; needs torch, transformers, numpy, safetensors).
# Prints the time of every phase (CUDA init, model build, weight generation, generator check against
# numpy, prefill, each loop frame, self-checks, save). Needs about 40 GiB of GPU memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-.device-out/full}
FRAMES=${FRAMES:-6}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
"$PY" -c 'import torch, transformers, numpy, safetensors; print("torch", torch.__version__, "cuda", torch.version.cuda, "| transformers", transformers.__version__, "| numpy", numpy.__version__, "| safetensors", safetensors.__version__)'
start=$SECONDS
"$PY" -u tools/fixtures/music_oracle.py --config full --case full_noise --gen torch --device cuda \
  --frames "$FRAMES" --out "$OUT"
echo "music_full_oracle: $((SECONDS - start)) s wall, imports included"
ls -la "$OUT/full_noise.safetensors"
