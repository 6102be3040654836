"""Whole-signal Mimi encode and decode in transformers (`MimiModel.encode` / `.decode`, one call on
B signals of S seconds) on the random-weight model of the encoder oracle fixtures (the weights of
`chorus ... --model random`), the peer of `chorus bench --whole-file`. fp32 (TF32 off) and bf16;
CUDA events on cuda, perf_counter on cpu; one warm-up, then the best of --runs. One line per cell:

    hf_whole op=encode dtype=f32 batch=8 seconds=10 n_q=8 ms=... frames_per_s=...

Usage (repository root; torch 2.11, transformers 5.17):
    python3 scripts/device/codec_whole_hf_bench.py --device cuda
    python3 scripts/device/codec_whole_hf_bench.py --device cpu --dtypes f32 --batches 1,8
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from encoder_hf_bench import build_model, free, is_oom, reset_embed, signals, sync, timed, wg  # noqa: E402

FRAME_RATE = 12.5


def best(fn, device, runs):
    fn()
    sync(device)
    return min(timed(fn, device) for _ in range(runs))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batches", default="1,8,64")
    p.add_argument("--seconds", default="10,60")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--n-q", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    import transformers

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    print(f"# torch {torch.__version__} transformers {transformers.__version__} device {name}", flush=True)
    base, _ = build_model("hf", wg.RANDOM_MODEL_SEED, torch.device("cpu"))
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    for dt in args.dtypes.split(","):
        model = base if dt == "f32" else copy.deepcopy(base).to(torch.bfloat16)
        model = model.to(device).eval()
        reset_embed(model)
        for b in [int(x) for x in args.batches.split(",")]:
            for secs in [float(x) for x in args.seconds.split(",")]:
                frames = int(round(secs * FRAME_RATE))
                label = f"hf_whole dtype={dt} batch={b} seconds={secs:g} n_q={args.n_q}"
                try:
                    x = signals(b, frames, dtypes[dt], device)
                    with torch.inference_mode():
                        codes = model.encode(x, num_quantizers=args.n_q, return_dict=True).audio_codes

                        def enc():
                            model.encode(x, num_quantizers=args.n_q, return_dict=True)

                        def dec():
                            model.decode(codes, return_dict=True)

                        for op, fn in (("encode", enc), ("decode", dec)):
                            ms = best(fn, device, args.runs)
                            fps = b * frames / (ms / 1e3)
                            print(f"{label} op={op} ms={ms:.2f} frames_per_s={fps:.1f}", flush=True)
                except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
                    if not is_oom(e):
                        raise
                    print(f"{label} oom", flush=True)
                free(device)


if __name__ == "__main__":
    main()
