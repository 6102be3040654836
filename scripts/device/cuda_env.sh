# Sourced on the GPU machine: puts the CUDA toolkit's libraries, then the ones PyTorch's wheels
# ship, on LD_LIBRARY_PATH, and points NVRTC at the toolkit's headers.
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
[ -d /usr/local/cuda/include ] && export CHORUS_CUDA_INCLUDE=/usr/local/cuda/include
