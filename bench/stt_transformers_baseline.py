"""transformers' Kyutai STT on the GPU: the LM step of `KyutaiSpeechToTextForConditionalGeneration`
(random weights of stt-1b-en_fr's or stt-2.6b-en's architecture, bf16, sdpa), stepped one
position at a time over its sliding-window cache the way its `generate` steps, for batches of
streams whose caches first hold `--fill` positions (default: the window). Prints ms per step and
the real-time streams that step time carries (batch x 80 ms / step, while the step fits in one
80 ms frame), for each batch until one does not fit in memory. The Mimi encoder is left out
(transformers runs it over the whole signal before generating), so the figures are the LM's
alone: the easier side of a comparison with Chorus's server, whose step encodes the audio too.

    python3 bench/stt_transformers_baseline.py --model 1b --batches 64,128,256,512,1024
"""
import argparse
import time

import torch
from transformers import DynamicCache, KyutaiSpeechToTextConfig, KyutaiSpeechToTextForConditionalGeneration

FRAME_MS = 80.0  # one Mimi frame: 12.5 per second
FILL_CHUNK = 50  # positions per untimed fill forward (a whole window at once needs a 750 x 750 mask per head)
CODEBOOKS = 32
INITIAL_AUDIO = 2048  # the initial audio token of every codebook (KYUTAI_STT.md §3.1)


def config(model):
    # transformers' defaults are stt-2.6b-en; the 1B differs in depth, heads, window and vocabulary.
    if model == "2.6b":
        cfg = KyutaiSpeechToTextConfig()
    elif model == "1b":
        cfg = KyutaiSpeechToTextConfig(vocab_size=8001, num_hidden_layers=16, num_attention_heads=16,
                                       num_key_value_heads=16, sliding_window=750)
    else:
        raise SystemExit(f"unknown model {model}: use 1b or 2.6b")
    cfg._attn_implementation = "sdpa"
    return cfg


def build(cfg, dev):
    with torch.device(dev):
        model = KyutaiSpeechToTextForConditionalGeneration(cfg)
    return model.to(dtype=torch.bfloat16).eval()


def step(model, cache, ids, position):
    """One position of every stream: the LM, the text head and the greedy token."""
    b = ids.shape[0]
    pos = torch.full((b, 1), position, device=ids.device, dtype=torch.long)
    o = model.model(input_ids=ids, past_key_values=cache, use_cache=True, position_ids=pos,
                    cache_position=torch.tensor([position], device=ids.device))
    logits = model.lm_head(o.last_hidden_state[:, -1])
    return o.past_key_values, logits.argmax(-1)


def run(model, cfg, batch, fill, steps, dev):
    g = torch.Generator(device=dev).manual_seed(batch)
    vocab = cfg.vocab_size - 1
    cache = DynamicCache(config=cfg)
    text = torch.full((batch, 1, 1), vocab, device=dev, dtype=torch.long)
    # The cache's fill in chunks (untimed), then one position at a time (timed).
    codes = torch.randint(0, 2048, (batch, fill, CODEBOOKS), device=dev, generator=g)
    codes[:, 0] = INITIAL_AUDIO
    prompt = torch.cat([text.expand(batch, fill, 1), codes], dim=-1)
    with torch.inference_mode():
        for start in range(0, fill, FILL_CHUNK):
            chunk = prompt[:, start:start + FILL_CHUNK]
            positions = torch.arange(start, start + chunk.shape[1], device=dev)
            o = model.model(input_ids=chunk, past_key_values=cache, use_cache=True,
                            position_ids=positions.expand(batch, -1), cache_position=positions)
            cache = o.past_key_values
        token = model.lm_head(o.last_hidden_state[:, -1]).argmax(-1)
        torch.cuda.synchronize()
        ms = []
        for k in range(steps):
            frame = torch.randint(0, 2048, (batch, 1, CODEBOOKS), device=dev, generator=g)
            ids = torch.cat([token.view(batch, 1, 1), frame], dim=-1)
            t0 = time.perf_counter()
            cache, token = step(model, cache, ids, fill + k)
            token.cpu()  # the host reads each token, as a server must
            ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    return ms[len(ms) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="1b")
    ap.add_argument("--batches", default="64,128,256,512,1024")
    ap.add_argument("--fill", type=int, default=None, help="positions in each cache before the timed steps")
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    dev = "cuda"
    torch.manual_seed(0)
    cfg = config(a.model)
    fill = a.fill if a.fill is not None else cfg.sliding_window
    model = build(cfg, dev)
    print(f"transformers KyutaiSpeechToTextForConditionalGeneration, stt-{a.model} architecture, random weights, "
          f"bf16, sdpa, window {cfg.sliding_window}, fill {fill}, {torch.cuda.get_device_name()}")
    run(model, cfg, 1, 8, 3, dev)  # warm-up: kernels, allocator
    print(f"{'batch':>6} {'ms/step':>10} {'x realtime':>11} {'streams worth':>14}")
    for b in [int(x) for x in a.batches.split(",")]:
        try:
            ms = run(model, cfg, b, fill, a.steps, dev)
        except torch.cuda.OutOfMemoryError:
            print(f"{b:>6} out of memory: the largest batch that fits is below this one")
            break
        finally:
            torch.cuda.empty_cache()
        worth = b * FRAME_MS / ms if ms <= FRAME_MS else 0.0
        print(f"{b:>6} {ms:>10.2f} {FRAME_MS / ms:>11.2f} {worth:>14.0f}")


if __name__ == "__main__":
    main()
