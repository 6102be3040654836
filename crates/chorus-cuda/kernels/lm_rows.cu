// Row ops of the language models (host side: src/lm/rows.rs): gathers, scatters, strided row
// copies, the feedback embedding, fused residual add + RMSNorm, position rows, SwiGLU, and the
// per-head q/k RMSNorm + RoPE.
//
// Layout of the row kernels: block b handles segment `b % segs` of row `b / segs`; each thread
// moves one chunk of C elements, C == VEC (one 16-byte access) when the host found every row
// start and width a multiple of VEC and every base pointer 16-byte aligned, else C == 1. The host
// sizes `segs * blockDim.x >= chunks`, so there is no loop: one launch, one access per thread.
//
// The host validates lengths only (it cannot read device ids without a sync): ids, codes and
// positions are validated by the callers at the API edge. The kernels only stay inside their
// tables: an out-of-range id gathers a zero row, is skipped by a scatter, an out-of-range code adds
// nothing to a feedback embedding, and a RoPE position is clamped to the table.

// Largest block of the RMSNorm kernel and the chunks each of its threads holds in registers.
#define LMR_NORM_MAX_THREADS 1024
#define LMR_NORM_ITEMS 2

// dst[0..C) = src[0..C), raw bits.
template <int C>
__device__ __forceinline__ void lmr_copy_c(T* __restrict__ dst, const T* __restrict__ src) {
    if constexpr (C == VEC) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
#pragma unroll
        for (int e = 0; e < C; ++e) {
            dst[e] = src[e];
        }
    }
}

// Row and chunk of this thread in the row layout; false past the row's last chunk.
__device__ __forceinline__ bool lmr_row_chunk(int segs, int chunks, int& row, int& chunk) {
    row = blockIdx.x / segs;
    chunk = (blockIdx.x % segs) * blockDim.x + threadIdx.x;
    return chunk < chunks;
}

// ---------------------------------------------------------------------------------------------
// gather: out[r] = scale * table[offset + ids[(r / per_id) * ids_stride + ids_col]].

template <int C>
__device__ __forceinline__ void lmr_gather_body(const T* __restrict__ table, const int* __restrict__ ids, T* __restrict__ out,
                                                int dim, int per_id, int ids_stride, int ids_col, int offset,
                                                int table_rows, float scale, int segs) {
    int r, c;
    if (!lmr_row_chunk(segs, dim / C, r, c)) {
        return;
    }
    long long id = (long long)ids[(long long)(r / per_id) * ids_stride + ids_col] + offset;
    T* dst = out + (long long)r * dim + (long long)c * C;
    float v[C];
    if (id < 0 || id >= table_rows) {
#pragma unroll
        for (int e = 0; e < C; ++e) v[e] = 0.f;
        store_c<C>(dst, v);
        return;
    }
    const T* src = table + id * dim + (long long)c * C;
    if (scale == 1.f) {
        lmr_copy_c<C>(dst, src);
        return;
    }
    load_c<C>(src, v);
#pragma unroll
    for (int e = 0; e < C; ++e) v[e] *= scale;
    store_c<C>(dst, v);
}

extern "C" __global__ void lm_gather_rows(const T* __restrict__ table, const int* __restrict__ ids, T* __restrict__ out, int dim,
                                          int per_id, int ids_stride, int ids_col, int offset, int table_rows, float scale,
                                          int segs, int vec) {
    pdl_enter();
    if (vec) {
        lmr_gather_body<VEC>(table, ids, out, dim, per_id, ids_stride, ids_col, offset, table_rows, scale, segs);
    } else {
        lmr_gather_body<1>(table, ids, out, dim, per_id, ids_stride, ids_col, offset, table_rows, scale, segs);
    }
}

// ---------------------------------------------------------------------------------------------
// scatter: table[ids[r]] = src[r], last write wins. The rows of one call run concurrently, so a
// row whose id is named again by a later row writes nothing: the block scans the later ids
// together (one load per thread for rows <= blockDim.x) and agrees with __syncthreads_or. The
// result is exactly the row-order result of the reference, duplicates (the dummy row of padded
// entries) included.

template <int C>
__device__ __forceinline__ void lmr_scatter_body(const T* __restrict__ src, const int* __restrict__ ids, T* __restrict__ table,
                                                 int rows, int dim, int table_rows, int segs) {
    int r = blockIdx.x / segs;
    int id = ids[r];
    int later = 0;
    for (int j = r + 1 + threadIdx.x; j < rows; j += blockDim.x) {
        later |= ids[j] == id;
    }
    // Every thread of the block reaches this barrier (no early return above).
    if (__syncthreads_or(later) || id < 0 || id >= table_rows) {
        return;
    }
    int c = (blockIdx.x % segs) * blockDim.x + threadIdx.x;
    if (c >= dim / C) {
        return;
    }
    lmr_copy_c<C>(table + (long long)id * dim + (long long)c * C, src + (long long)r * dim + (long long)c * C);
}

extern "C" __global__ void lm_scatter_rows(const T* __restrict__ src, const int* __restrict__ ids, T* __restrict__ table, int rows,
                                           int dim, int table_rows, int segs, int vec) {
    pdl_enter();
    if (vec) {
        lmr_scatter_body<VEC>(src, ids, table, rows, dim, table_rows, segs);
    } else {
        lmr_scatter_body<1>(src, ids, table, rows, dim, table_rows, segs);
    }
}

// ---------------------------------------------------------------------------------------------
// copy: dst[dst_offset + r * dst_stride + i] = src[src_offset + r * src_stride + i], i < len.

template <int C>
__device__ __forceinline__ void lmr_copy_rows_body(const T* __restrict__ src, T* __restrict__ dst, int len, long long src_offset,
                                                   long long src_stride, long long dst_offset, long long dst_stride, int segs) {
    int r, c;
    if (!lmr_row_chunk(segs, len / C, r, c)) {
        return;
    }
    long long i = (long long)c * C;
    lmr_copy_c<C>(dst + dst_offset + r * dst_stride + i, src + src_offset + r * src_stride + i);
}

extern "C" __global__ void lm_copy_rows(const T* __restrict__ src, T* __restrict__ dst, int len, long long src_offset,
                                        long long src_stride, long long dst_offset, long long dst_stride, int segs, int vec) {
    pdl_enter();
    if (vec) {
        lmr_copy_rows_body<VEC>(src, dst, len, src_offset, src_stride, dst_offset, dst_stride, segs);
    } else {
        lmr_copy_rows_body<1>(src, dst, len, src_offset, src_stride, dst_offset, dst_stride, segs);
    }
}

// ---------------------------------------------------------------------------------------------
// feedback embedding: with c = codes[s * codes_stride ..],
// out[2s] = out[2s + 1] = scale * (embed[offset + c[0]] + (audio[c[1]] + audio[card + c[2]] + ...)),
// the audio rows summed first in order of level, in f32, exactly the reference's order.

template <int C>
__device__ __forceinline__ void lmr_feedback_body(const T* __restrict__ embed, const T* __restrict__ audio,
                                                  const int* __restrict__ codes, T* __restrict__ out, int dim, int levels,
                                                  int codes_stride, int offset, int card, int embed_rows, float scale,
                                                  int segs) {
    int s, c;
    if (!lmr_row_chunk(segs, dim / C, s, c)) {
        return;
    }
    const int* cs = codes + (long long)s * codes_stride;
    long long at = (long long)c * C;
    float acc[C], x[C];
#pragma unroll
    for (int e = 0; e < C; ++e) acc[e] = 0.f;
#pragma unroll 4
    for (int l = 1; l < levels; ++l) {
        int code = cs[l];
        if (code >= 0 && code < card) {
            load_c<C>(audio + ((long long)(l - 1) * card + code) * dim + at, x);
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] += x[e];
        }
    }
    long long row = (long long)cs[0] + offset;
    if (row >= 0 && row < embed_rows) {
        load_c<C>(embed + row * dim + at, x);
    } else {
#pragma unroll
        for (int e = 0; e < C; ++e) x[e] = 0.f;
    }
#pragma unroll
    for (int e = 0; e < C; ++e) acc[e] = scale * (x[e] + acc[e]);
    T* o = out + (long long)(2 * s) * dim + at;
    store_c<C>(o, acc);
    store_c<C>(o + dim, acc);
}

extern "C" __global__ void lm_feedback_embed(const T* __restrict__ embed, const T* __restrict__ audio, const int* __restrict__ codes,
                                             T* __restrict__ out, int dim, int levels, int codes_stride, int offset, int card,
                                             int embed_rows, float scale, int segs, int vec) {
    pdl_enter();
    if (vec) {
        lmr_feedback_body<VEC>(embed, audio, codes, out, dim, levels, codes_stride, offset, card, embed_rows, scale, segs);
    } else {
        lmr_feedback_body<1>(embed, audio, codes, out, dim, levels, codes_stride, offset, card, embed_rows, scale, segs);
    }
}

// ---------------------------------------------------------------------------------------------
// embed_sum (EmbedSumArgs): out[r] = text[t] (when given and t >= 0) + sum_l audio[l * card + c_l]
// over the present codes, in f32 in that order, rounded once; an entry past its table adds nothing.

template <int C>
__device__ __forceinline__ void lmr_embed_sum_body(const T* __restrict__ text, const T* __restrict__ audio,
                                                   const int* __restrict__ ids, T* __restrict__ out, int dim, int stride,
                                                   int text_col, int codes_col, int levels, int card, int text_rows,
                                                   int segs) {
    int r, c;
    if (!lmr_row_chunk(segs, dim / C, r, c)) {
        return;
    }
    const int* row = ids + (long long)r * stride;
    long long at = (long long)c * C;
    float acc[C], x[C];
#pragma unroll
    for (int e = 0; e < C; ++e) acc[e] = 0.f;
    if (text != nullptr) {
        int t = row[text_col];
        if (t >= 0 && t < text_rows) {
            load_c<C>(text + (long long)t * dim + at, x);
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] += x[e];
        }
    }
#pragma unroll 4
    for (int l = 0; l < levels; ++l) {
        int code = row[codes_col + l];
        if (code >= 0 && code < card) {
            load_c<C>(audio + ((long long)l * card + code) * dim + at, x);
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] += x[e];
        }
    }
    store_c<C>(out + (long long)r * dim + at, acc);
}

extern "C" __global__ void lm_embed_sum(const T* __restrict__ text, const T* __restrict__ audio, const int* __restrict__ ids,
                                        T* __restrict__ out, int dim, int stride, int text_col, int codes_col, int levels,
                                        int card, int text_rows, int segs, int vec) {
    pdl_enter();
    if (vec) {
        lmr_embed_sum_body<VEC>(text, audio, ids, out, dim, stride, text_col, codes_col, levels, card, text_rows, segs);
    } else {
        lmr_embed_sum_body<1>(text, audio, ids, out, dim, stride, text_col, codes_col, levels, card, text_rows, segs);
    }
}

// ---------------------------------------------------------------------------------------------
// Fused residual add + RMSNorm: one block per row.

// Sum of v over the block, the same value in every thread, in a fixed order for a given block
// width (so a row's result does not depend on the number of rows). Called once per kernel.
__device__ __forceinline__ float lmr_block_sum(float v) {
    __shared__ float partial[32];
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    int warp = threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (lane == 0) {
        partial[warp] = v;
    }
    __syncthreads();
    v = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// x = residual (+ delta) in f32; the sum of squares is taken on that f32 x, residual stores x
// rounded to T, and out = x * rsqrt(mean(x^2) + eps) * w is computed from the f32 x and rounded
// once (as nano-vllm's add_rms_forward, which squares the f32 sum, not the stored residual). In
// f32 storage the two coincide.
//
// CACHED: each thread keeps its LMR_NORM_ITEMS chunks (and their weights, loaded with them) in
// registers between the two passes (the host picks this whenever the row fits:
// LMR_NORM_MAX_THREADS * LMR_NORM_ITEMS chunks). Else the second pass recomputes x from residual
// and delta, which the first pass left untouched, so both paths give the same bits.
template <int C, bool CACHED>
__device__ __forceinline__ void lmr_rms_norm_body(T* residual, const T* __restrict__ delta, const T* __restrict__ weight,
                                                  T* __restrict__ out, int dim, float eps) {
    int chunks = dim / C;
    long long base = (long long)blockIdx.x * dim;
    T* x = residual + base;
    const T* d = delta ? delta + base : nullptr;
    float ss = 0.f;
    float cache[CACHED ? LMR_NORM_ITEMS : 1][C], wcache[CACHED ? LMR_NORM_ITEMS : 1][C];
    float v[C], dv[C], w[C];
    if constexpr (CACHED) {
#pragma unroll
        for (int k = 0; k < LMR_NORM_ITEMS; ++k) {
            int c = threadIdx.x + k * blockDim.x;
            if (c < chunks) {
                load_c<C>(x + c * C, cache[k]);
                load_c<C>(weight + c * C, wcache[k]);  // off the critical path after the reduction
                if (d) {
                    load_c<C>(d + c * C, dv);
#pragma unroll
                    for (int e = 0; e < C; ++e) cache[k][e] += dv[e];
                }
#pragma unroll
                for (int e = 0; e < C; ++e) ss += cache[k][e] * cache[k][e];
            }
        }
    } else {
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            load_c<C>(x + c * C, v);
            if (d) {
                load_c<C>(d + c * C, dv);
#pragma unroll
                for (int e = 0; e < C; ++e) v[e] += dv[e];
            }
#pragma unroll
            for (int e = 0; e < C; ++e) ss += v[e] * v[e];
        }
    }
    // The barrier inside also orders pass 1's reads of `residual` before pass 2's writes.
    float inv = rsqrtf(lmr_block_sum(ss) / (float)dim + eps);
    T* o = out + base;
    if constexpr (CACHED) {
#pragma unroll
        for (int k = 0; k < LMR_NORM_ITEMS; ++k) {
            int c = threadIdx.x + k * blockDim.x;
            if (c < chunks) {
                if (d) {
                    store_c<C>(x + c * C, cache[k]);
                }
#pragma unroll
                for (int e = 0; e < C; ++e) v[e] = cache[k][e] * inv * wcache[k][e];
                store_c<C>(o + c * C, v);
            }
        }
    } else {
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            load_c<C>(x + c * C, v);
            if (d) {
                load_c<C>(d + c * C, dv);
#pragma unroll
                for (int e = 0; e < C; ++e) v[e] += dv[e];
                store_c<C>(x + c * C, v);
            }
            load_c<C>(weight + c * C, w);
#pragma unroll
            for (int e = 0; e < C; ++e) v[e] = v[e] * inv * w[e];
            store_c<C>(o + c * C, v);
        }
    }
}

// One block per row; `delta` may be null. vec: dim is a multiple of VEC; cached: see above.
extern "C" __global__ void __launch_bounds__(LMR_NORM_MAX_THREADS)
    lm_rms_norm(T* residual, const T* __restrict__ delta, const T* __restrict__ weight, T* __restrict__ out, int dim, float eps,
                int vec, int cached) {
    pdl_enter();
    if (vec) {
        if (cached) {
            lmr_rms_norm_body<VEC, true>(residual, delta, weight, out, dim, eps);
        } else {
            lmr_rms_norm_body<VEC, false>(residual, delta, weight, out, dim, eps);
        }
    } else {
        if (cached) {
            lmr_rms_norm_body<1, true>(residual, delta, weight, out, dim, eps);
        } else {
            lmr_rms_norm_body<1, false>(residual, delta, weight, out, dim, eps);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// x[r] += table[row] for r < n (`trow` already points at the table row).

template <int C>
__device__ __forceinline__ void lmr_add_row_body(T* __restrict__ x, const T* __restrict__ trow, int dim, int segs) {
    int r, c;
    if (!lmr_row_chunk(segs, dim / C, r, c)) {
        return;
    }
    T* p = x + (long long)r * dim + (long long)c * C;
    float v[C], t[C];
    load_c<C>(p, v);
    load_c<C>(trow + (long long)c * C, t);
#pragma unroll
    for (int e = 0; e < C; ++e) v[e] += t[e];
    store_c<C>(p, v);
}

extern "C" __global__ void lm_add_row(T* __restrict__ x, const T* __restrict__ trow, int dim, int segs, int vec) {
    pdl_enter();
    if (vec) {
        lmr_add_row_body<VEC>(x, trow, dim, segs);
    } else {
        lmr_add_row_body<1>(x, trow, dim, segs);
    }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU: out[i, j] = silu(x[i, j]) * x[i, inter + j], silu(a) = a / (1 + exp(-a)).

template <int C>
__device__ __forceinline__ void lmr_swiglu_body(const T* __restrict__ x, T* __restrict__ out, int inter, int segs) {
    int r, c;
    if (!lmr_row_chunk(segs, inter / C, r, c)) {
        return;
    }
    const T* gate = x + (long long)r * 2 * inter + (long long)c * C;
    float g[C], u[C];
    load_c<C>(gate, g);
    load_c<C>(gate + inter, u);
#pragma unroll
    for (int e = 0; e < C; ++e) g[e] = g[e] / (1.f + expf(-g[e])) * u[e];
    store_c<C>(out + (long long)r * inter + (long long)c * C, g);
}

extern "C" __global__ void lm_swiglu(const T* __restrict__ x, T* __restrict__ out, int inter, int segs, int vec) {
    pdl_enter();
    if (vec) {
        lmr_swiglu_body<VEC>(x, out, inter, segs);
    } else {
        lmr_swiglu_body<1>(x, out, inter, segs);
    }
}

// ---------------------------------------------------------------------------------------------
// Per-head q/k RMSNorm (when `normed`; else none: Llama-style models), then rotate-half RoPE, in
// place on the q heads then the k heads of each token (v is untouched). Two layouts: the vector layout below (groups of lanes per head, 16-byte
// accesses) for the usual head sizes, and a fallback of one warp per head in which lane l holds E
// consecutive elements of each half at j = l * E + 32 * E * i (E == 2, one 4-byte bf16 pair or
// 8-byte float pair, when the half is a multiple of 64; else E == 1).

template <int E>
__device__ __forceinline__ void lmr_load_e(const T* p, float* f) {
    if constexpr (E == 2) {
#if CHORUS_BF16
        unsigned w = *reinterpret_cast<const unsigned*>(p);
        f[0] = __uint_as_float(w << 16);
        f[1] = __uint_as_float(w & 0xffff0000u);
#else
        float2 v = *reinterpret_cast<const float2*>(p);
        f[0] = v.x;
        f[1] = v.y;
#endif
    } else {
        f[0] = ld(p);
    }
}

template <int E>
__device__ __forceinline__ void lmr_store_e(T* p, const float* f) {
    if constexpr (E == 2) {
#if CHORUS_BF16
        *reinterpret_cast<unsigned*>(p) = (unsigned)to_bf16_bits(f[0]) | ((unsigned)to_bf16_bits(f[1]) << 16);
#else
        *reinterpret_cast<float2*>(p) = make_float2(f[0], f[1]);
#endif
    } else {
        st(p, f[0]);
    }
}

template <int E>
__device__ __forceinline__ void lmr_load_f32_e(const float* p, float* f) {
    if constexpr (E == 2) {
        float2 v = *reinterpret_cast<const float2*>(p);
        f[0] = v.x;
        f[1] = v.y;
    } else {
        f[0] = *p;
    }
}

// y1 = a * inv * w1, y2 = b * inv * w2, then the rotation by (c, s), in place at x1 and x2.
template <int E>
__device__ __forceinline__ void lmr_rope_store(T* x1, T* x2, const float* a, const float* b, const float* w1, const float* w2,
                                               const float* c, const float* s, float inv) {
    float y1[E], y2[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
        float u = a[e] * inv * w1[e];
        float v = b[e] * inv * w2[e];
        y1[e] = u * c[e] - v * s[e];
        y2[e] = v * c[e] + u * s[e];
    }
    lmr_store_e<E>(x1, y1);
    lmr_store_e<E>(x2, y2);
}

// Fallback layout (a half that the vector layout does not tile): one warp per head, two passes,
// the second reloading x (from L1: this warp just read it).
template <int E>
__device__ __forceinline__ void lmr_qk_norm_rope_body(T* qkv, const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                                                      const float* __restrict__ rope, const int* __restrict__ start, int tokens,
                                                      int time, int q_heads, int kv_heads, int head_dim, int max_pos,
                                                      float eps, bool normed) {
    int heads = q_heads + kv_heads;
    long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (warp >= (long long)tokens * heads) {
        return;  // the whole warp: blocks are whole warps
    }
    int tok = (int)(warp / heads);
    int h = (int)(warp % heads);
    int half = head_dim / 2;
    int width = (q_heads + 2 * kv_heads) * head_dim;
    T* x = qkv + (long long)tok * width + (long long)h * head_dim;
    const T* w = h < q_heads ? q_norm : k_norm;
    int p = start[tok / time] + tok % time;
    p = min(max(p, 0), max_pos - 1);
    const float* cs = rope + (long long)p * head_dim;
    const float* sn = cs + half;
    float a[E], b[E];
    float inv = 1.f;
    if (normed) {
        float ss = 0.f;
        for (int j = lane * E; j < half; j += 32 * E) {
            lmr_load_e<E>(x + j, a);
            lmr_load_e<E>(x + half + j, b);
#pragma unroll
            for (int e = 0; e < E; ++e) ss += a[e] * a[e] + b[e] * b[e];
        }
        for (int o = 16; o > 0; o >>= 1) {
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        }
        inv = rsqrtf(ss / (float)head_dim + eps);
    }
    // Each lane rewrites only the elements it read: no hazard between lanes.
    for (int j = lane * E; j < half; j += 32 * E) {
        float w1[E], w2[E], c[E], s[E];
        lmr_load_e<E>(x + j, a);
        lmr_load_e<E>(x + half + j, b);
        if (normed) {
            lmr_load_e<E>(w + j, w1);
            lmr_load_e<E>(w + half + j, w2);
        } else {
#pragma unroll
            for (int e = 0; e < E; ++e) w1[e] = w2[e] = 1.f;
        }
        lmr_load_f32_e<E>(cs + j, c);
        lmr_load_f32_e<E>(sn + j, s);
        lmr_rope_store<E>(x + j, x + half + j, a, b, w1, w2, c, s, inv);
    }
}

// Vector layout, the host's choice when a 16-byte vector divides each half and G = half / VEC is
// a power of two <= 32 (head_dim 128: 8 lanes per head in bf16, 16 in f32): a group of G lanes per
// head, lane g holding x[g * VEC ..) and x[half + g * VEC ..) in one 16-byte access each, so a
// warp normalises and rotates 32 / G heads with every input loaded once, before the reduction.
// Lanes past the last head compute on head 0 and store nothing (their group's shuffles must run).
// `sink(live, tok, h, x1, x2, y1, y2)` takes head h of token tok: its halves' addresses in qkv
// and their normed, rotated values (every lane of the head's group calls it, `live` or not, so it
// may shuffle within the group).
template <typename Sink>
__device__ __forceinline__ void lmr_qk_vec_body(T* qkv, const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                                                const float* __restrict__ rope, const int* __restrict__ start, int tokens,
                                                int time, int q_heads, int kv_heads, int head_dim, int max_pos, float eps,
                                                bool normed, int group, Sink sink) {
    int heads = q_heads + kv_heads;
    long long total = (long long)tokens * heads;
    long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if ((thread - threadIdx.x % 32) / group >= total) {
        return;  // the whole warp is past the last head
    }
    long long head = thread / group;
    bool live = head < total;
    if (!live) {
        head = 0;
    }
    int g = threadIdx.x % group;
    int tok = (int)(head / heads);
    int h = (int)(head % heads);
    int half = head_dim / 2;
    int width = (q_heads + 2 * kv_heads) * head_dim;
    T* x1 = qkv + (long long)tok * width + (long long)h * head_dim + g * VEC;
    T* x2 = x1 + half;
    const T* w = normed ? (h < q_heads ? q_norm : k_norm) + g * VEC : nullptr;
    int p = start[tok / time] + tok % time;
    p = min(max(p, 0), max_pos - 1);
    const float* cs = rope + (long long)p * head_dim + g * VEC;
    const float* sn = cs + half;
    float a[VEC], b[VEC], w1[VEC], w2[VEC], c[VEC], sv[VEC];
    load_c<VEC>(x1, a);
    load_c<VEC>(x2, b);
    if (normed) {
        load_c<VEC>(w, w1);
        load_c<VEC>(w + half, w2);
    } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) w1[e] = w2[e] = 1.f;
    }
#pragma unroll
    for (int q = 0; q < VEC / 4; ++q) {
        float4 cq = reinterpret_cast<const float4*>(cs)[q];
        float4 sq = reinterpret_cast<const float4*>(sn)[q];
        c[4 * q] = cq.x, c[4 * q + 1] = cq.y, c[4 * q + 2] = cq.z, c[4 * q + 3] = cq.w;
        sv[4 * q] = sq.x, sv[4 * q + 1] = sq.y, sv[4 * q + 2] = sq.z, sv[4 * q + 3] = sq.w;
    }
    float inv = 1.f;
    if (normed) {
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) ss += a[e] * a[e] + b[e] * b[e];
        for (int o = group / 2; o > 0; o >>= 1) {
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        }
        inv = rsqrtf(ss / (float)head_dim + eps);
    }
    float y1[VEC], y2[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        float u = a[e] * inv * w1[e];
        float v = b[e] * inv * w2[e];
        y1[e] = u * c[e] - v * sv[e];
        y2[e] = v * c[e] + u * sv[e];
    }
    sink(live, tok, h, x1, x2, y1, y2);
}

// The rotated halves back into qkv.
struct LmrStoreHead {
    __device__ __forceinline__ void operator()(bool live, int, int, T* x1, T* x2, const float* y1,
                                               const float* y2) const {
        if (live) {
            store_c<VEC>(x1, y1);
            store_c<VEC>(x2, y2);
        }
    }
};

// group > 0: the vector layout with `group` lanes per head; else the fallback with E == 2 when
// `pair` (else 1). normed == 0: q_norm and k_norm are not read (they may be null).
extern "C" __global__ void lm_qk_norm_rope(T* qkv, const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                                           const float* __restrict__ rope, const int* __restrict__ start, int tokens, int time,
                                           int q_heads, int kv_heads, int head_dim, int max_pos, float eps, int normed,
                                           int group, int pair) {
    pdl_enter();
#define LMR_QK_ARGS qkv, q_norm, k_norm, rope, start, tokens, time, q_heads, kv_heads, head_dim, max_pos, eps, normed != 0
    if (group > 0) {
        lmr_qk_vec_body(LMR_QK_ARGS, group, LmrStoreHead{});
    } else if (pair) {
        lmr_qk_norm_rope_body<2>(LMR_QK_ARGS);
    } else {
        lmr_qk_norm_rope_body<1>(LMR_QK_ARGS);
    }
#undef LMR_QK_ARGS
}
