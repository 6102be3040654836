// Decode attention on the tensor cores (bf16 storage, sm_80+; head_dim 128, a GQA group of up to
// 8 query heads per kv head), over caches in the storage type or 8-bit (E4M3 and a scale per
// head vector, sm_89+). The blocks, splits, partials and combine are lm_paged_attention's; only
// the inner loop differs. The plain decode kernel spends 8 FMAs per key channel and lane on a
// group of 4 (and 3 conversions per 2 values over 8-bit caches): at the copy bandwidth that is
// the SMs' whole issue rate. Here the products are mma.m16n8k16, so the loop is loads and
// conversions.
//
// One block of PAM_WARPS warps per (row, kv head, split); warp w takes the split's keys in steps
// of PAM_KEYS (16), steps w, w + PAM_WARPS, ..., each with its own streaming softmax (base 2);
// the warps merge through shared memory (pa_merge_store). Lane (g = lane / 4, t = lane % 4):
// - scores S = Q K^T as two n8 tiles of keys: A = the group's queries (rows = heads, zero past
//   G), B = K^T. A lane loads channels 32 t .. 32 t + 31 of keys k0 + g and k0 + 8 + g, and k-step
//   s takes chunk channels 4 s .. 4 s + 3 (a permutation of the channels applied to Q and K
//   alike), so every load is 16 bytes and no shuffle forms a fragment. The lane's scores are
//   S[head g][keys 8 j + 2 t, 8 j + 2 t + 1], j = 0, 1.
// - outputs O^T = V^T P^T: A = V^T (rows = channels, k = the step's 16 keys), B = P^T (k = keys,
//   columns = heads), so the lane's scores are its B fragment as they stand. Output tile i holds
//   channels 16 g + i (row g) and 16 g + 8 + i (row g + 8): a lane loads channels 16 g .. 16 g + 15
//   of keys 2 t, 2 t + 1, 2 t + 8, 2 t + 9 (the keys of its scores) and pairs two keys' values of
//   one channel into a fragment register with a byte permute. Its accumulators are O[heads 2 t,
//   2 t + 1][those channels].
// - 8-bit caches: E4M3 becomes f16 exactly (cvt.rn.f16x2.e4m3x2), the products are f16 with the
//   queries rounded to f16; a key's scale multiplies its scores, a value's scale its weight in P
//   (after the sum of weights is taken).
// Weights enter the products rounded to bf16 (f16 over 8-bit caches); sums are f32.

#define PAM_WARPS 4
#define PAM_KEYS 16
#define PAM_D 128

#if MMA_ENABLED
__device__ __forceinline__ void pam_mma_f16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// f16x2 of (lo, hi), rounded to nearest even: lo in the low half.
__device__ __forceinline__ unsigned pam_f16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The two E4M3 values of the low 16 bits (low byte first) as an f16x2, exactly.
__device__ __forceinline__ unsigned pam_e4m3x2(unsigned v) {
#if __CUDA_ARCH__ >= 890
    unsigned h2;
    unsigned short b = (unsigned short)(v & 0xffffu);
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(b));
    return h2;
#else
    __trap();
    return 0u;
#endif
}

// A pair of weights as the products' input type.
template <bool KV8>
__device__ __forceinline__ unsigned pam_pack(float lo, float hi) {
    if constexpr (KV8) {
        return pam_f16x2(lo, hi);
    } else {
        return bf16x2_rn(lo, hi);
    }
}

template <bool KV8>
__device__ __forceinline__ void pam_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    if constexpr (KV8) {
        pam_mma_f16(c, a, b0, b1);
    } else {
        mma_bf16(c, a, b0, b1);
    }
}

__device__ __forceinline__ unsigned pam_word(const uint4* v, int i) {
    const uint4 x = v[i / 4];
    const int k = i % 4;
    return k == 0 ? x.x : k == 1 ? x.y : k == 2 ? x.z : x.w;
}

template <int G, bool KV8>
__device__ __forceinline__ void pam_decode(const T* __restrict__ qkv, const typename KvT<KV8>::elem* __restrict__ k_cache,
                                           const typename KvT<KV8>::elem* __restrict__ v_cache,
                                           const int* __restrict__ tables, const int* __restrict__ start,
                                           T* __restrict__ out, float* __restrict__ part,
                                           const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                                           const PagedDims& d) {
    typedef typename KvT<KV8>::elem KE;
    constexpr int D = PAM_D;
    constexpr int KS = D / 16;                    // k-steps of a score tile
    constexpr int EB = KV8 ? 1 : 2;               // bytes per cache element
    constexpr int KL = D / 4 * EB / 16;           // 16-byte loads of a lane's key chunk
    constexpr int VL = D / 8 * EB / 16;           // 16-byte loads of a lane's value chunk
    constexpr int PER = 16 / EB;                  // elements per 16-byte load
    constexpr int MT = D / 16;                    // output tiles (16 channels each)
    extern __shared__ float pa_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int s = blockIdx.x % d.splits;
    const int pair = blockIdx.x / d.splits;
    const int h = pair % d.kv_heads;
    const int r = pair / d.kv_heads;
    const int n = start[r] + 1;
    const int lo = pa_first_key(start[r], d);
    const int split_len = pa_split_len(n - lo, d);
    const int k_begin = lo + s * split_len;
    if (k_begin >= n) {
        return;  // the whole block: no barrier is reached
    }
    const int k_end = min(n, k_begin + split_len);
    const int width = (d.q_heads + 2 * d.kv_heads) * D;
    const int* table = tables + (long long)r * d.max_blocks;

    // Query fragments of head g (zero past the group): k-step ks takes chunk words 2 ks, 2 ks + 1.
    unsigned qa[KS][2];
    {
        const T* q = qkv + (long long)r * width + (h * G + min(g, G - 1)) * D + (D / 4) * t;
#pragma unroll
        for (int w = 0; w < D / 32; ++w) {
            const uint4 v = g < G ? *reinterpret_cast<const uint4*>(q + 8 * w) : make_uint4(0u, 0u, 0u, 0u);
            const unsigned wd[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                unsigned x = wd[i];
                if constexpr (KV8) {
                    x = pam_f16x2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u));
                }
                qa[(4 * w + i) / 2][(4 * w + i) % 2] = x;
            }
        }
    }

    float m = NEG_INF;  // head g's running maximum (the same in its four lanes)
    float l = 0.f;      // this lane's share of head g's sum of weights
    float acc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
    }
    const KE* k_head = k_cache + h * D;
    const KE* v_head = v_cache + h * D;

    for (int k0 = k_begin + warp * PAM_KEYS; k0 < k_end; k0 += PAM_WARPS * PAM_KEYS) {
        // Every load of the step before any use. Keys past the split reload its last key and are
        // masked below.
        uint4 kr[2][KL], vr[4][VL];
        float ksc[4], vsc[4];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const long long e = pa_entry(table, min(k0 + 8 * j + g, k_end - 1), d);
#pragma unroll
            for (int w = 0; w < KL; ++w) {
                kr[j][w] = *reinterpret_cast<const uint4*>(k_head + e + (D / 4) * t + w * PER);
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            // This lane's score columns and value rows: keys 2t, 2t + 1, 2t + 8, 2t + 9.
            const int key = k0 + 2 * t + (u & 1) + 8 * (u >> 1);
            const long long e = pa_entry(table, min(key, k_end - 1), d);
#pragma unroll
            for (int w = 0; w < VL; ++w) {
                vr[u][w] = *reinterpret_cast<const uint4*>(v_head + e + (D / 8) * g + w * PER);
            }
            if constexpr (KV8) {
                ksc[u] = k_scale[e / D + h];
                vsc[u] = v_scale[e / D + h];
            }
        }

        // Scores: sc[j][0..1] = S[head g][keys k0 + 8 j + 2 t, + 1] (entries 2, 3: the zero rows).
        float sc[2][4];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[j][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                unsigned b0, b1;
                if constexpr (KV8) {
                    const unsigned w = pam_word(kr[j], ks);
                    b0 = pam_e4m3x2(w);
                    b1 = pam_e4m3x2(w >> 16);
                } else {
                    b0 = pam_word(kr[j], 2 * ks);
                    b1 = pam_word(kr[j], 2 * ks + 1);
                }
                const unsigned a[4] = {qa[ks][0], 0u, qa[ks][1], 0u};
                pam_mma<KV8>(sc[j], a, b0, b1);
            }
        }
        float x[4];  // keys 2t, 2t + 1, 2t + 8, 2t + 9 (u order)
        float mt = NEG_INF;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int key = k0 + 2 * t + (u & 1) + 8 * (u >> 1);
            float v = sc[u >> 1][u & 1] * d.scale;
            if constexpr (KV8) {
                v *= ksc[u];
            }
            x[u] = key < k_end ? v : NEG_INF;
            mt = fmaxf(mt, x[u]);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        const float mn = fmaxf(m, mt);
        // Nothing seen yet (every key masked): keep everything at zero.
        const float ref = mn == NEG_INF ? 0.f : mn;
        const float alpha = exp2f(m - ref);
        m = mn;
        float p[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            p[u] = g < G ? exp2f(x[u] - ref) : 0.f;
        }
        l = l * alpha + ((p[0] + p[1]) + (p[2] + p[3]));
        // The accumulators are heads 2t and 2t + 1: their factors live in lanes 8t and 8t + 4.
        const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * t);
        const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * t + 4);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            acc[i][0] *= a0;
            acc[i][1] *= a1;
            acc[i][2] *= a0;
            acc[i][3] *= a1;
        }
        if constexpr (KV8) {
#pragma unroll
            for (int u = 0; u < 4; ++u) p[u] *= vsc[u];
        }
        const unsigned pb0 = pam_pack<KV8>(p[0], p[1]);
        const unsigned pb1 = pam_pack<KV8>(p[2], p[3]);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            // Rows g and g + 8 of tile i: chunk channels i and 8 + i of the four keys.
            unsigned a[4];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int c = i + 8 * half;
#pragma unroll
                for (int kp = 0; kp < 2; ++kp) {
                    const uint4* va = vr[2 * kp];
                    const uint4* vb = vr[2 * kp + 1];
                    unsigned f;
                    if constexpr (KV8) {
                        const int b = c % 4;
                        f = pam_e4m3x2(__byte_perm(pam_word(va, c / 4), pam_word(vb, c / 4), b | ((4 + b) << 4)));
                    } else {
                        f = __byte_perm(pam_word(va, c / 2), pam_word(vb, c / 2), (c % 2) ? 0x7632 : 0x5410);
                    }
                    a[half + 2 * kp] = f;
                }
            }
            pam_mma<KV8>(acc[i], a, pb0, pb1);
        }
    }

    // To shared memory as pa_merge_store reads it: [warp][head][D], then maxima and sums.
    float* sacc = pa_smem;
    float* sm = sacc + PAM_WARPS * G * D;
    float* sl = sm + PAM_WARPS * G;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int head = 2 * t + (e & 1);
            const int c = 16 * g + i + 8 * (e >> 1);
            if (head < G) {
                sacc[(warp * G + head) * D + c] = acc[i][e];
            }
        }
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (t == 0 && g < G) {
        sm[warp * G + g] = m;
        sl[warp * G + g] = l;
    }
    __syncthreads();
    pa_merge_store<D, G, PAM_WARPS>(pa_smem, r, h, s, n - 1, out, part, d);
}
#endif

#if MMA_ENABLED
#define PAM_CASES(KV8, KS_, VS_)                                                                          \
    switch (d.q_heads / d.kv_heads) {                                                                     \
        case 1: pam_decode<1, KV8>(qkv, k_cache, v_cache, tables, start, out, part, KS_, VS_, d); break;  \
        case 2: pam_decode<2, KV8>(qkv, k_cache, v_cache, tables, start, out, part, KS_, VS_, d); break;  \
        case 4: pam_decode<4, KV8>(qkv, k_cache, v_cache, tables, start, out, part, KS_, VS_, d); break;  \
        default: pam_decode<8, KV8>(qkv, k_cache, v_cache, tables, start, out, part, KS_, VS_, d); break; \
    }
#else
#define PAM_CASES(KV8, KS_, VS_)
#endif

// Decode (time == 1, head_dim 128, groups of 1, 2, 4 or 8) over caches in the storage type; the
// host launches it in bf16 storage on sm_80+ only.
extern "C" __global__ void __launch_bounds__(PAM_WARPS * 32, 3)
    lm_paged_attention_mma(const T* __restrict__ qkv, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                           const int* __restrict__ tables, const int* __restrict__ start, T* __restrict__ out,
                           float* __restrict__ part, PagedDims d) {
    pdl_enter();
    PAM_CASES(false, nullptr, nullptr)
}

// The same over 8-bit caches (sm_89+).
extern "C" __global__ void __launch_bounds__(PAM_WARPS * 32, 3)
    lm_paged_attention_mma8(const T* __restrict__ qkv, const unsigned char* __restrict__ k_cache,
                            const unsigned char* __restrict__ v_cache, const int* __restrict__ tables,
                            const int* __restrict__ start, T* __restrict__ out, float* __restrict__ part,
                            const float* __restrict__ k_scale, const float* __restrict__ v_scale, PagedDims d) {
    pdl_enter();
    PAM_CASES(true, k_scale, v_scale)
}
