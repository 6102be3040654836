"""Times the PyTorch static-slot Mimi decoder (the seed design) on the GPU machine: random weights
of the real architecture, 8 codebooks, one CUDA-graph replay per step, CUDA-event device time per
bucket. Usage: python3 time_seed.py SEED_FILE [--buckets 1,64,1024] [--dtype bf16|fp32] [--replays N]
"""
import argparse
import importlib.util
import statistics

import torch
from transformers import MimiConfig, MimiModel


def load_seed(path):
    spec = importlib.util.spec_from_file_location("static_mimi_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fill_codebooks(model, gen):
    # transformers initialises embed_sum to zeros (every code would decode to silence) and caches
    # the derived table in _embed: fill the sums, set usage to one, drop the cache.
    for rvq in (model.quantizer.semantic_residual_vector_quantizer, model.quantizer.acoustic_residual_vector_quantizer):
        for layer in rvq.layers:
            cb = layer.codebook
            cb.embed_sum.copy_(torch.randn(cb.embed_sum.shape, generator=gen))
            cb.cluster_usage.fill_(1.0)
            if hasattr(cb, "_embed"):
                cb._embed = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seed_file")
    ap.add_argument("--buckets", default="1,64,1024")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--replays", type=int, default=50)
    args = ap.parse_args()
    buckets = [int(b) for b in args.buckets.split(",")]
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    seed = load_seed(args.seed_file)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = MimiModel(MimiConfig(num_quantizers=8)).eval()
    with torch.no_grad():
        fill_codebooks(model, gen)
    model = model.to("cuda", dtype)
    static = seed.StaticMimi(model, max_slots=max(buckets), batch_buckets=buckets)
    static.warmup()
    print(f"seed design ({torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype})")
    print(f"{'batch':>6} {'median ms':>10} {'frames/s':>10}")
    for b in buckets:
        graph = static._buckets[b].graph
        times = []
        for _ in range(args.replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        med = statistics.median(times)
        print(f"SEED {args.dtype} batch {b:>5}: {med:10.4f} ms/step {b * 1e3 / med:10.0f} frames/s")


if __name__ == "__main__":
    main()
