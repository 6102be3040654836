"""The Python package on a CUDA machine: exactness and speed, printed as labelled figures.

Run by scripts/device/python_gpu_check.sh on the device machine (not collected by pytest: CI has
no GPU). Exits non-zero when a bound is missed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

import chorus

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
#: Exactness bounds (relative L2) of the Rust GPU checks.
F32_BOUND, BF16_BOUND = 1e-4, 2e-2
failures = []


def check(label: str, value: float, bound: float) -> None:
    ok = value <= bound
    print(f"{label}: {value:.3e} (bound {bound:.0e}) {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(label)


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def timed(fn, reps: int = 3) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def section(name: str) -> None:
    print(f"\n=== {name} ===", flush=True)


torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
print(f"chorus {chorus.__version__}, cuda_available={chorus.cuda_available()}, torch {torch.__version__}, "
      f"python {sys.version.split()[0]}, {torch.cuda.get_device_name()}")

section("(1) MimiDecoder on CUDA vs transformers fixtures")
for precision, bound in (("f32", F32_BOUND), ("bf16", BF16_BOUND)):
    dec = chorus.MimiDecoder("random", device="cuda", precision=precision, max_streams=64)
    print(dec)
    for case in ("hf_q8", "hf_q16", "hf_q32"):
        codes = np.load(FIX / f"{case}.codes.npy")
        ref = np.load(FIX / f"{case}.pcm.npy").reshape(1, -1)
        check(f"{precision} {case} rel L2", rel(dec.decode(codes), ref), bound)
    with dec.stream() as s:
        codes = np.load(FIX / "hf_q8.codes.npy")
        st = np.concatenate([s.decode(codes[:, t]) for t in range(codes.shape[1])])
    # Whole sequences run 16 frames per step, streams one: the same arithmetic, other shapes.
    check(f"{precision} streaming vs whole-sequence rel L2", rel(st, dec.decode(codes)[0]), bound)

section("(2) from_transformers with a CUDA MimiModel: cuda tensors in, cuda tensors out")
from transformers import MimiConfig, MimiModel  # noqa: E402

torch.manual_seed(0)
model = MimiModel(MimiConfig()).cuda().eval()
codes = torch.randint(0, 2048, (4, 8, 100), device="cuda")
with torch.no_grad():
    ref = model.decode(codes).audio_values[:, 0]
dec = chorus.from_transformers(model, device="cuda", precision="f32", max_streams=64)
out = dec.decode(codes)
print(f"output: {type(out).__name__} on {out.device}, {tuple(out.shape)} {out.dtype}")
if out.device.type != "cuda":
    failures.append("from_transformers output device")
check("from_transformers f32 rel L2 vs MimiModel.decode", rel(out.cpu(), ref.cpu()), F32_BOUND)

section("(3) speed: whole-sequence decode, 20 s of audio per stream (T = 250 frames, n_q = 8)")
fast = chorus.MimiDecoder("random", device="cuda", precision="bf16", max_streams=64)
hf32 = MimiModel(MimiConfig()).cuda().eval()
hf16 = MimiModel(MimiConfig()).cuda().eval().to(torch.bfloat16)
for b in (1, 64):
    c = torch.randint(0, 2048, (b, 8, 250), device="cuda")
    audio_s = b * 250 * 0.08
    t_ch = timed(lambda: fast.decode(c))
    with torch.no_grad():
        t_hf = timed(lambda: hf32.decode(c))
        t_h16 = timed(lambda: hf16.decode(c))
    print(f"B={b:3d}: chorus bf16 {t_ch * 1e3:8.1f} ms ({audio_s / t_ch:8.0f}x real time) | "
          f"transformers f32 {t_hf * 1e3:8.1f} ms ({audio_s / t_hf:7.0f}x) | "
          f"transformers bf16 {t_h16 * 1e3:8.1f} ms ({audio_s / t_h16:7.0f}x) | "
          f"speed-up {t_hf / t_ch:5.1f}x / {t_h16 / t_ch:5.1f}x", flush=True)

section("(3b) live streaming, one stream, 10 s (125 frames): cost of each new frame's audio")
c = torch.randint(0, 2048, (1, 8, 125), device="cuda")
whole_ref = fast.decode(c)[0]
with fast.stream() as s:
    s.decode(c[0, :, 0])
    torch.cuda.synchronize()
    t = time.perf_counter()
    live = torch.cat([s.decode(c[0, :, k]) for k in range(1, 125)])
    torch.cuda.synchronize()
    t_live = (time.perf_counter() - t) / 124
with torch.no_grad():
    hf_whole = hf32.decode(c).audio_values[0, 0]
    torch.cuda.synchronize()
    t = time.perf_counter()
    for k in range(1, 125):
        hf32.decode(c[:, :, : k + 1])  # exact streaming: re-decode the prefix for each new frame
    torch.cuda.synchronize()
    t_prefix = (time.perf_counter() - t) / 124
    t = time.perf_counter()
    parts = [hf32.decode(c[:, :, k : k + 1]).audio_values[0, 0] for k in range(125)]
    torch.cuda.synchronize()
    t_alone = (time.perf_counter() - t) / 125
    alone_err = rel(torch.cat(parts).cpu(), hf_whole.cpu())
live_err = rel(torch.cat([whole_ref[:1920], live]).cpu(), whole_ref.cpu())
print(f"chorus stream (bf16): {t_live * 1e3:.3f} ms per frame, exact streaming "
      f"(rel L2 {live_err:.1e} against its own whole-sequence decode)")
print(f"transformers f32, prefix re-decoded per frame (exact): {t_prefix * 1e3:.3f} ms per frame on average")
print(f"transformers f32, each frame decoded alone: {t_alone * 1e3:.3f} ms per frame, "
      f"rel L2 {alone_err:.2f} against the whole decode (not streaming-exact)")

section("(4) speed: streaming from Python, one frame per stream per step (dec.step)")
for n in (1, 64):
    streams = [fast.stream() for _ in range(n)]
    frame = {s: np.random.default_rng(i).integers(0, 2048, size=8) for i, s in enumerate(streams)}
    for _ in range(5):
        fast.step(frame)
    steps = 100
    t = time.perf_counter()
    for _ in range(steps):
        fast.step(frame)
    dt = (time.perf_counter() - t) / steps
    print(f"{n:3d} streams: {dt * 1e3:.3f} ms per step from Python, {n / dt:9.0f} frames/s "
          f"({n / dt * 0.08:7.0f} streams' worth of real time)", flush=True)
    for s in streams:
        s.close()

section("(5) MusicSemantic on CUDA: random-small f32 codes equal the CPU backend (noise mode)")
from safetensors.numpy import load_file  # noqa: E402

ref = load_file(str(FIX / "music" / "small_noise.safetensors"))
songs = {}
for device, precision in (("cpu", None), ("cuda", "f32")):
    st = chorus.MusicSemantic("random-small", device=device, precision=precision, max_songs=2, max_context=256)
    songs[device] = st.generate(prompt_ids=ref["prompt_ids"], seconds=2, seed=7, sampling="noise", allow_end=False)
same = np.array_equal(songs["cpu"].codes, songs["cuda"].codes)
oracle = np.array_equal(songs["cuda"].codes[:12], ref["codes"][1:13])
print(f"cuda f32 codes == cpu codes: {same}; first 12 == oracle: {oracle}")
if not (same and oracle):
    failures.append("music cuda vs cpu codes")

if not os.environ.get("PY_SKIP_FULL_MUSIC"):
    section("(6) MusicSemantic, real architecture (random weights), bf16: 2 songs x 4 s in one call")
    t = time.perf_counter()
    full = chorus.MusicSemantic("random", device="cuda", max_songs=2, max_context=1024)
    print(f"built in {time.perf_counter() - t:.1f} s: {full}")
    ids = np.random.default_rng(0).integers(1000, 100000, size=300)
    full.generate(prompt_ids=ids, seconds=1)
    t = time.perf_counter()
    out = full.generate(prompt_ids=[ids, ids], seconds=4, seed=[1, 2], allow_end=False)
    dt = time.perf_counter() - t
    fh = out[0].frame_hiddens
    print(f"frame_hiddens {tuple(fh.shape)} {fh.dtype}; codes {out[0].codes.shape}; "
          f"{2 * out[0].frames / dt:.1f} frames/s in all ({dt / out[0].frames * 1e3:.2f} ms per step of 2 songs, "
          f"prefill included)")
    if tuple(fh.shape) != (1, 100, 32768) or fh.dtype != torch.bfloat16:
        failures.append("full-size frame_hiddens shape")

section("python gpu_check result")
print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
