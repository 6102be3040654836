# Sourced by every script on the GPU machine (from the repository root): puts the CUDA toolkit's
# libraries, then the ones PyTorch's wheels ship, on LD_LIBRARY_PATH, and points NVRTC at the
# toolkit's headers.
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
[ -d /usr/local/cuda/include ] && export CHORUS_CUDA_INCLUDE=/usr/local/cuda/include
# What every device script shares: the binaries' folder (scripts/device/build_bins.sh), the
# exit status that failed sections set, and section headers.
BIN=${BIN:-.device-bin}
# Binaries carried packed (scripts/device/build_bins.sh) are unpacked once per pack.
if [ -f .device-pack/bins.tar.xz ] && [ .device-pack/bins.tar.xz -nt "$BIN/.unpacked" ]; then
  mkdir -p "$BIN"
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" \
    .device-pack/bins.tar.xz "$BIN" && touch "$BIN/.unpacked"
fi
status=0
section() { echo; echo "=================== $* ==================="; }
