// Paged GQA attention of the language models (PagedAttentionArgs): the KV write, the split-K decode
// kernel ("flash decoding") with its combine, and a tiled general kernel for prefill and for any
// shape the decode kernel does not cover.
//
// A paged cache is [num_blocks, block_size, kv_heads * head_dim]: position kp of row r lives in
// block tables[r * max_blocks + kp / block_size], entry kp % block_size. A query at position p reads
// the positions 0..=p of its row and nothing else (stale or unwritten entries past the context may
// hold anything, NaN included). With a sliding window (window > 0) it reads
// max(0, p + 1 - window)..=p, and a row's table is a ring of `ring` = max_blocks * block_size
// entries: position kp lives at ring index kp % ring (the host checks ring >= window + time - 1). Arithmetic is f32 throughout; the softmax is the streaming one
// (running max subtracted before every exponential, sums rescaled when the max grows), in base 2:
// scores carry log2(e) / sqrt(head_dim), so that every exponential is one exp2f.

// Mirrors the host struct `PagedDims` (src/lm/attention.rs).
struct PagedDims {
    int rows, time, q_heads, kv_heads, head_dim, block_size, max_blocks, num_blocks;
    // Decode kernel: splits per (row, kv head) and positions per split; with one split the decode
    // kernel writes `out` itself and no combine runs.
    int splits, split_len;
    // log2(e) / sqrt(head_dim), rounded once on the host: scores in base 2.
    float scale;
    // block_size % PA_UNROLL == 0: a key group's PA_UNROLL consecutive keys share one block.
    int grouped;
    // Decode kernel: one (row, kv head) pair per key group (see pa_decode).
    int group_pairs;
    // Decode kernel: each row's keys spread over up to `spread` of its splits (pa_split_len).
    int adaptive, spread;
    // Keys per query under a sliding window (0: none) and the entries of a row's table.
    int window, ring;
    // One ticket counter per (row, kv head), zero between calls: with several splits the last
    // block of a pair to finish merges them (pa_merge_store), so no combine kernel runs. Null:
    // lm_paged_combine merges them.
    int* counters;
};

// Positions per split of a row that reads n keys: fixed (the batch-invariant mode), or with
// `adaptive` the row's keys spread over `spread` blocks (as many as one wave holds for the call's
// rows, at most its `splits`) in multiples of PA_SPLIT_QUANTUM (mirrors SPLIT_QUANTUM), so that a
// stage sized for long contexts still spreads short ones over the GPU, and no further; never
// longer than `split_len`, the longest split any row can need.
#define PA_SPLIT_QUANTUM 64
__device__ __forceinline__ int pa_split_len(int n, const PagedDims& d) {
    if (!d.adaptive) {
        return d.split_len;
    }
    int per = (n + d.spread - 1) / d.spread;
    int len = max(PA_SPLIT_QUANTUM, (per + PA_SPLIT_QUANTUM - 1) / PA_SPLIT_QUANTUM * PA_SPLIT_QUANTUM);
    return min(len, d.split_len);
}

// Index of position kp in its row's table: wrapped on the ring under a window.
__device__ __forceinline__ int pa_ring(int kp, const PagedDims& d) {
    return d.window > 0 ? kp % d.ring : kp;
}

// The first key a query at position p reads.
__device__ __forceinline__ int pa_first_key(int p, const PagedDims& d) {
    return d.window > 0 ? max(0, p + 1 - d.window) : 0;
}

// Splits of a row whose query is at position p that hold keys (the others exit at once).
__device__ __forceinline__ int pa_active_splits(int p, const PagedDims& d) {
    int n = p + 1 - pa_first_key(p, d);
    int split_len = pa_split_len(n, d);
    return min(d.splits, (n + split_len - 1) / split_len);
}

// Where an entry lies: its block's id and its offset in the block.
struct PaLoc {
    int blk, o;
};

// Position kp's entry. Block ids are data: an id outside the pool (a caller bug the host cannot
// see without a sync) is clamped so that nothing outside the pool is ever read.
__device__ __forceinline__ PaLoc pa_locate(const int* __restrict__ table, int kp, const PagedDims& d) {
    int i = pa_ring(kp, d);
    int blk = table[i / d.block_size];
    return {min(max(blk, 0), d.num_blocks - 1), i % d.block_size};
}

// Element offset of an entry in a cache (kv head 0).
__device__ __forceinline__ long long pa_entry_at(PaLoc l, const PagedDims& d) {
    return ((long long)l.blk * d.block_size + l.o) * (long long)(d.kv_heads * d.head_dim);
}

__device__ __forceinline__ long long pa_entry(const int* __restrict__ table, int kp, const PagedDims& d) {
    return pa_entry_at(pa_locate(table, kp, d), d);
}

// The scale of kv head h's vector at an entry of an 8-bit cache: scales are [block][kv head]
// [offset in block] (chorus_core::lm_ops::KvScales), so one head's scales of a block's keys are
// contiguous and a warp reading consecutive keys' scales reads whole sectors.
__device__ __forceinline__ long long pa_scale_at(PaLoc l, int h, const PagedDims& d) {
    return ((long long)l.blk * d.kv_heads + h) * d.block_size + l.o;
}

// ------------------------------------------------------------------------------------------------
// 8-bit caches (BufRole::Pool8, chorus_core::fp8): E4M3 bytes, one f32 scale per head vector of a
// position (at pa_scale_at). The conversions are sm_89's
// (the host refuses 8-bit caches below it).
// VEC E4M3 values: 8 bytes in bf16 storage, 4 in f32 (VEC is sizeof-based, so templates pick).
template <int V>
struct Kv8Vec {
    typedef uint2 type;
};
template <>
struct Kv8Vec<4> {
    typedef unsigned int type;
};
typedef Kv8Vec<VEC>::type kv8_vec;

// Word i of a kv8_vec, and setting it.
__device__ __forceinline__ unsigned int kv8_word(uint2 v, int i) { return i == 0 ? v.x : v.y; }
__device__ __forceinline__ unsigned int kv8_word(unsigned int v, int) { return v; }
__device__ __forceinline__ void kv8_set(uint2& v, int i, unsigned int w) {
    if (i == 0) {
        v.x = w;
    } else {
        v.y = w;
    }
}
__device__ __forceinline__ void kv8_set(unsigned int& v, int, unsigned int w) { v = w; }

// The cache element and the VEC-element load of each cache kind.
template <bool KV8>
struct KvT {
    typedef T elem;
    typedef uint4 vec;
};
template <>
struct KvT<true> {
    typedef unsigned char elem;
    typedef kv8_vec vec;
};

// Two E4M3 values (the low byte first) as floats.
__device__ __forceinline__ void e4m3x2_to_f32(unsigned int v, float& lo, float& hi) {
#if __CUDA_ARCH__ >= 890
    unsigned int h2;
    unsigned short b = (unsigned short)(v & 0xffffu);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(b));
    asm("{\n\t.reg .f16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;\n\t}"
        : "=f"(lo), "=f"(hi)
        : "r"(h2));
#else
    lo = hi = 0.f;
    __trap();
#endif
}

// Two floats as E4M3 (`lo` in the low byte), to nearest even, saturated at 448.
__device__ __forceinline__ unsigned int f32x2_to_e4m3(float lo, float hi) {
#if __CUDA_ARCH__ >= 890
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#else
    __trap();
    return 0;
#endif
}

__device__ __forceinline__ void kv_unpack(uint4 v, float* f) { unpack(v, f); }

__device__ __forceinline__ void kv_unpack(kv8_vec v, float* f) {
#pragma unroll
    for (int i = 0; i < VEC / 4; ++i) {
        const unsigned int w = kv8_word(v, i);
        e4m3x2_to_f32(w & 0xffffu, f[4 * i], f[4 * i + 1]);
        e4m3x2_to_f32(w >> 16, f[4 * i + 2], f[4 * i + 3]);
    }
}

__device__ __forceinline__ float pa_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

__device__ __forceinline__ float pa_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// The cache entry that token tok = r * time + t of a write fills, position start[r] + t; a
// block of -1 where the row is padded or the position has no block.
__device__ __forceinline__ PaLoc pa_write_locate(const int* __restrict__ tables, const int* __restrict__ start, int tok,
                                                 const PagedDims& d) {
    int r = tok / d.time;
    int p = start[r] + tok % d.time;
    if (p < 0) {
        return {-1, 0};
    }
    int ri = pa_ring(p, d);
    int b = ri / d.block_size;
    if (b >= d.max_blocks) {
        return {-1, 0};
    }
    int blk = tables[(long long)r * d.max_blocks + b];
    if (blk < 0 || blk >= d.num_blocks) {
        return {-1, 0};
    }
    return {blk, ri % d.block_size};
}

// The element offset of a write's entry's first kv head; -1 where it has none.
__device__ __forceinline__ long long pa_write_offset(PaLoc l, const PagedDims& d) {
    return l.blk < 0 ? -1 : pa_entry_at(l, d);
}

__device__ __forceinline__ long long pa_write_entry(const int* __restrict__ tables, const int* __restrict__ start,
                                                    int tok, const PagedDims& d) {
    return pa_write_offset(pa_write_locate(tables, start, tok, d), d);
}

// ------------------------------------------------------------------------------------------------
// KV write: token tok = r * time + t of the call stores its k and v heads at position start[r] + t.
// One thread per 16-byte vector of a token's kv heads (the host checks head_dim % VEC == 0).
// Padded rows all point at the null block and may write the same entries: one of them wins.
extern "C" __global__ void lm_paged_kv_write(const T* __restrict__ qkv, T* __restrict__ k_cache, T* __restrict__ v_cache,
                                             const int* __restrict__ tables, const int* __restrict__ start, PagedDims d) {
    pdl_enter();
    int kv_dim = d.kv_heads * d.head_dim;
    int nvec = kv_dim / VEC;
    int width = (d.q_heads + 2 * d.kv_heads) * d.head_dim;
    int n = d.rows * d.time * nvec;
    GRID_LOOP(i, n) {
        int tok = i / nvec;
        int c = (i % nvec) * VEC;
        long long e = pa_write_entry(tables, start, tok, d);
        if (e < 0) {
            continue;
        }
        e += c;
        const T* src = qkv + (long long)tok * width + d.q_heads * d.head_dim + c;
        *reinterpret_cast<uint4*>(k_cache + e) = *reinterpret_cast<const uint4*>(src);
        *reinterpret_cast<uint4*>(v_cache + e) = *reinterpret_cast<const uint4*>(src + kv_dim);
    }
}

// The KV write into 8-bit caches: each thread quantizes VEC values; the D / VEC threads of one
// head vector (consecutive and aligned, the host checks D / VEC divides 32) share its largest
// magnitude through shuffles, and its first thread writes the scale.
extern "C" __global__ void lm_paged_kv_write8(const T* __restrict__ qkv, unsigned char* __restrict__ k_cache,
                                              unsigned char* __restrict__ v_cache, const int* __restrict__ tables,
                                              const int* __restrict__ start, float* __restrict__ k_scale,
                                              float* __restrict__ v_scale, PagedDims d) {
    pdl_enter();
    int kv_dim = d.kv_heads * d.head_dim;
    int nvec = kv_dim / VEC;
    int hv = d.head_dim / VEC;  // threads per head vector
    int width = (d.q_heads + 2 * d.kv_heads) * d.head_dim;
    int n = d.rows * d.time * nvec;
    // Whole heads per grid stride: every thread of a head runs the same iterations.
    GRID_LOOP(i, n) {
        int tok = i / nvec;
        int c = (i % nvec) * VEC;
        const PaLoc loc = pa_write_locate(tables, start, tok, d);
        const T* src = qkv + (long long)tok * width + d.q_heads * d.head_dim + c;
        float kf[VEC], vf[VEC];
        unpack(*reinterpret_cast<const uint4*>(src), kf);
        unpack(*reinterpret_cast<const uint4*>(src + kv_dim), vf);
        float ka = 0.f, va = 0.f;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            ka = fmaxf(ka, fabsf(kf[j]));
            va = fmaxf(va, fabsf(vf[j]));
        }
        const int lane = threadIdx.x % 32;
        const unsigned gmask = hv == 32 ? 0xffffffffu : (((1u << hv) - 1u) << (lane / hv * hv));
        for (int o = hv / 2; o > 0; o >>= 1) {
            ka = fmaxf(ka, __shfl_xor_sync(gmask, ka, o));
            va = fmaxf(va, __shfl_xor_sync(gmask, va, o));
        }
        if (loc.blk < 0) {
            continue;
        }
        const long long e = pa_entry_at(loc, d) + c;
        // chorus_core::fp8::head_scale.
        float ks = ka > 0.f ? ka / 448.f : 1.f;
        float vs = va > 0.f ? va / 448.f : 1.f;
        kv8_vec kq, vq;
#pragma unroll
        for (int w = 0; w < VEC / 4; ++w) {
            const float* a = kf + 4 * w;
            const float* b = vf + 4 * w;
            kv8_set(kq, w, f32x2_to_e4m3(a[0] / ks, a[1] / ks) | (f32x2_to_e4m3(a[2] / ks, a[3] / ks) << 16));
            kv8_set(vq, w, f32x2_to_e4m3(b[0] / vs, b[1] / vs) | (f32x2_to_e4m3(b[2] / vs, b[3] / vs) << 16));
        }
        *reinterpret_cast<kv8_vec*>(k_cache + e) = kq;
        *reinterpret_cast<kv8_vec*>(v_cache + e) = vq;
        if (c % d.head_dim == 0) {
            const long long si = pa_scale_at(loc, c / d.head_dim, d);
            k_scale[si] = ks;
            v_scale[si] = vs;
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The q/k norm and RoPE with the KV write (LmOps::rope_paged_attention): lm_qk_norm_rope's vector
// layout (`group` lanes per head, lmr_qk_vec_body), whose k heads also store their rotated values
// and their token's v head into the cache entry of the token's position, as lm_paged_kv_write
// would from qkv (the same bits: the values are rounded to T first). One launch instead of two.
// v rounded to the storage type, as a store and a load of it give.
__device__ __forceinline__ float pa_round_t(float v) {
#if CHORUS_BF16
    return __uint_as_float(((unsigned)to_bf16_bits(v)) << 16);
#else
    return v;
#endif
}

template <bool KV8>
struct PaRopeKvSink {
    typename KvT<KV8>::elem* k_cache;
    typename KvT<KV8>::elem* v_cache;
    const int* tables;
    const int* start;
    float* k_scale;
    float* v_scale;
    PagedDims d;
    int group;

    __device__ __forceinline__ void operator()(bool live, int tok, int h, T* x1, T* x2, const float* y1,
                                               const float* y2) const {
        if (live) {
            store_c<VEC>(x1, y1);
            store_c<VEC>(x2, y2);
        }
        if (h < d.q_heads) {
            return;  // a q head (uniform over its group)
        }
        const int kh = h - d.q_heads;
        const int D = d.head_dim, half = D / 2;
        const int g = threadIdx.x % group;
        const PaLoc loc = pa_write_locate(tables, start, tok, d);
        long long e = pa_write_offset(loc, d);
        // The token's v head sits kv_heads heads past its k head in qkv.
        const T* v1 = x1 + (long long)d.kv_heads * D;
        const T* v2 = v1 + half;
        if constexpr (!KV8) {
            if (!live || e < 0) {
                return;
            }
            e += (long long)kh * D + g * VEC;
            store_c<VEC>(k_cache + e, y1);
            store_c<VEC>(k_cache + e + half, y2);
            *reinterpret_cast<uint4*>(v_cache + e) = *reinterpret_cast<const uint4*>(v1);
            *reinterpret_cast<uint4*>(v_cache + e + half) = *reinterpret_cast<const uint4*>(v2);
        } else {
            // The values the cache would take from qkv: rounded to T.
            float k1[VEC], k2[VEC], w1[VEC], w2[VEC];
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                k1[i] = pa_round_t(y1[i]);
                k2[i] = pa_round_t(y2[i]);
            }
            load_c<VEC>(v1, w1);
            load_c<VEC>(v2, w2);
            float ka = 0.f, va = 0.f;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                ka = fmaxf(ka, fmaxf(fabsf(k1[i]), fabsf(k2[i])));
                va = fmaxf(va, fmaxf(fabsf(w1[i]), fabsf(w2[i])));
            }
            // The head's largest magnitudes over its group's lanes (consecutive and aligned).
            const int lane = threadIdx.x % 32;
            const unsigned gmask = group == 32 ? 0xffffffffu : (((1u << group) - 1u) << (lane / group * group));
            for (int o = group / 2; o > 0; o >>= 1) {
                ka = fmaxf(ka, __shfl_xor_sync(gmask, ka, o));
                va = fmaxf(va, __shfl_xor_sync(gmask, va, o));
            }
            if (!live || e < 0) {
                return;
            }
            const long long head = e + (long long)kh * D;
            // chorus_core::fp8::head_scale.
            const float ks = ka > 0.f ? ka / 448.f : 1.f;
            const float vs = va > 0.f ? va / 448.f : 1.f;
            const float* src[4] = {k1, k2, w1, w2};
            kv8_vec q[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float sc = j < 2 ? ks : vs;
#pragma unroll
                for (int w = 0; w < VEC / 4; ++w) {
                    const float* a = src[j] + 4 * w;
                    kv8_set(q[j], w, f32x2_to_e4m3(a[0] / sc, a[1] / sc) | (f32x2_to_e4m3(a[2] / sc, a[3] / sc) << 16));
                }
            }
            *reinterpret_cast<kv8_vec*>(k_cache + head + g * VEC) = q[0];
            *reinterpret_cast<kv8_vec*>(k_cache + head + half + g * VEC) = q[1];
            *reinterpret_cast<kv8_vec*>(v_cache + head + g * VEC) = q[2];
            *reinterpret_cast<kv8_vec*>(v_cache + head + half + g * VEC) = q[3];
            if (g == 0) {
                const long long si = pa_scale_at(loc, kh, d);
                k_scale[si] = ks;
                v_scale[si] = vs;
            }
        }
    }
};

// `group` > 0 (the host sends the vector layout only); `rope`'s table has max_pos positions.
extern "C" __global__ void lm_qk_norm_rope_kv(T* qkv, const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                                              const float* __restrict__ rope, const int* __restrict__ start,
                                              T* __restrict__ k_cache, T* __restrict__ v_cache,
                                              const int* __restrict__ tables, int max_pos, float eps, int normed,
                                              int group, PagedDims d) {
    pdl_enter();
    PaRopeKvSink<false> sink{k_cache, v_cache, tables, start, nullptr, nullptr, d, group};
    lmr_qk_vec_body(qkv, q_norm, k_norm, rope, start, d.rows * d.time, d.time, d.q_heads, d.kv_heads, d.head_dim,
                    max_pos, eps, normed != 0, group, sink);
}

// The same into 8-bit caches with their per-head scales.
extern "C" __global__ void lm_qk_norm_rope_kv8(T* qkv, const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                                               const float* __restrict__ rope, const int* __restrict__ start,
                                               unsigned char* __restrict__ k_cache, unsigned char* __restrict__ v_cache,
                                               const int* __restrict__ tables, float* __restrict__ k_scale,
                                               float* __restrict__ v_scale, int max_pos, float eps, int normed,
                                               int group, PagedDims d) {
    pdl_enter();
    PaRopeKvSink<true> sink{k_cache, v_cache, tables, start, k_scale, v_scale, d, group};
    lmr_qk_vec_body(qkv, q_norm, k_norm, rope, start, d.rows * d.time, d.time, d.q_heads, d.kv_heads, d.head_dim,
                    max_pos, eps, normed != 0, group, sink);
}

// ------------------------------------------------------------------------------------------------
// Decode (time == 1): one block per (row, kv head, split). The block serves the G query heads that
// share the kv head, so every key and value row is read once for the group. Its keys are the
// positions [lo + split * split_len, min(lo + (split + 1) * split_len, p + 1)), lo the first key
// (0, or p + 1 - window under a window) and split_len from pa_split_len; a split past the row's
// context exits at once (the grid is sized for the most keys a query reads, the contexts are
// data).
//
// Lanes are grouped by L (a key row's 16-byte vectors, at most a warp); each group streams its own
// keys PA_UNROLL at a time with its own online softmax (all K and V loads of a step in flight
// before any use), partial dot products reduced across the group with shuffles. At the end the
// groups are merged through shared memory; the block then writes its partial (max, sum,
// unnormalised output) to `part`, or with a single split the normalised output itself.
//
// With `group_pairs` (OWN: short contexts without GQA, the depth decoder), every key group serves
// a (row, kv head) pair of its own, all of its keys, and writes the output directly: no splits, no
// merge, no block barrier, KG pairs per block.
// Most splits the fused combine takes (mirrors FUSED_COMBINE_MAX_SPLITS): its weights sit in
// static shared memory.
#define PA_FUSED_MAX_SPLITS 1024

// One (row, query head)'s `active` split partials merged into its output: lm_paged_combine's body
// and the fused combine's, with the block's threads. `weights` holds `active` floats of shared
// memory, `red` one per warp. Partials are read through L2 (other blocks wrote them).
__device__ __forceinline__ void pa_combine_head(const float* __restrict__ part, T* __restrict__ out,
                                                const PagedDims& d, int r, int head, int active, float* weights,
                                                float* red) {
    const int D = d.head_dim;
    const int S = d.splits;
    const int warps = blockDim.x / 32;
    const long long base = ((long long)r * d.q_heads + head) * S;
    const float* ml = part + (long long)d.rows * d.q_heads * S * D;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    float mx = NEG_INF;
    for (int s = threadIdx.x; s < active; s += blockDim.x) {
        mx = fmaxf(mx, __ldcg(ml + 2 * (base + s)));
    }
    mx = pa_warp_max(mx);
    if (lane == 0) {
        red[warp] = mx;
    }
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < warps; ++w) {
        mx = fmaxf(mx, red[w]);
    }
    __syncthreads();
    float sum = 0.f;
    for (int s = threadIdx.x; s < active; s += blockDim.x) {
        float w = exp2f(__ldcg(ml + 2 * (base + s)) - mx);
        weights[s] = w;
        sum += w * __ldcg(ml + 2 * (base + s) + 1);
    }
    sum = pa_warp_sum(sum);
    if (lane == 0) {
        red[warp] = sum;
    }
    __syncthreads();
    sum = 0.f;
    for (int w = 0; w < warps; ++w) {
        sum += red[w];
    }
    float inv = 1.f / sum;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        float a = 0.f;
        for (int s = 0; s < active; ++s) {
            a += weights[s] * __ldcg(part + (base + s) * D + c);
        }
        st(out + ((long long)r * d.q_heads + head) * D + c, a * inv);
    }
    // `weights` and `red` are reused by the next head.
    __syncthreads();
}

// The fused combine: after a block stored its split's partials, it takes a ticket; the pair's
// last block (ticket active - 1) merges every split of its G heads in split order (the bits of
// lm_paged_combine) and resets the counter for the next call.
// Not a template: one copy of its shared memory serves every decode instance of a kernel.
__device__ __forceinline__ void pa_last_split_combines(const float* __restrict__ part, T* __restrict__ out,
                                                       int G, int r, int h, int p, const PagedDims& d) {
    __shared__ int ticket;
    __shared__ float weights[PA_FUSED_MAX_SPLITS];
    __shared__ float red[32];
    // This block's partials are visible to the whole device before its ticket is taken.
    __threadfence();
    __syncthreads();
    int* counter = d.counters + (long long)r * d.kv_heads + h;
    if (threadIdx.x == 0) {
        ticket = atomicAdd(counter, 1);
    }
    __syncthreads();
    const int active = pa_active_splits(p, d);
    if (ticket != active - 1) {
        return;
    }
    __threadfence();
#pragma unroll 1
    for (int g = 0; g < G; ++g) {
        pa_combine_head(part, out, d, r, h * G + g, active, weights, red);
    }
    if (threadIdx.x == 0) {
        *counter = 0;
    }
}

// The end of a decode block: its KG key groups' partial results in shared memory ([KG][G][D]
// unnormalised outputs, then [KG][G] maxima and [KG][G] sums, base 2) merged, then stored: the
// normalised output, or with several splits the split's partial (max, sum, output) for
// lm_paged_combine. The caller wrote them and passed a barrier; group 0 saw the split's first
// key, so the maximum is finite.
template <int D, int G, int KG>
__device__ __forceinline__ void pa_merge_store(const float* __restrict__ smem, int r, int h, int s, int p,
                                               T* __restrict__ out, float* __restrict__ part, const PagedDims& d) {
    const float* sacc = smem;
    const float* sm = sacc + KG * G * D;
    const float* sl = sm + KG * G;
    long long part_floats = (long long)d.rows * d.q_heads * d.splits * D;
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
        int g = idx / D;
        int c = idx % D;
        float mx = NEG_INF;
#pragma unroll
        for (int k = 0; k < KG; ++k) {
            mx = fmaxf(mx, sm[k * G + g]);
        }
        float sum = 0.f, a = 0.f;
#pragma unroll
        for (int k = 0; k < KG; ++k) {
            float w = exp2f(sm[k * G + g] - mx);
            sum += w * sl[k * G + g];
            a += w * sacc[(k * G + g) * D + c];
        }
        int head = h * G + g;
        if (d.splits == 1) {
            st(out + ((long long)r * d.q_heads + head) * D + c, a * (1.f / sum));
        } else {
            long long ps = ((long long)r * d.q_heads + head) * d.splits + s;
            part[ps * D + c] = a;
            if (c == 0) {
                part[part_floats + 2 * ps] = mx;
                part[part_floats + 2 * ps + 1] = sum;
            }
        }
    }
    if (d.splits > 1 && d.counters != nullptr) {
        pa_last_split_combines(part, out, G, r, h, p, d);
    }
}

#define PA_THREADS 128
#define PA_UNROLL 4
// 8-bit caches load half the bytes per key: twice the keys in flight per lane for the same bytes.
#define PA_UNROLL8 8

template <int D, int G, bool OWN, bool KV8, int U>
__device__ __forceinline__ void pa_decode(const T* __restrict__ qkv, const typename KvT<KV8>::elem* __restrict__ k_cache,
                                          const typename KvT<KV8>::elem* __restrict__ v_cache,
                                          const int* __restrict__ tables, const int* __restrict__ start,
                                          T* __restrict__ out, float* __restrict__ part,
                                          const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                                          const PagedDims& d) {
    typedef typename KvT<KV8>::elem KE;
    typedef typename KvT<KV8>::vec KV;
    constexpr int NV = D / VEC;          // 16-byte vectors per key row
    constexpr int L = NV < 32 ? NV : 32;  // lanes per key
    constexpr int VPL = NV / L;          // vectors per lane
    constexpr int C = VPL * VEC;         // channels per lane
    constexpr int KG = PA_THREADS / L;   // key groups
    constexpr int STEP = KG * U;  // keys per step of the block
    extern __shared__ float pa_smem[];

    // The lanes of this thread's key group: shuffles stay inside it.
    const unsigned gmask = L == 32 ? 0xffffffffu : (((1u << L) - 1u) << (threadIdx.x % 32 / L * L));
    int li = threadIdx.x % L;
    int grp = threadIdx.x / L;
    const bool own = OWN;
    int s = own ? 0 : blockIdx.x % d.splits;
    int pair = own ? blockIdx.x * KG + grp : blockIdx.x / d.splits;
    if (pair >= d.rows * d.kv_heads) {
        return;  // only with group_pairs, where no barrier follows
    }
    int h = pair % d.kv_heads;
    int r = pair / d.kv_heads;
    int n = start[r] + 1;
    int lo = pa_first_key(start[r], d);
    int split_len = own ? d.split_len : pa_split_len(n - lo, d);
    int k_begin = lo + s * split_len;
    if (k_begin >= n) {
        return;
    }
    int k_end = min(n, k_begin + split_len);
    // Keys of one step: the block's STEP (groups interleaved), or the group's own U.
    const int kstep = own ? U : STEP;
    const int koff = own ? 0 : grp * U;
    int width = (d.q_heads + 2 * d.kv_heads) * D;

    // This lane's channels: vectors li, li + L, ... of each row (a group reads whole rows).
    float q[G][C];
    const T* qrow = qkv + (long long)r * width + h * G * D;
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int j = 0; j < VPL; ++j) {
            load_c<VEC>(qrow + g * D + (li + j * L) * VEC, &q[g][j * VEC]);
        }
    }
    const int* table = tables + (long long)r * d.max_blocks;
    const KE* k_head = k_cache + h * D;
    const KE* v_head = v_cache + h * D;

    float m[G], l[G], acc[G][C];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = NEG_INF;
        l[g] = 0.f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
            acc[g][c] = 0.f;
        }
    }

    for (int k0 = k_begin; k0 < k_end; k0 += kstep) {
        int kfirst = k0 + koff;
        // Keys past the split reload its last key (a valid position) and are masked below. The
        // group's keys start at a multiple of U (splits are multiples of 64 positions, and
        // the host clears `grouped` under a window), so with `grouped` they lie in one block: one
        // table lookup.
        int kpos = min(kfirst, k_end - 1);
        int span = min(kfirst + U - 1, k_end - 1) - kpos;
        const PaLoc l0 = pa_locate(table, kpos, d);
        KV kr[U][VPL], vr[U][VPL];
        float ks[U], vs[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const PaLoc lu = d.grouped ? PaLoc{l0.blk, l0.o + min(u, span)}
                                       : pa_locate(table, min(kfirst + u, k_end - 1), d);
            const long long e = pa_entry_at(lu, d);
#pragma unroll
            for (int j = 0; j < VPL; ++j) {
                kr[u][j] = *reinterpret_cast<const KV*>(k_head + e + (li + j * L) * VEC);
                vr[u][j] = *reinterpret_cast<const KV*>(v_head + e + (li + j * L) * VEC);
            }
            if constexpr (KV8) {
                const long long si = pa_scale_at(lu, h, d);
                ks[u] = k_scale[si];
                vs[u] = v_scale[si];
            }
        }
        float sc[G][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float kf[C];
#pragma unroll
            for (int j = 0; j < VPL; ++j) {
                kv_unpack(kr[u][j], &kf[j * VEC]);
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float x = 0.f;
#pragma unroll
                for (int c = 0; c < C; ++c) {
                    x += q[g][c] * kf[c];
                }
#pragma unroll
                for (int o = L / 2; o > 0; o >>= 1) {
                    x += __shfl_xor_sync(gmask, x, o);
                }
                if constexpr (KV8) {
                    x *= ks[u];
                }
                sc[g][u] = kfirst + u < k_end ? x * d.scale : NEG_INF;
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float mt = m[g];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                mt = fmaxf(mt, sc[g][u]);
            }
            // Nothing seen yet (every key of this group masked): keep everything at zero.
            float ref = mt == NEG_INF ? 0.f : mt;
            float alpha = exp2f(m[g] - ref);
            l[g] *= alpha;
#pragma unroll
            for (int c = 0; c < C; ++c) {
                acc[g][c] *= alpha;
            }
            m[g] = mt;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                sc[g][u] = exp2f(sc[g][u] - ref);
                l[g] += sc[g][u];
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float vf[C];
#pragma unroll
            for (int j = 0; j < VPL; ++j) {
                kv_unpack(vr[u][j], &vf[j * VEC]);
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                // The softmax weight times the value head's scale (the sum `l` stays unscaled).
                float w = sc[g][u];
                if constexpr (KV8) {
                    w *= vs[u];
                }
#pragma unroll
                for (int c = 0; c < C; ++c) {
                    acc[g][c] += w * vf[c];
                }
            }
        }
    }

    if constexpr (OWN) {
        // The group saw every key of its pair: normalise and store its channels.
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float inv = 1.f / l[g];
#pragma unroll
            for (int c = 0; c < C; ++c) {
                acc[g][c] *= inv;
            }
            T* o = out + ((long long)r * d.q_heads + h * G + g) * D;
#pragma unroll
            for (int j = 0; j < VPL; ++j) {
                store_c<VEC>(o + (li + j * L) * VEC, &acc[g][j * VEC]);
            }
        }
        return;
    }

    // Merge the key groups: [KG][G][D] outputs, then [KG][G] maxima and [KG][G] sums.
    float* sacc = pa_smem;
    float* sm = sacc + KG * G * D;
    float* sl = sm + KG * G;
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int j = 0; j < VPL; ++j) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                sacc[(grp * G + g) * D + (li + j * L) * VEC + e] = acc[g][j * VEC + e];
            }
        }
        if (li == 0) {
            sm[grp * G + g] = m[g];
            sl[grp * G + g] = l[g];
        }
    }
    __syncthreads();
    pa_merge_store<D, G, KG>(pa_smem, r, h, s, n - 1, out, part, d);
}

#define PA_DECODE_CASE(DD, GG, OWN)                                                                   \
    if (d.head_dim == DD && group == GG) {                                                            \
        pa_decode<DD, GG, OWN, false, PA_UNROLL>(qkv, k_cache, v_cache, tables, start, out, part, nullptr, nullptr, d); \
        return;                                                                                       \
    }
#define PA_DECODE8_CASE(DD, GG)                                                                        \
    if (d.head_dim == DD && group == GG) {                                                            \
        pa_decode<DD, GG, false, true, PA_UNROLL8>(qkv, k_cache, v_cache, tables, start, out, part, k_scale, v_scale, d); \
        return;                                                                                       \
    }

// The shapes the host sends here: head_dim 64, 128 or 256 and a GQA group of 1, 2 or 4 (Qwen3:
// 128 x 4; the depth decoder: 256 x 1), group_pairs with a group of 1 only (the mode's registers
// would otherwise cost the split instances theirs). Anything else takes lm_paged_prefill.
extern "C" __global__ void __launch_bounds__(PA_THREADS, 4)
    lm_paged_attention(const T* __restrict__ qkv, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                       const int* __restrict__ tables, const int* __restrict__ start, T* __restrict__ out,
                       float* __restrict__ part, PagedDims d) {
    pdl_enter();
    int group = d.q_heads / d.kv_heads;
    if (d.group_pairs) {
        PA_DECODE_CASE(256, 1, true)
        PA_DECODE_CASE(128, 1, true)
        PA_DECODE_CASE(64, 1, true)
        return;
    }
    PA_DECODE_CASE(128, 4, false)
    PA_DECODE_CASE(256, 1, false)
    PA_DECODE_CASE(64, 4, false)
    PA_DECODE_CASE(128, 1, false)
    PA_DECODE_CASE(128, 2, false)
    PA_DECODE_CASE(64, 1, false)
    PA_DECODE_CASE(64, 2, false)
    PA_DECODE_CASE(256, 2, false)
    PA_DECODE_CASE(256, 4, false)
}

// lm_paged_attention over 8-bit caches (splits only: the depth decoder's short caches stay in
// the storage type).
// Three blocks per SM: the registers of PA_UNROLL8 keys in flight.
extern "C" __global__ void __launch_bounds__(PA_THREADS, 3)
    lm_paged_attention8(const T* __restrict__ qkv, const unsigned char* __restrict__ k_cache,
                        const unsigned char* __restrict__ v_cache, const int* __restrict__ tables,
                        const int* __restrict__ start, T* __restrict__ out, float* __restrict__ part,
                        const float* __restrict__ k_scale, const float* __restrict__ v_scale, PagedDims d) {
    pdl_enter();
    int group = d.q_heads / d.kv_heads;
    PA_DECODE8_CASE(128, 4)
    PA_DECODE8_CASE(256, 1)
    PA_DECODE8_CASE(64, 4)
    PA_DECODE8_CASE(128, 1)
    PA_DECODE8_CASE(128, 2)
    PA_DECODE8_CASE(64, 1)
    PA_DECODE8_CASE(64, 2)
    PA_DECODE8_CASE(256, 2)
    PA_DECODE8_CASE(256, 4)
}

// Merges the splits of lm_paged_attention: one block per (row, query head). The row's active
// splits follow from its position alone, as in the decode kernel.
#define PA_COMBINE_THREADS 128

extern "C" __global__ void __launch_bounds__(PA_COMBINE_THREADS)
    lm_paged_combine(const float* __restrict__ part, const int* __restrict__ start, T* __restrict__ out, PagedDims d) {
    pdl_enter();
    extern __shared__ float pa_weights[];  // [splits]
    __shared__ float red[PA_COMBINE_THREADS / 32];
    const int r = blockIdx.x / d.q_heads;
    const int head = blockIdx.x % d.q_heads;
    pa_combine_head(part, out, d, r, head, pa_active_splits(start[r], d), pa_weights, red);
}

// ------------------------------------------------------------------------------------------------
// General kernel (prefill; decode shapes outside the decode kernel's list). The query vectors of a
// (row, kv head) pair are x = t * G + g for token t and group head g; one block takes NQ
// consecutive ones (a few tokens times the whole group, so each key and value tile loaded to
// shared memory serves NQ queries) and walks the keys 0..=p_max of its last token in tiles of
// PF_KT: lane j of every warp scores key j of the tile against the warp's QPW queries (a streaming
// softmax per query), then every lane accumulates its channels of the values. Keys past a query's
// position (or before its window) are masked; keys past p_max, or before the window of the
// tile's first query, are never loaded.
#define PF_WARPS 4
#define PF_KT 32

// Loads keys k0 .. k0 + PF_KT - 1 (zeros past nkeys) of kv head h, as f32, rows dp floats apart.
// With KV8, E4M3 keys times their head's scale.
template <bool KV8>
__device__ __forceinline__ void pf_load_tile(float* __restrict__ dst, const typename KvT<KV8>::elem* __restrict__ cache,
                                             const float* __restrict__ scale, const int* __restrict__ table, int k0,
                                             int nkeys, int h, int dp, const PagedDims& d) {
    typedef typename KvT<KV8>::vec KV;
    int nvec = d.head_dim / VEC;
    for (int idx = threadIdx.x; idx < PF_KT * nvec; idx += PF_WARPS * 32) {
        int j = idx / nvec;
        int c = (idx % nvec) * VEC;
        int kp = k0 + j;
        float f[VEC];
        if (kp < nkeys) {
            const PaLoc loc = pa_locate(table, kp, d);
            kv_unpack(*reinterpret_cast<const KV*>(cache + pa_entry_at(loc, d) + h * d.head_dim + c), f);
            if constexpr (KV8) {
                float sc = scale[pa_scale_at(loc, h, d)];
#pragma unroll
                for (int q = 0; q < VEC; ++q) {
                    f[q] *= sc;
                }
            }
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                f[e] = 0.f;
            }
        }
#pragma unroll
        for (int e = 0; e < VEC; e += 4) {
            *reinterpret_cast<float4*>(dst + j * dp + c + e) = make_float4(f[e], f[e + 1], f[e + 2], f[e + 3]);
        }
    }
}

// QPW: queries per warp; CPL: channels per lane (head_dim <= 32 * CPL).
template <int QPW, int CPL, bool KV8>
__device__ __forceinline__ void pa_general(const T* __restrict__ qkv, const typename KvT<KV8>::elem* __restrict__ k_cache,
                                           const typename KvT<KV8>::elem* __restrict__ v_cache,
                                           const int* __restrict__ tables, const int* __restrict__ start,
                                           T* __restrict__ out, const float* __restrict__ k_scale,
                                           const float* __restrict__ v_scale, const PagedDims& d) {
    constexpr int NQ = PF_WARPS * QPW;
    extern __shared__ float pf_smem[];
    const int D = d.head_dim;
    const int G = d.q_heads / d.kv_heads;
    // Key rows padded by 4 floats: lane j's 16-byte reads of row j hit distinct banks.
    const int dp = D + 4;
    float* sq = pf_smem;          // [NQ][D]
    float* skv = sq + NQ * D;     // [PF_KT][dp]
    float* sp = skv + PF_KT * dp;  // [NQ][PF_KT]

    int nx = d.time * G;
    int tiles = (nx + NQ - 1) / NQ;
    int tile = blockIdx.x % tiles;
    int pair = blockIdx.x / tiles;
    int h = pair % d.kv_heads;
    int r = pair / d.kv_heads;
    int x0 = tile * NQ;
    int x_last = min(x0 + NQ, nx) - 1;
    int p0 = start[r];
    int nkeys = p0 + x_last / G + 1;
    int k_first = pa_first_key(p0 + x0 / G, d);
    int width = (d.q_heads + 2 * d.kv_heads) * D;
    int warp = threadIdx.x / 32;
    int lane = threadIdx.x % 32;

    for (int idx = threadIdx.x; idx < NQ * D; idx += PF_WARPS * 32) {
        int x = x0 + idx / D;
        int c = idx % D;
        float v = 0.f;
        if (x <= x_last) {
            v = ld(qkv + ((long long)r * d.time + x / G) * width + (h * G + x % G) * D + c);
        }
        sq[idx] = v;
    }
    // A query's position; -1 for the unused slots of the last tile (every key masked).
    int pos[QPW];
    float m[QPW], l[QPW], acc[QPW][CPL];
#pragma unroll
    for (int i = 0; i < QPW; ++i) {
        int x = x0 + warp * QPW + i;
        pos[i] = x <= x_last ? p0 + x / G : -1;
        m[i] = NEG_INF;
        l[i] = 0.f;
#pragma unroll
        for (int u = 0; u < CPL; ++u) {
            acc[i][u] = 0.f;
        }
    }
    const int* table = tables + (long long)r * d.max_blocks;

    for (int k0 = k_first; k0 < nkeys; k0 += PF_KT) {
        __syncthreads();  // the queries are stored; the previous tile's values are consumed
        pf_load_tile<KV8>(skv, k_cache, k_scale, table, k0, nkeys, h, dp, d);
        __syncthreads();
        float s[QPW];
#pragma unroll
        for (int i = 0; i < QPW; ++i) {
            s[i] = 0.f;
        }
        const float4* krow = reinterpret_cast<const float4*>(skv + lane * dp);
        for (int c4 = 0; c4 < D / 4; ++c4) {
            float4 kv = krow[c4];
#pragma unroll
            for (int i = 0; i < QPW; ++i) {
                float4 qv = reinterpret_cast<const float4*>(sq + (warp * QPW + i) * D)[c4];
                s[i] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
            }
        }
        int kp = k0 + lane;
#pragma unroll
        for (int i = 0; i < QPW; ++i) {
            bool seen = kp <= pos[i] && (d.window == 0 || kp > pos[i] - d.window);
            float sc = seen ? s[i] * d.scale : NEG_INF;
            float mt = fmaxf(m[i], pa_warp_max(sc));
            float ref = mt == NEG_INF ? 0.f : mt;
            float alpha = exp2f(m[i] - ref);
            float pr = exp2f(sc - ref);
            l[i] = l[i] * alpha + pa_warp_sum(pr);
            m[i] = mt;
#pragma unroll
            for (int u = 0; u < CPL; ++u) {
                acc[i][u] *= alpha;
            }
            sp[(warp * QPW + i) * PF_KT + lane] = pr;
        }
        __syncthreads();  // every warp is done with the keys
        pf_load_tile<KV8>(skv, v_cache, v_scale, table, k0, nkeys, h, dp, d);
        __syncthreads();
        int kn = min(PF_KT, nkeys - k0);
        for (int j = 0; j < kn; ++j) {
            float vv[CPL];
#pragma unroll
            for (int u = 0; u < CPL; ++u) {
                int c = lane + 32 * u;
                vv[u] = c < D ? skv[j * dp + c] : 0.f;
            }
#pragma unroll
            for (int i = 0; i < QPW; ++i) {
                float p = sp[(warp * QPW + i) * PF_KT + j];
#pragma unroll
                for (int u = 0; u < CPL; ++u) {
                    acc[i][u] += p * vv[u];
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < QPW; ++i) {
        if (pos[i] < 0) {
            continue;
        }
        int x = x0 + warp * QPW + i;
        float inv = 1.f / l[i];
        T* o = out + ((long long)r * d.time + x / G) * d.q_heads * D + (h * G + x % G) * D;
#pragma unroll
        for (int u = 0; u < CPL; ++u) {
            int c = lane + 32 * u;
            if (c < D) {
                st(o + c, acc[i][u] * inv);
            }
        }
    }
}

// head_dim <= 128: 4 queries per warp; head_dim <= 256: 2 (the host sizes shared memory alike).
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32)
    lm_paged_prefill(const T* __restrict__ qkv, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                     const int* __restrict__ tables, const int* __restrict__ start, T* __restrict__ out, PagedDims d) {
    pdl_enter();
    if (d.head_dim <= 128) {
        pa_general<4, 4, false>(qkv, k_cache, v_cache, tables, start, out, nullptr, nullptr, d);
    } else {
        pa_general<2, 8, false>(qkv, k_cache, v_cache, tables, start, out, nullptr, nullptr, d);
    }
}

// lm_paged_prefill over 8-bit caches.
extern "C" __global__ void __launch_bounds__(PF_WARPS * 32)
    lm_paged_prefill8(const T* __restrict__ qkv, const unsigned char* __restrict__ k_cache,
                      const unsigned char* __restrict__ v_cache, const int* __restrict__ tables,
                      const int* __restrict__ start, T* __restrict__ out, const float* __restrict__ k_scale,
                      const float* __restrict__ v_scale, PagedDims d) {
    pdl_enter();
    if (d.head_dim <= 128) {
        pa_general<4, 4, true>(qkv, k_cache, v_cache, tables, start, out, k_scale, v_scale, d);
    } else {
        pa_general<2, 8, true>(qkv, k_cache, v_cache, tables, start, out, k_scale, v_scale, d);
    }
}
