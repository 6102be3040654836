#!/usr/bin/env bash
# On the device machine: installs the wheel built by `maturin build` into .whl/ beside the
# machine's own torch, transformers and numpy (no network there), then runs
# python/tests/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/device/cuda_env.sh
site=/tmp/chorus-site
rm -rf "$site"
python3 -m pip install --quiet --no-index --no-deps --target "$site" .whl/chorus_audio-*.whl
PYTHONPATH="$site" PYTHONUNBUFFERED=1 python3 python/tests/gpu_check.py 2>&1 | grep -v -i "warning"
