#!/usr/bin/env bash
# Installs NVRTC 13.0 and the CUDA runtime headers from their pip wheels (no GPU needed) and prints
# the `export` lines that let chorus-cuda's kernel compile check find them. Usage:
#   eval "$(bash scripts/ci_nvrtc_env.sh)"
set -euo pipefail
PY="${PYTHON:-python3}"
"$PY" -m pip install -q "nvidia-cuda-nvrtc==13.0.*" "nvidia-cuda-runtime==13.0.*" >&2
ROOT="$("$PY" - <<'PYEOF'
import os, nvidia
for base in nvidia.__path__:
    for sub in ("cu13", "cuda_nvrtc"):
        lib = os.path.join(base, sub, "lib")
        if os.path.isdir(lib) and any(f.startswith("libnvrtc.so") for f in os.listdir(lib)):
            print(os.path.join(base, sub))
            raise SystemExit
raise SystemExit("libnvrtc not found in the nvidia wheels")
PYEOF
)"
echo "export LD_LIBRARY_PATH=\"$ROOT/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
echo "export CHORUS_CUDA_INCLUDE=\"$ROOT/include\""
echo "export CHORUS_REQUIRE_NVRTC=1"
