// Streaming sliding-window attention. A group of `split` warps takes one (row, head): it applies
// rotate-half RoPE (Su et al. 2021, "RoFormer", eq. 34, in the HF rotate-half layout) to the
// step's queries and keys, writes k and v into the slot's KV ring, then attends the step's
// queries, up to ATTN_MAX_TIME at a time, over their window in one pass with an online softmax
// (Milakov and Gimelshein 2018, "Online normalizer calculation for softmax"). Per chunk of 32 keys
// each lane scores one key (its row is one contiguous read), the chunk's probabilities are
// broadcast by shuffles, and each lane accumulates its own D / 32 output channels of the values
// (each value row is one coalesced read by the warp): keys and values are read once, and a head's
// keys (and values) lie in one contiguous run of the ring (see `kv_row`). Large
// batches run one warp per (row, head) (split = 1); small ones split the keys over the block's
// warps and merge their partial softmaxes in shared memory (split = ATTN_WARPS).

#define ATTN_WARPS 4
#define ATTN_MAX_TIME 4
// Query tokens of a step whose rotated queries sit in shared memory at once: a longer step goes
// span by span (its keys and values written span by span too), so shared memory does not bound
// the frames per step. A multiple of ATTN_MAX_TIME and of ATTN_MMA_TILE.
#define ATTN_Q_SPAN 64
// Value rows loaded before any is used (loads in flight per lane).
#define ATTN_V_UNROLL 16

// Ring entry `pos` of a slot's head h (k: which = 0, v: which = 1). The ring is
// [slots, heads, 2, ring, head_dim]: a head's keys, and its values, are contiguous runs.
__device__ __forceinline__ T* kv_row(T* kv, int slot, int h, int which, int pos, const AttnDims& d) {
    return kv + ((((long long)slot * d.heads + h) * 2 + which) * d.ring + pos % d.ring) * d.head_dim;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// DPL consecutive values of a row as f32.
template <int DPL>
__device__ __forceinline__ void load_dpl(const T* p, float* v) {
#if CHORUS_BF16
    if constexpr (DPL == 4) {
        uint2 u = *reinterpret_cast<const uint2*>(p);
        v[0] = __uint_as_float(u.x << 16);
        v[1] = __uint_as_float(u.x & 0xffff0000u);
        v[2] = __uint_as_float(u.y << 16);
        v[3] = __uint_as_float(u.y & 0xffff0000u);
        return;
    }
    if constexpr (DPL == 2) {
        unsigned u = *reinterpret_cast<const unsigned*>(p);
        v[0] = __uint_as_float(u << 16);
        v[1] = __uint_as_float(u & 0xffff0000u);
        return;
    }
#endif
#pragma unroll
    for (int i = 0; i < DPL; ++i) v[i] = ld(p + i);
}

// RoPE on the step's q of tokens [q0, q0 + qn) (into sq, from row 0) and k, and k, v into ring
// entries p % ring, for one (row, head); the `split` warps of its group share the items.
__device__ __forceinline__ void attn_rope_write(const T* __restrict__ qkv, T* kv, float* sq, int r, int h, int p0,
                                                int slot, int gw, int split, int q0, int qn, const AttnDims& d) {
    int D = d.head_dim;
    int half_d = D / 2;
    int hd = d.heads * D;
    float log2_theta = log2f(d.rope_theta);
    int lane = threadIdx.x & 31;
    for (int idx = gw * 32 + lane; idx < qn * half_d; idx += split * 32) {
        int t = q0 + idx / half_d;
        int i = idx % half_d;
        int p = p0 + t;
        const T* row = qkv + ((long long)r * d.time + t) * 3 * hd + h * D;
        // inv_freq = theta^(-2i/D) as in f32 references; the angle is reduced modulo 2*pi in
        // double so that long streams keep their phase.
        float inv_freq = exp2f(-(float)(2 * i) / (float)D * log2_theta);
        double turns = (double)p * (double)inv_freq * 0.15915494309189535;
        float angle = (float)((turns - floor(turns)) * 6.283185307179586);
        float sn, cs;
        sincosf(angle, &sn, &cs);
        float q1 = ld(row + i), q2 = ld(row + i + half_d);
        sq[(t - q0) * D + i] = q1 * cs - q2 * sn;
        sq[(t - q0) * D + i + half_d] = q2 * cs + q1 * sn;
        float k1 = ld(row + hd + i), k2 = ld(row + hd + i + half_d);
        T* k_entry = kv_row(kv, slot, h, 0, p, d);
        T* v_entry = kv_row(kv, slot, h, 1, p, d);
        st(k_entry + i, k1 * cs - k2 * sn);
        st(k_entry + i + half_d, k2 * cs + k1 * sn);
        st(v_entry + i, ld(row + 2 * hd + i));
        st(v_entry + i + half_d, ld(row + 2 * hd + i + half_d));
    }
}

// The (row, head) pair a warp's group takes (`split` warps per group, ATTN_WARPS per block), and
// where that pair's stream stands. Warps past the last pair take row 0 and stay inactive.
struct AttnPair {
    int groups, group, gw;  // groups per block, this warp's group, its place in the group
    int r, h, slot, p0;     // row, head, the row's slot and its position before this step
    bool active;
};

__device__ __forceinline__ AttnPair attn_pair(const int* __restrict__ tokens, const int* __restrict__ slots,
                                              const AttnDims& d, int split) {
    AttnPair a;
    int warp = threadIdx.x >> 5;
    a.groups = ATTN_WARPS / split;
    a.group = warp / split;
    a.gw = warp % split;
    int pair = blockIdx.x * a.groups + a.group;
    a.active = pair < d.rows * d.heads;
    a.r = a.active ? pair / d.heads : 0;
    a.h = a.active ? pair % d.heads : 0;
    a.slot = slots[a.r];
    a.p0 = tokens[a.slot];
    return a;
}

// Merges the partial softmaxes of a group's `split` warps for queries [0, nt) of a tile of TT:
// out = sum_w e^(m_w - M) acc_w / sum_w e^(m_w - M) l_w. Warp w's partial, at g0 + w * TT * (D + 2),
// is m [TT] (natural-log units), l [TT], acc [TT, D]; out_t0 is the tile's first output row.
template <int TT>
__device__ __forceinline__ void attn_merge(const float* g0, int split, int nt, int D, T* __restrict__ out_t0, int hd) {
    for (int idx = (threadIdx.x & 31); idx < nt * D; idx += 32) {
        int t = idx / D;
        int c = idx % D;
        float mm = NEG_INF;
        for (int w = 0; w < split; ++w) mm = fmaxf(mm, g0[w * TT * (D + 2) + t]);
        float num = 0.f, den = 0.f;
        for (int w = 0; w < split; ++w) {
            const float* pw = g0 + w * TT * (D + 2);
            float e = pw[t] == NEG_INF ? 0.f : __expf(pw[t] - mm);
            num += e * pw[2 * TT + t * D + c];
            den += e * pw[TT + t];
        }
        st(out_t0 + (long long)t * hd + c, num / den);
    }
}

// Shared memory (floats, sized by the host): per group its rotated queries of one span
// [min(time, ATTN_Q_SPAN), D]; then, when split > 1, per warp its partial softmax:
// m [ATTN_MAX_TIME], l [ATTN_MAX_TIME], acc [ATTN_MAX_TIME, D].
template <int D>
__device__ __forceinline__ void attention_body(const T* __restrict__ qkv, T* kv, const int* __restrict__ tokens,
                                               const int* __restrict__ slots, T* __restrict__ out, const AttnDims& d,
                                               int split) {
    constexpr int DPL = D >= 32 ? D / 32 : 1;  // output channels per lane
    extern __shared__ float smem[];
    int warp = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    const AttnPair ap = attn_pair(tokens, slots, d, split);
    const int groups = ap.groups, gw = ap.gw, r = ap.r, h = ap.h, slot = ap.slot, p0 = ap.p0;
    const bool active = ap.active;
    const int span = min(d.time, ATTN_Q_SPAN);
    float* sq = smem + ap.group * span * D;
    float* part = smem + groups * span * D + warp * ATTN_MAX_TIME * (D + 2);
    int hd = d.heads * D;

    // This (slot, head)'s key and value runs in the ring (see kv_row).
    const T* khead = kv_row(kv, slot, h, 0, 0, d);
    const T* vhead = kv_row(kv, slot, h, 1, 0, d);
    float scale = rsqrtf((float)D);
    int c_lane = lane * DPL;
    bool has_c = c_lane < D;
    for (int q0 = 0; q0 < d.time; q0 += span) {
    const int qn = min(span, d.time - q0);
    // The last span's reads of sq are done before it is overwritten.
    __syncthreads();
    if (active) attn_rope_write(qkv, kv, sq, r, h, p0, slot, gw, split, q0, qn, d);
    // The ring entries and queries written by the group are visible to all its warps.
    __syncthreads();
    for (int t0 = q0; t0 < q0 + qn; t0 += ATTN_MAX_TIME) {
        int nt = min(ATTN_MAX_TIME, q0 + qn - t0);
        // Keys any query of this tile can see: positions [first, p0 + t0 + nt - 1].
        int last = p0 + t0 + nt - 1;
        int first = max(p0 + t0 - d.window + 1, 0);
        int nk = active ? last - first + 1 : 0;
        float m[ATTN_MAX_TIME], l[ATTN_MAX_TIME], acc[ATTN_MAX_TIME][DPL];
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) {
            m[t] = NEG_INF;
            l[t] = 0.f;
#pragma unroll
            for (int i = 0; i < DPL; ++i) acc[t][i] = 0.f;
        }
        for (int kc = gw * 32; kc < nk; kc += split * 32) {
            // Scores of this lane's key (past the last key: -inf). All of its row loads first.
            int k = kc + lane;
            int kp = first + min(k, nk - 1);
            // The chunk's positions are consecutive, so the ring wraps at most once inside it:
            // one modulo per chunk for the keys and the values.
            int vbase = (first + kc) % d.ring;
            int ke = vbase + min(k, nk - 1) - kc;
            ke -= ke >= d.ring ? d.ring : 0;
            const uint4* krow = reinterpret_cast<const uint4*>(khead + (long long)ke * D);
            uint4 kraw[D / VEC];
#pragma unroll
            for (int c = 0; c < D / VEC; ++c) kraw[c] = krow[c];
            float s[ATTN_MAX_TIME];
#pragma unroll
            for (int t = 0; t < ATTN_MAX_TIME; ++t) s[t] = 0.f;
#pragma unroll
            for (int c = 0; c < D / VEC; ++c) {
                float kf[VEC];
                unpack(kraw[c], kf);
#pragma unroll
                for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                    if (t < nt) {
                        const float4* q = reinterpret_cast<const float4*>(sq + (t0 - q0 + t) * D + c * VEC);
#pragma unroll
                        for (int e = 0; e < VEC / 4; ++e) {
                            float4 qv = q[e];
                            s[t] += qv.x * kf[4 * e] + qv.y * kf[4 * e + 1] + qv.z * kf[4 * e + 2] + qv.w * kf[4 * e + 3];
                        }
                    }
                }
            }
            // Online softmax: rescale what was accumulated by exp(m_old - m_new).
            float pr[ATTN_MAX_TIME];
#pragma unroll
            for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                pr[t] = 0.f;
                if (t >= nt) continue;
                int p = p0 + t0 + t;
                bool visible = k < nk && kp <= p && kp > p - d.window;
                float sc = visible ? s[t] * scale : NEG_INF;
                float m_new = fmaxf(m[t], warp_max(sc));
                if (m_new == NEG_INF) continue;  // no visible key yet (warp-uniform)
                float alpha = __expf(m[t] - m_new);
                pr[t] = visible ? __expf(sc - m_new) : 0.f;
                l[t] = l[t] * alpha + pr[t];
#pragma unroll
                for (int i = 0; i < DPL; ++i) acc[t][i] *= alpha;
                m[t] = m_new;
            }
            // Values: the chunk's keys one after another, each row read by the whole warp.
            int n_chunk = min(32, nk - kc);
            for (int j0 = 0; j0 < n_chunk; j0 += ATTN_V_UNROLL) {
                float v[ATTN_V_UNROLL][DPL];
#pragma unroll
                for (int u = 0; u < ATTN_V_UNROLL; ++u) {
                    int e = vbase + min(j0 + u, n_chunk - 1);
                    e -= e >= d.ring ? d.ring : 0;
                    if (has_c) load_dpl<DPL>(vhead + (long long)e * D + c_lane, v[u]);
                }
#pragma unroll
                for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                    if (t >= nt) continue;  // warp-uniform
#pragma unroll
                    for (int u = 0; u < ATTN_V_UNROLL; ++u) {
                        float pj = __shfl_sync(0xffffffffu, pr[t], (j0 + u) & 31);
                        if (j0 + u < n_chunk && has_c) {
#pragma unroll
                            for (int i = 0; i < DPL; ++i) acc[t][i] += pj * v[u][i];
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) l[t] = warp_sum(l[t]);
        if (split == 1) {
#pragma unroll
            for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                if (t >= nt || !active || !has_c) continue;
                T* o = out + ((long long)r * d.time + t0 + t) * hd + h * D + c_lane;
#pragma unroll
                for (int i = 0; i < DPL; ++i) st(o + i, acc[t][i] / l[t]);
            }
            continue;
        }
        // Merge the group's partial softmaxes.
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) {
            if (lane == 0) {
                part[t] = m[t];
                part[ATTN_MAX_TIME + t] = l[t];
            }
            if (has_c) {
#pragma unroll
                for (int i = 0; i < DPL; ++i) part[2 * ATTN_MAX_TIME + t * D + c_lane + i] = acc[t][i];
            }
        }
        __syncthreads();
        if (gw == 0 && active) {
            attn_merge<ATTN_MAX_TIME>(part, split, nt, D,
                                      out + ((long long)r * d.time + t0) * hd + h * D, hd);
        }
        // The next tile reuses the partials.
        __syncthreads();
    }
    }
}

// One entry per head dimension; `split` is 1 or ATTN_WARPS (chosen by the host).
extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_d16(const T* __restrict__ qkv, T* kv,
                                                                          const int* __restrict__ tokens,
                                                                          const int* __restrict__ slots,
                                                                          T* __restrict__ out, AttnDims d, int split) {
    pdl_enter();
    attention_body<16>(qkv, kv, tokens, slots, out, d, split);
}

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_d32(const T* __restrict__ qkv, T* kv,
                                                                          const int* __restrict__ tokens,
                                                                          const int* __restrict__ slots,
                                                                          T* __restrict__ out, AttnDims d, int split) {
    pdl_enter();
    attention_body<32>(qkv, kv, tokens, slots, out, d, split);
}

// Mimi's head size. Six resident blocks (80 registers, a few bytes spilled) instead of the 95
// registers and five blocks the compiler picks alone: 0.218 against 0.246 ms per layer at batch
// 1024 on the H200 (eight blocks, 64 registers with more spills: 0.232).
#define ATTN_D64_MIN_BLOCKS 6

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32, ATTN_D64_MIN_BLOCKS) attention_d64(const T* __restrict__ qkv, T* kv,
                                                                          const int* __restrict__ tokens,
                                                                          const int* __restrict__ slots,
                                                                          T* __restrict__ out, AttnDims d, int split) {
    pdl_enter();
    attention_body<64>(qkv, kv, tokens, slots, out, d, split);
}

extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32) attention_d128(const T* __restrict__ qkv, T* kv,
                                                                           const int* __restrict__ tokens,
                                                                           const int* __restrict__ slots,
                                                                           T* __restrict__ out, AttnDims d, int split) {
    pdl_enter();
    attention_body<128>(qkv, kv, tokens, slots, out, d, split);
}
