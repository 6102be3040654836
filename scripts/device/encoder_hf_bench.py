"""Throughput of transformers' Mimi ENCODER (`MimiModel.encode`, 32 codebooks) on the random-weight
model of the encoder oracle fixtures (tools/fixtures/weightgen.py, decoder + encoder tensors, the
same weights as tests/fixtures/encoder), in fp32 (TF32 off) and bf16 (`model.to(bfloat16)`: the
codebooks too). 1 frame = 1920 samples at 24 kHz (12.5 frames/s).

(a) mode=whole: `model.encode(x[B, 1, T * 1920], num_quantizers=32)`, one call on B signals of T
    frames. A batch too large for memory is run in chunks (halved on each out-of-memory until it
    fits; the chunk used is printed, and ms covers all chunks).
(b) mode=stream: one frame (1920 samples) per call at batch B, transformers' own streaming
    encode (5.17: `use_streaming=True`, the returned `padding_cache` and
    `encoder_past_key_values` fed back); ms is the median per call after warm-up, and
    frames_per_s = B / (ms / 1000). Once (B = 1, fp32) the streamed codes are compared with a
    whole-signal encode of the same frames (`stream_check` line).

Timing: CUDA events (synchronised) on cuda, perf_counter on cpu; warm-up calls, then the median of
--runs runs. One line per configuration:

    hf_encode mode=whole dtype=f32 batch=64 frames=125 chunk=64 ms=... frames_per_s=...
    hf_encode mode=stream dtype=bf16 batch=64 frames=1 ms=... frames_per_s=...

A configuration that does not fit even at chunk 1 prints `oom`; configurations past --budget-s are
printed as `skipped`.

Usage (repository root, GPU machine: torch 2.11, transformers 5.17, no network):
    python3 scripts/device/encoder_hf_bench.py                       # B 1,64,1024, T 125, both dtypes
    python3 scripts/device/encoder_hf_bench.py --device cpu --batches 1,2 --frames 4   # smoke test
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "fixtures"))
import weightgen as wg  # noqa: E402
from make_encoder_fixtures import build_model  # noqa: E402

SAMPLES_PER_FRAME = 1920
N_Q = 32


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device):
    """Milliseconds of one fn() call."""
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        sync(device)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def reset_embed(model):
    for rvq in (model.quantizer.semantic_residual_vector_quantizer, model.quantizer.acoustic_residual_vector_quantizer):
        for layer in rvq.layers:
            layer.codebook._embed = None


def is_oom(e):
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def free(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()


def signals(batch, frames, dtype, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = 0.1 * torch.randn(batch, 1, frames * SAMPLES_PER_FRAME, generator=g)
    return x.to(device=device, dtype=dtype)


def bench_whole(model, batch, frames, dtype, device, args):
    x = signals(batch, frames, dtype, device)
    chunk = batch

    def run():
        with torch.inference_mode():
            for s in range(0, batch, chunk):
                model.encode(x[s : s + chunk], num_quantizers=N_Q, return_dict=True)

    while True:
        try:
            for _ in range(args.warmup):
                run()
            sync(device)
            times = [timed(run, device) for _ in range(args.runs)]
            return chunk, statistics.median(times)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            if not is_oom(e) or chunk == 1:
                if is_oom(e):
                    free(device)
                    return None, None
                raise
            free(device)
            chunk = max(1, chunk // 2)


def stream_encode(model, x, steps):
    """Streams x [B, 1, >= steps * 1920] one frame per call; returns (codes [B, 32, steps], per-call ms
    list is filled by the caller)."""
    pc, pkv = None, None
    out_codes = []
    for f in range(steps):
        out = model.encode(
            x[..., f * SAMPLES_PER_FRAME : (f + 1) * SAMPLES_PER_FRAME],
            num_quantizers=N_Q,
            padding_cache=pc,
            encoder_past_key_values=pkv,
            use_streaming=True,
            return_dict=True,
        )
        pc, pkv = out.padding_cache, out.encoder_past_key_values
        out_codes.append(out.audio_codes)
    return torch.cat(out_codes, dim=-1)


def bench_stream(model, batch, dtype, device, args):
    steps = args.stream_warmup + args.stream_steps
    x = signals(batch, steps, dtype, device, seed=1)
    times = []
    try:
        with torch.inference_mode():
            for _ in range(2):  # the first pass warms up allocator / kernels
                times = []
                pc, pkv = None, None
                for f in range(steps):
                    frame = x[..., f * SAMPLES_PER_FRAME : (f + 1) * SAMPLES_PER_FRAME]
                    holder = {}

                    def call():
                        holder["out"] = model.encode(
                            frame,
                            num_quantizers=N_Q,
                            padding_cache=pc,
                            encoder_past_key_values=pkv,
                            use_streaming=True,
                            return_dict=True,
                        )

                    ms = timed(call, device)
                    out = holder["out"]
                    if out.audio_codes.shape[-1] != 1:
                        raise SystemExit(f"streaming call returned {out.audio_codes.shape[-1]} frames, expected 1")
                    pc, pkv = out.padding_cache, out.encoder_past_key_values
                    if f >= args.stream_warmup:
                        times.append(ms)
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        if is_oom(e):
            free(device)
            return None
        raise
    return statistics.median(times)


def stream_check(model, frames, device):
    x = signals(1, frames, torch.float32, device, seed=2)
    with torch.inference_mode():
        whole = model.encode(x, num_quantizers=N_Q, return_dict=True).audio_codes
        streamed = stream_encode(model, x, frames)
    eq = (whole == streamed).float()
    print(
        f"stream_check dtype=f32 batch=1 frames={frames} codes_equal_frac={eq.mean().item():.4f} "
        f"level0_equal_frac={eq[:, 0].mean().item():.4f} first_diff_frame="
        f"{int((eq.min(dim=1).values[0] < 1).nonzero()[0]) if eq.min() < 1 else -1}",
        flush=True,
    )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batches", default="1,64,1024")
    p.add_argument("--frames", type=int, default=125, help="frames per signal, whole mode (125 = 10 s)")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--modes", default="whole,stream")
    p.add_argument("--runs", type=int, default=3, help="timed runs (median), whole mode")
    p.add_argument("--warmup", type=int, default=1, help="warm-up runs, whole mode")
    p.add_argument("--stream-steps", type=int, default=12, help="timed streaming calls (median)")
    p.add_argument("--stream-warmup", type=int, default=3, help="streaming calls before timing")
    p.add_argument("--check-frames", type=int, default=8, help="frames of the stream_check (0: skip)")
    p.add_argument("--attn", default="eager", help="attention implementation (eager, sdpa)")
    p.add_argument("--budget-s", type=float, default=170.0, help="skip configurations after this many seconds")
    args = p.parse_args()

    t_start = time.perf_counter()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"# torch {torch.__version__} transformers {transformers.__version__} device {name} attn {args.attn}", flush=True)
    t0 = time.perf_counter()
    model_f32, _ = build_model("hf", wg.RANDOM_MODEL_SEED, torch.device("cpu"))
    if args.attn != "eager":
        model_f32.set_attn_implementation(args.attn)
    models = {}
    dtypes = args.dtypes.split(",")
    for dt in dtypes:
        m = model_f32 if dt == "f32" else copy.deepcopy(model_f32).to(torch.bfloat16)
        m = m.to(device).eval()
        reset_embed(m)
        models[dt] = m
    print(f"# model built in {time.perf_counter() - t0:.1f} s (weights: tools/fixtures/weightgen.py, seed {wg.RANDOM_MODEL_SEED:#x})", flush=True)
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}
    batches = [int(b) for b in args.batches.split(",")]
    modes = args.modes.split(",")

    if "stream" in modes and args.check_frames > 0 and "f32" in models:
        stream_check(models["f32"], args.check_frames, device)

    for mode in modes:
        for dt in dtypes:
            for b in batches:
                label = f"hf_encode mode={mode} dtype={dt} batch={b}"
                if time.perf_counter() - t_start > args.budget_s:
                    print(f"{label} skipped (past --budget-s {args.budget_s:.0f})", flush=True)
                    continue
                model = models[dt]
                if mode == "whole":
                    chunk, ms = bench_whole(model, b, args.frames, torch_dtype[dt], device, args)
                    if ms is None:
                        print(f"{label} frames={args.frames} oom", flush=True)
                        continue
                    fps = b * args.frames / (ms / 1e3)
                    print(f"{label} frames={args.frames} chunk={chunk} ms={ms:.2f} frames_per_s={fps:.1f}", flush=True)
                elif mode == "stream":
                    ms = bench_stream(model, b, torch_dtype[dt], device, args)
                    if ms is None:
                        print(f"{label} frames=1 oom", flush=True)
                        continue
                    print(f"{label} frames=1 ms={ms:.3f} frames_per_s={b / (ms / 1e3):.1f}", flush=True)
                else:
                    raise SystemExit(f"unknown mode {mode}")
                free(device)
    print(f"# total {time.perf_counter() - t_start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
