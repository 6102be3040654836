"""PyTorch baseline of the seed design for MiniMax Music 3's semantic stage (one song per run).

What the public accelerated path does (`../shared/seeds/minimax_music3_semantic_runtime.py`,
MUSIC_SEMANTIC.md §5 and §8): a bf16 Qwen3 LM decode step captured as one CUDA graph (cuBLAS
linears at M = 2, q/k norm, RoPE, a static KV cache of the reserved capacity read by SDPA with a
correct boolean mask), a depth-decoder step captured as a second graph and replayed 8 times per
frame, and eager sampling between them (CFG, top-k, exponential race, embedding gathers), with the
`.item()` end check per frame. Random weights of the real architecture (they do not need to equal
Chorus's: only the time is compared). Prints ms per frame and the split LM / depth / sampling.

    python3 bench/music_seed_baseline.py --context 1000 --frames 30
"""
import argparse
import time

import torch
import torch.nn.functional as F

H, INTER, LAYERS, QH, KVH, HD, VOCAB = 4096, 12288, 36, 32, 8, 128, 200000
D_LAYERS, D_HEADS, D_INTER, D_POS = 4, 16, 6144, 16
AUDIO_OFFSET, SEM, END = 151675, 16384, 151670
EPS = 1e-6


def rms(x, w):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + EPS)).to(x.dtype) * w


class Lm:
    def __init__(self, cap, dev):
        b = torch.bfloat16
        r = lambda *s: (torch.randn(*s, device=dev, dtype=b) * 0.02)
        self.layers = [dict(ln1=torch.ones(H, device=dev, dtype=b), q=r(QH * HD, H), k=r(KVH * HD, H), v=r(KVH * HD, H),
                            o=r(H, QH * HD), qn=torch.ones(HD, device=dev, dtype=b), kn=torch.ones(HD, device=dev, dtype=b),
                            ln2=torch.ones(H, device=dev, dtype=b), g=r(INTER, H), u=r(INTER, H), d=r(H, INTER))
                       for _ in range(LAYERS)]
        self.norm = torch.ones(H, device=dev, dtype=b)
        self.head = r(SEM + 1, H)
        self.embed = r(VOCAB, H)
        self.kc = [torch.zeros(2, cap, KVH, HD, device=dev, dtype=b) for _ in range(LAYERS)]
        self.vc = [torch.zeros(2, cap, KVH, HD, device=dev, dtype=b) for _ in range(LAYERS)]
        inv = 1.0 / (1e6 ** (torch.arange(0, HD, 2, device=dev).float() / HD))
        ang = torch.arange(16384, device=dev).float()[:, None] * inv[None]
        self.cos, self.sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        self.cap = cap

    def rope(self, x, pos):
        # index_select, not indexing by a tensor: indexing checks bounds on the host (a sync).
        c = torch.index_select(self.cos, 0, pos.view(1)).to(x.dtype)
        s = torch.index_select(self.sin, 0, pos.view(1)).to(x.dtype)
        x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
        return x * c + torch.cat([-x2, x1], -1) * s

    def step(self, e, pos):
        """e [2,H], pos: 0-d long tensor (graph input)."""
        x = e
        mask = (torch.arange(self.cap, device=e.device) <= pos)[None, None, None, :]
        for i, L in enumerate(self.layers):
            n = rms(x, L['ln1'])
            q = F.linear(n, L['q']).view(2, QH, HD)
            k = F.linear(n, L['k']).view(2, KVH, HD)
            v = F.linear(n, L['v']).view(2, KVH, HD)
            q, k = self.rope(rms(q, L['qn']), pos), self.rope(rms(k, L['kn']), pos)
            self.kc[i].index_copy_(1, pos.view(1), k.view(2, 1, KVH, HD))
            self.vc[i].index_copy_(1, pos.view(1), v.view(2, 1, KVH, HD))
            kk = self.kc[i].transpose(1, 2).repeat_interleave(QH // KVH, 1)
            vv = self.vc[i].transpose(1, 2).repeat_interleave(QH // KVH, 1)
            a = F.scaled_dot_product_attention(q.view(2, QH, 1, HD), kk, vv, attn_mask=mask)
            x = x + F.linear(a.reshape(2, QH * HD), L['o'])
            n = rms(x, L['ln2'])
            x = x + F.linear(F.silu(F.linear(n, L['g'])) * F.linear(n, L['u']), L['d'])
        h = rms(x, self.norm)
        return h, F.linear(h, self.head)


class Depth:
    def __init__(self, dev):
        b = torch.bfloat16
        r = lambda *s: (torch.randn(*s, device=dev, dtype=b) * 0.02)
        self.proj, self.pos = r(H, H), r(D_POS, H)
        self.layers = [dict(ln1=torch.ones(H, device=dev, dtype=b), q=r(H, H), k=r(H, H), v=r(H, H), o=r(H, H),
                            ln2=torch.ones(H, device=dev, dtype=b), g=r(D_INTER, H), u=r(D_INTER, H), d=r(H, D_INTER))
                       for _ in range(D_LAYERS)]
        self.norm = torch.ones(H, device=dev, dtype=b)
        self.heads = [r(1024, H) for _ in range(7)]
        self.emb = r(7 * 1024, H)
        self.kc = [torch.zeros(2, D_HEADS, D_POS, H // D_HEADS, device=dev, dtype=b) for _ in range(D_LAYERS)]
        self.vc = [torch.zeros(2, D_HEADS, D_POS, H // D_HEADS, device=dev, dtype=b) for _ in range(D_LAYERS)]
        self.causal = torch.tril(torch.ones(D_POS, D_POS, dtype=torch.bool, device=dev))

    def step(self, x, pos):
        x = F.linear(x, self.proj) + torch.index_select(self.pos, 0, pos.view(1))
        mask = torch.index_select(self.causal, 0, pos.view(1)).view(1, 1, 1, D_POS)
        for i, L in enumerate(self.layers):
            n = rms(x, L['ln1'])
            q, k, v = (F.linear(n, L[p]).view(2, D_HEADS, 1, H // D_HEADS) for p in 'qkv')
            self.kc[i].index_copy_(2, pos.view(1), k)
            self.vc[i].index_copy_(2, pos.view(1), v)
            a = F.scaled_dot_product_attention(q, self.kc[i], self.vc[i], attn_mask=mask)
            x = x + F.linear(a.reshape(2, H), L['o'])
            n = rms(x, L['ln2'])
            x = x + F.linear(F.silu(F.linear(n, L['g'])) * F.linear(n, L['u']), L['d'])
        return rms(x, self.norm)


def graph(fn, *static):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn(*static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*static)
    return g, out


def sample(g, gen):
    thr = torch.topk(g, 50).values[-1]
    v = g.masked_fill(g < thr, float('-inf'))
    p = torch.softmax(v, -1)
    return torch.argmax(p / torch.empty_like(p).exponential_(1, generator=gen))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--context', type=int, default=1000)
    ap.add_argument('--frames', type=int, default=30)
    a = ap.parse_args()
    dev = torch.device('cuda')
    torch.manual_seed(0)
    cap = a.context + a.frames + 8
    lm, dd = Lm(cap, dev), Depth(dev)
    e_in, pos_in = torch.zeros(2, H, device=dev, dtype=torch.bfloat16), torch.zeros((), device=dev, dtype=torch.long)
    lm_graph, (h_out, lg_out) = graph(lm.step, e_in, pos_in)
    d_in, dpos_in = torch.zeros(2, H, device=dev, dtype=torch.bfloat16), torch.zeros((), device=dev, dtype=torch.long)
    d_graph, d_out = graph(dd.step, d_in, dpos_in)
    gen = torch.Generator(device=dev).manual_seed(0)
    h = torch.randn(2, H, device=dev, dtype=torch.bfloat16)
    logits = F.linear(h, lm.head)
    times, split = [], [0.0, 0.0, 0.0]
    pos = a.context
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    for f in range(a.frames + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ev[0].record()
        lg = logits.float()
        c, u = lg[0], lg[1]
        g = u + (c - u) * 1.5
        g = g.masked_fill(c < torch.topk(c, 50).values[-1], float('-inf'))
        s = sample(g, gen)
        if int(s.item()) == SEM:  # the seed's host sync per frame
            s = torch.zeros((), device=dev, dtype=torch.long)
        codes = [s]
        ev[1].record()
        seq_inputs = [h, lm.embed[AUDIO_OFFSET + s].expand(2, H)]
        for p in range(8):
            d_in.copy_(seq_inputs[p] if p < 2 else dd.emb[(p - 2) * 1024 + codes[p - 1]].expand(2, H))
            dpos_in.fill_(p)
            d_graph.replay()
            if p > 0:
                hl = F.linear(d_out, dd.heads[p - 1]).float()
                codes.append(sample(hl[1] + (hl[0] - hl[1]) * 1.5, gen))
        hidden = torch.cat([h[0:1], d_out[0:1]]).to('cpu')  # the seed's copy of the frame hidden
        ev[2].record()
        e = (lm.embed[AUDIO_OFFSET + codes[0]] + sum(dd.emb[(l - 1) * 1024 + codes[l]] for l in range(1, 8))) * 8 ** -0.5
        e_in.copy_(e.expand(2, H))
        pos_in.fill_(pos)
        lm_graph.replay()
        h, logits = h_out.clone(), lg_out.clone()
        ev[3].record()
        torch.cuda.synchronize()
        pos += 1
        if f >= 3:
            times.append((time.perf_counter() - t0) * 1e3)
            split[0] += ev[2].elapsed_time(ev[3])
            split[1] += ev[1].elapsed_time(ev[2])
            split[2] += ev[0].elapsed_time(ev[1])
        del hidden
    times.sort()
    n = len(times)
    print(f"seed design (PyTorch {torch.__version__}, bf16, CUDA graphs + eager sampling), 1 song, context {a.context}: "
          f"median {times[n // 2]:.3f} ms/frame ({1e3 / times[n // 2]:.1f} frames/s); per frame: LM step+feedback "
          f"{split[0] / n:.3f} ms, depth 8 replays+heads+draws {split[1] / n:.3f} ms, c0 CFG+draw {split[2] / n:.3f} ms")


if __name__ == '__main__':
    main()
