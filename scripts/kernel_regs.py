#!/usr/bin/env python3
"""Registers, spills and shared memory of each kernel, from NVRTC's ptxas report (no GPU needed).

Usage: eval "$(bash scripts/ci_nvrtc_env.sh)"; python3 scripts/kernel_regs.py [name-filter] [bf16|f32]
"""
import ctypes
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS_RS = os.path.join(ROOT, "crates/chorus-cuda/src/kernels.rs")


def sources():
    text = open(KERNELS_RS).read()
    names = re.findall(r'include_str!\("\.\./kernels/([^"]+)"\)', text)
    return "\n".join(open(os.path.join(ROOT, "crates/chorus-cuda/kernels", n)).read() for n in names)


def main():
    flt = sys.argv[1] if len(sys.argv) > 1 else ""
    bf16 = (sys.argv[2] if len(sys.argv) > 2 else "bf16") == "bf16"
    lib = None
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if f.startswith("libnvrtc.so"):
                lib = ctypes.CDLL(os.path.join(d, f))
                break
        if lib:
            break
    if lib is None:
        raise SystemExit("libnvrtc not found on LD_LIBRARY_PATH (see scripts/ci_nvrtc_env.sh)")
    prog = ctypes.c_void_p()
    src = sources().encode()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"chorus_kernels.cu", 0, None, None) == 0
    opts = [b"--gpu-architecture=sm_90a", b"--std=c++17", b"-DCHORUS_BF16=%d" % bf16, b"--ptxas-options=-v"]
    inc = os.environ.get("CHORUS_CUDA_INCLUDE")
    if inc:
        opts.append(b"-I" + inc.encode())
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if rc != 0:
        raise SystemExit(text)
    current = None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = m.group(1)
        if current and flt in current and ("Used" in line or "spill" in line):
            print(f"{current}: {line.split('info    :')[-1].strip()}")


if __name__ == "__main__":
    main()
