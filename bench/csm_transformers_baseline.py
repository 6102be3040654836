"""transformers' Sesame CSM on the GPU: `CsmForConditionalGeneration.generate` on random weights
of csm-1b's architecture (bf16, sdpa, the hub's sampling: temperature 0.9 and top-k 50 for the
backbone and every depth step), for batches of utterances with a text prompt of `--prompt`
tokens. Prints ms per frame (generated frames over wall time, the prefill included once),
frames/s over the batch and the real-time factor (12.5 frames per second of audio), and the
time to the first frame. No Mimi decode (transformers' generate returns codes unless asked for
audio), so Chorus's figures with its in-graph decode are the harder side of the comparison.

    python3 bench/csm_transformers_baseline.py --batches 1,8,64 --frames 30 --prompt 40
"""
import argparse
import time

import torch
from transformers import CsmConfig, CsmForConditionalGeneration


def build(dev):
    # csm-1b (CSM.md §1): the library defaults are that architecture.
    cfg = CsmConfig()
    cfg.depth_decoder_config._attn_implementation = "sdpa"
    cfg._attn_implementation = "sdpa"
    with torch.device(dev):
        model = CsmForConditionalGeneration(cfg)
    return model.to(dtype=torch.bfloat16).eval()


def run(model, batch, prompt, frames, dev):
    ids = torch.randint(0, 128000, (batch, prompt), device=dev)
    ids[:, 0] = 128000
    mask = torch.ones_like(ids)
    kw = dict(do_sample=True, temperature=0.9, top_k=50, depth_decoder_do_sample=True,
              depth_decoder_temperature=0.9, depth_decoder_top_k=50, max_new_tokens=frames,
              min_new_tokens=frames)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, **kw)
    torch.cuda.synchronize()
    total = time.perf_counter() - t0
    seqs = out if torch.is_tensor(out) else out.sequences
    return total, seqs.shape[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--prompt", type=int, default=40)
    a = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    model = build(dev)
    print(f"transformers CsmForConditionalGeneration, csm-1b architecture, random weights, bf16, sdpa, {torch.cuda.get_device_name()}")
    run(model, 1, a.prompt, 3, dev)  # warm-up: kernels, allocator
    print(f"{'batch':>6} {'frames':>7} {'ms/frame':>10} {'frames/s':>10} {'x realtime':>10} {'first frame ms':>15}")
    for b in [int(x) for x in a.batches.split(",")]:
        first, _ = run(model, b, a.prompt, 1, dev)
        total, got = run(model, b, a.prompt, a.frames, dev)
        ms = total * 1e3 / got
        print(f"{b:>6} {got:>7} {ms:>10.1f} {b * 1e3 / ms:>10.1f} {1e3 / ms / 12.5:>10.2f} {first * 1e3:>15.1f}")


if __name__ == "__main__":
    main()
