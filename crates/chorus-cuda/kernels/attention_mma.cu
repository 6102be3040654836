// Streaming sliding-window attention on the tensor cores (bf16 storage, head_dim 64): the contract
// of attention.cu (RoPE, ring writes, an online softmax over each query's window, the same group
// and split layout and the same merge), with the scores and the value sums as mma.m16n8k16
// products. A warp takes up to ATTN_MMA_TILE queries of one (row, head) per pass and walks its
// keys 32 at a time; each lane loads whole 16-byte runs of its key and value rows straight from
// the ring into registers (no shared-memory staging, so many warps stay resident and a chunk's
// 8 KiB are in flight at once). The scalar kernel spent its time issuing per-key FMAs and shuffles
// at 60% of DRAM bandwidth; here a 32-key chunk is 48 products.
//
// Orders inside the products are free (a dot product does not care which k index carries which
// channel, nor the value sum which column carries which channel), so they are picked to make the
// 16-byte runs the fragments:
// - scores S = Q K^T (m = queries, n = keys, k = channels): in k-step s, k indices 2q, 2q+1,
//   2q+8, 2q+9 carry channels 32 (s / 2) + 8q + 4 (s % 2) + {0, 1, 2, 3}, so lane (g, q)
//   (g = lane / 4, q = lane % 4) reads channels [8q, 8q + 8) and [32 + 8q, 40 + 8q) of key g of
//   each 8-key n-tile: each load instruction takes whole 64-byte halves of eight key rows;
// - values O^T = V^T P^T (m = channels, n = queries, k = keys): row g of m-tile t carries channel
//   8g + t and row g + 8 channel 8g + 4 + t, so a lane reads channels [8g, 8g + 8) of its four key
//   rows per k-step. The score accumulators (query g, keys 2q, 2q+1 of an n-tile) are then
//   exactly the B fragments of P^T, as in FlashAttention-2 (Dao 2023, section 3.1), transposed.
// Queries and probabilities enter the products as two bf16 parts (x = hi + lo, about 16 bits
// kept), so scores and sums stay close to the f32 arithmetic of the scalar kernel.

// Queries per pass: rows 0-7 of the m16 score tile (rows 8-15 are zero) and the n8 of the values.
#define ATTN_MMA_TILE 8
// Words of a lane's query fragments (4 k-steps x hi and lo x 2).
#define ATTN_MMA_QWORDS 16
// Resident blocks asked of the compiler (at most 128 registers per thread).
#define ATTN_MMA_MIN_BLOCKS 4

#if MMA_ENABLED
// bf16x2 of (lo, hi), rounded to nearest even: lo in the low half.
__device__ __forceinline__ unsigned bf16x2_rn(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// (x0, x1) = hi + lo with hi and lo bf16x2 pairs: two products carry about 16 bits of each value.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = bf16x2_rn(x0, x1);
    lo = bf16x2_rn(x0 - __uint_as_float(hi << 16), x1 - __uint_as_float(hi & 0xffff0000u));
}

__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The element pair (a[e], b[e]) of two rows' bf16 words, a's element in the low half: e even
// takes the low halves, e odd the high ones.
__device__ __forceinline__ unsigned pair_of(unsigned a, unsigned b, int e) {
    return __byte_perm(a, b, (e & 1) ? 0x7632 : 0x5410);
}

// Ring entry of chunk key kk (clamped to the chunk's last key): the chunk's positions are
// consecutive from ring entry vbase, so the ring wraps at most once inside it.
__device__ __forceinline__ int chunk_entry(int vbase, int kk, int n_chunk, int ring) {
    int e = vbase + min(kk, n_chunk - 1);
    return e >= ring ? e - ring : e;
}

__device__ __forceinline__ void attention_mma_body(const T* __restrict__ qkv, T* kv, const int* __restrict__ tokens,
                                                   const int* __restrict__ slots, T* __restrict__ out,
                                                   const AttnDims& d, int split) {
    constexpr int D = 64;
    constexpr int TT = ATTN_MMA_TILE;
    extern __shared__ float smem[];
    int warp = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int q = lane & 3;
    const AttnPair ap = attn_pair(tokens, slots, d, split);
    const int groups = ap.groups, gw = ap.gw, r = ap.r, h = ap.h, slot = ap.slot, p0 = ap.p0;
    const bool active = ap.active;
    // Queries go span by span as in attention.cu (ATTN_Q_SPAN).
    const int span = min(d.time, ATTN_Q_SPAN);
    float* sq = smem + ap.group * span * D;
    // This warp's query fragments, word-major ([16 words][32 lanes]: conflict-free), kept in
    // shared memory rather than 16 registers through the key loop (which then spilled).
    unsigned* qf = reinterpret_cast<unsigned*>(smem + groups * span * D) + warp * ATTN_MMA_QWORDS * 32;
    float* part = smem + groups * span * D + ATTN_WARPS * ATTN_MMA_QWORDS * 32 + warp * TT * (D + 2);
    int hd = d.heads * D;

    const T* khead = kv_row(kv, slot, h, 0, 0, d);
    const T* vhead = kv_row(kv, slot, h, 1, 0, d);
    // Scores in log2 units: the softmax scale and log2(e) go into the queries.
    const float qscale = rsqrtf((float)D) * 1.4426950408889634f;
    for (int q0 = 0; q0 < d.time; q0 += span) {
    const int qn = min(span, d.time - q0);
    // The last span's reads of sq are done before it is overwritten.
    __syncthreads();
    if (active) attn_rope_write(qkv, kv, sq, r, h, p0, slot, gw, split, q0, qn, d);
    // The ring entries and queries written by the group are visible to all its warps.
    __syncthreads();
    for (int t0 = q0; t0 < q0 + qn; t0 += TT) {
        int nt = min(TT, q0 + qn - t0);
        // Keys any query of this tile can see: positions [first, p0 + t0 + nt - 1].
        int last = p0 + t0 + nt - 1;
        int first = max(p0 + t0 - d.window + 1, 0);
        int nk = active ? last - first + 1 : 0;
        // Query g's A fragments, k-step s: channels 32 (s / 2) + 8q + 4 (s % 2) + {0, 1} and
        // {2, 3}, as hi and lo words 4s + {0, 1} and 4s + {2, 3}.
        {
            const float* qrow = sq + (t0 - q0 + min(g, nt - 1)) * D + 8 * q;
            float z = g < nt ? qscale : 0.f;
            __syncwarp();  // the last tile's reads are done
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                float4 v = *reinterpret_cast<const float4*>(qrow + 32 * (s >> 1) + 4 * (s & 1));
                unsigned h0, l0, h1, l1;
                split_bf16x2(v.x * z, v.y * z, h0, l0);
                split_bf16x2(v.z * z, v.w * z, h1, l1);
                qf[(4 * s) * 32 + lane] = h0;
                qf[(4 * s + 1) * 32 + lane] = h1;
                qf[(4 * s + 2) * 32 + lane] = l0;
                qf[(4 * s + 3) * 32 + lane] = l1;
            }
            __syncwarp();
        }
        int p_g = p0 + t0 + g;  // query g's position
        float m_run = NEG_INF;  // query g's running maximum (log2 units)
        float l_run = 0.f;      // this lane's share of query g's sum
        // O^T: acc[t][0..1] channel 8g + t, queries 2q, 2q + 1; acc[t][2..3] channel 8g + 4 + t.
        float acc[4][4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[t][i] = 0.f;
        }
        for (int kc = gw * 32; kc < nk; kc += split * 32) {
            int vbase = (first + kc) % d.ring;
            int n_chunk = min(32, nk - kc);
            // Every load of the chunk first: key g of n-tile j, then the value rows 2q, 2q + 1,
            // 2q + 8, 2q + 9 of each 16-key k-step.
            uint4 kraw[4][2];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int e = chunk_entry(vbase, j * 8 + g, n_chunk, d.ring);
                const uint4* kp = reinterpret_cast<const uint4*>(khead + (long long)e * D + 8 * q);
                kraw[j][0] = kp[0];
                kraw[j][1] = kp[4];
            }
            uint4 vraw[2][4];
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2) {
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    int e = chunk_entry(vbase, 16 * s2 + 2 * q + (u & 1) + (u >> 1) * 8, n_chunk, d.ring);
                    vraw[s2][u] = *reinterpret_cast<const uint4*>(vhead + (long long)e * D + 8 * g);
                }
            }
            // Scores: c[j][0..1] = S[query g][key j * 8 + 2q + {0, 1}] (c[j][2..3]: zero rows).
            float c[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int i = 0; i < 4; ++i) c[j][i] = 0.f;
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    unsigned b0 = word_of(kraw[j][s >> 1], 2 * (s & 1));
                    unsigned b1 = word_of(kraw[j][s >> 1], 2 * (s & 1) + 1);
                    unsigned ahi[4] = {qf[(4 * s) * 32 + lane], 0u, qf[(4 * s + 1) * 32 + lane], 0u};
                    unsigned alo[4] = {qf[(4 * s + 2) * 32 + lane], 0u, qf[(4 * s + 3) * 32 + lane], 0u};
                    mma_bf16(c[j], ahi, b0, b1);
                    mma_bf16(c[j], alo, b0, b1);
                }
            }
            // Keys outside query g's window (or past the chunk) score -inf.
            float mx = NEG_INF;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    int kk = j * 8 + 2 * q + e;
                    int kpos = first + kc + kk;
                    bool visible = g < nt && kk < n_chunk && kpos <= p_g && kpos > p_g - d.window;
                    c[j][e] = visible ? c[j][e] : NEG_INF;
                    mx = fmaxf(mx, c[j][e]);
                }
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float m_new = fmaxf(m_run, mx);
            // A query with no visible key yet keeps m = -inf, zero probabilities and alpha 1.
            float alpha = m_new == NEG_INF ? 1.f : ex2_approx(m_run - m_new);
            float psum = 0.f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    c[j][e] = c[j][e] == NEG_INF ? 0.f : ex2_approx(c[j][e] - m_new);
                    psum += c[j][e];
                }
            }
            l_run = l_run * alpha + psum;
            m_run = m_new;
            // Rescale the value sums of queries 2q and 2q + 1 (held by lanes 8q and 8q + 4).
            float alpha0 = __shfl_sync(0xffffffffu, alpha, 8 * q);
            float alpha1 = __shfl_sync(0xffffffffu, alpha, 8 * q + 4);
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                acc[t][0] *= alpha0;
                acc[t][1] *= alpha1;
                acc[t][2] *= alpha0;
                acc[t][3] *= alpha1;
            }
            // Values: k-step s2 takes keys 16 s2 + [0, 16), the score n-tiles 2 s2 and 2 s2 + 1.
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2) {
                unsigned bhi0, blo0, bhi1, blo1;
                split_bf16x2(c[2 * s2][0], c[2 * s2][1], bhi0, blo0);
                split_bf16x2(c[2 * s2 + 1][0], c[2 * s2 + 1][1], bhi1, blo1);
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    int lo = t >> 1;      // word of channel 8g + t
                    int hi = 2 + (t >> 1);  // word of channel 8g + 4 + t
                    unsigned a[4] = {
                        pair_of(word_of(vraw[s2][0], lo), word_of(vraw[s2][1], lo), t),
                        pair_of(word_of(vraw[s2][0], hi), word_of(vraw[s2][1], hi), t),
                        pair_of(word_of(vraw[s2][2], lo), word_of(vraw[s2][3], lo), t),
                        pair_of(word_of(vraw[s2][2], hi), word_of(vraw[s2][3], hi), t),
                    };
                    mma_bf16(acc[t], a, bhi0, bhi1);
                    mma_bf16(acc[t], a, blo0, blo1);
                }
            }
        }
        // Query g's sum over its quad, then each lane's two queries' maxima and sums.
        float l_g = l_run + __shfl_xor_sync(0xffffffffu, l_run, 1);
        l_g += __shfl_xor_sync(0xffffffffu, l_g, 2);
        int qa = 2 * q;
        int qb = 2 * q + 1;
        float l0 = __shfl_sync(0xffffffffu, l_g, 8 * q);
        float l1 = __shfl_sync(0xffffffffu, l_g, 8 * q + 4);
        if (split == 1) {
            T* o = out + ((long long)r * d.time + t0) * hd + h * D + 8 * g;
            float f[8];
            if (active && qa < nt) {
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    f[t] = acc[t][0] / l0;
                    f[4 + t] = acc[t][2] / l0;
                }
                *reinterpret_cast<uint4*>(o + (long long)qa * hd) = pack(f);
            }
            if (active && qb < nt) {
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    f[t] = acc[t][1] / l1;
                    f[4 + t] = acc[t][3] / l1;
                }
                *reinterpret_cast<uint4*>(o + (long long)qb * hd) = pack(f);
            }
            continue;
        }
        // Partials for attn_merge: m in natural-log units, l, and acc by query and channel.
        if (q == 0 && g < nt) {
            part[g] = m_run == NEG_INF ? NEG_INF : m_run * 0.6931471805599453f;
            part[TT + g] = l_g;
        }
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            if (qa < nt) {
                part[2 * TT + qa * D + 8 * g + t] = acc[t][0];
                part[2 * TT + qa * D + 8 * g + 4 + t] = acc[t][2];
            }
            if (qb < nt) {
                part[2 * TT + qb * D + 8 * g + t] = acc[t][1];
                part[2 * TT + qb * D + 8 * g + 4 + t] = acc[t][3];
            }
        }
        __syncthreads();
        if (gw == 0 && active) {
            attn_merge<TT>(part, split, nt, D, out + ((long long)r * d.time + t0) * hd + h * D, hd);
        }
        // The next tile reuses the partials.
        __syncthreads();
    }
    }
}
#endif

// `split` is 1 or ATTN_WARPS (chosen by the host, as for attention_d64).
extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32, ATTN_MMA_MIN_BLOCKS)
    attention_mma_d64(const T* __restrict__ qkv, T* kv, const int* __restrict__ tokens,
                      const int* __restrict__ slots, T* __restrict__ out, AttnDims d, int split) {
    pdl_enter();
#if MMA_ENABLED
    attention_mma_body(qkv, kv, tokens, slots, out, d, split);
#endif
}
