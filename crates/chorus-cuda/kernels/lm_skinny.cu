// Skinny products on the tensor cores (bf16 storage): out = epilogue(norm?(x)[n, k] . W[rows, k]^T)
// for n <= 64 activation rows, with dense bf16 or int8 (W8A16, dequantised in registers) weights.
// The weights are the A operand of mma.m16n8k16 (16 weight rows per tile) and the activation rows
// the B operand (8 per tile), so a warp streams 16 weight rows at once with 16-byte loads that
// bypass L1, whatever n is.
//
// - k order inside a chunk: lane (g = lane / 4, t = lane % 4) loads 16 bytes of weight rows g and
//   g + 8 at byte 16 t of a 64-byte chunk (32 bf16 or 64 int8 columns) and the matching columns of
//   activation row g; the products take those columns in their own order (a k permutation applied
//   to A and B alike), so no shuffle or shared memory is needed to form fragments.
// - One fixed reduction order per output, whatever n is (batch invariance): block = 8 warps, warp
//   w sums the columns [w k / 8, (w + 1) k / 8) chunk by chunk in order, and the eight partial sums
//   are added in warp order through shared memory. The tile counts (NT activation tiles, MT weight
//   tiles per block) only change which outputs a thread holds, never how one is summed.
// - Norm prologue: B = bf16(x * gamma) and the row's sum of squares of x accumulates beside the
//   product; the epilogue multiplies by rsqrt(mean(x^2) + eps) (so the rows are never written
//   normed). Epilogues: store, add to out (a residual update), or SwiGLU of a fused gate/up weight
//   (tile rows g: gate row j, g + 8: up row inter + j, paired in the epilogue).

#define SK_WARPS 8
#define SK_STORE 0
#define SK_ACC 1
#define SK_SWIGLU 2

// The block's weights are constants: ask L2 for the first 256 bytes of each of its rows' eight k
// slices before waiting on the previous kernel (`m` as in the entry points).
__device__ __forceinline__ void sk_prefetch_weights(const void* w, int k, int m, int epi, int mt, bool q8) {
    const bool swiglu = epi == SK_SWIGLU;
    const int per_block = swiglu ? 8 * mt : 16 * mt;
    const int rows = 16 * mt;
    const size_t esz = q8 ? 1 : 2;
    for (int i = threadIdx.x; i < rows * SK_WARPS * 2; i += blockDim.x) {
        const int line = i & 1, slice = (i >> 1) % SK_WARPS, tr = (i >> 1) / SK_WARPS;
        int row;
        if (swiglu) {
            const int j = min((int)blockIdx.x * per_block + (tr / 16) * 8 + tr % 8, m - 1);
            row = (tr % 16) >= 8 ? m + j : j;
        } else {
            row = min((int)blockIdx.x * per_block + tr, m - 1);
        }
        const char* p = static_cast<const char*>(w) + ((size_t)row * k + (size_t)slice * (k / SK_WARPS)) * esz + 128 * line;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    }
}

#if MMA_ENABLED
__device__ __forceinline__ uint4 sk_ld_w(const unsigned char* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ unsigned sk_word(uint4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Two bf16 (low half first) from two f32.
__device__ __forceinline__ unsigned sk_pack2(float a, float b) {
    return (unsigned)to_bf16_bits(a) | ((unsigned)to_bf16_bits(b) << 16);
}

// Bytes 2h and 2h + 1 of a word of four int8 as a bf16 pair, exactly: each int8 becomes f32 with
// one byte permute and one subtraction (lm_q8.cu), and an integer below 2^8 keeps its f32 high
// half exact.
__device__ __forceinline__ unsigned sk_q8_pair(unsigned w, int h) {
    const unsigned u = w ^ 0x80808080u;
    const float a = __uint_as_float(__byte_perm(u, 0x4B000000u, h ? 0x7542 : 0x7540)) - 8388736.f;
    const float b = __uint_as_float(__byte_perm(u, 0x4B000000u, h ? 0x7543 : 0x7541)) - 8388736.f;
    return __byte_perm(__float_as_uint(a), __float_as_uint(b), 0x7632);
}

// x (8 bf16 in a uint4) times gamma into a bf16 B pair set, adding x^2 to `sq`.
__device__ __forceinline__ uint4 sk_norm_in(uint4 xv, uint4 gv, float& sq) {
    float xf[8], gf[8];
    unpack(xv, xf);
    unpack(gv, gf);
#pragma unroll
    for (int e = 0; e < 8; ++e) sq = fmaf(xf[e], xf[e], sq);
    uint4 o;
    o.x = sk_pack2(xf[0] * gf[0], xf[1] * gf[1]);
    o.y = sk_pack2(xf[2] * gf[2], xf[3] * gf[3]);
    o.z = sk_pack2(xf[4] * gf[4], xf[5] * gf[5]);
    o.w = sk_pack2(xf[6] * gf[6], xf[7] * gf[7]);
    return o;
}

// Pitch (floats) of one warp's partial-sum rows in shared memory: padded against bank conflicts.
#define SK_PITCH(NT) ((NT) * 8 + 1)

template <bool Q8, int NT, int MT>
__device__ __forceinline__ void sk_body(const T* __restrict__ x, const unsigned char* __restrict__ w,
                                        const float* __restrict__ scale, const T* __restrict__ gamma,
                                        T* __restrict__ out, int n, int k, int m, float eps, int epi) {
    // Chunks of 64 bytes per weight row in flight per warp: 64 registers of weights per lane.
    constexpr int U = 8 / MT;
    constexpr int CH = Q8 ? 64 : 32;  // columns per chunk
    constexpr int ESZ = Q8 ? 1 : 2;   // weight bytes per element
    extern __shared__ float sk_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int ks = k / SK_WARPS;
    const int k0 = warp * ks;
    const int chunks = ks / CH;
    const bool swiglu = epi == SK_SWIGLU;
    // Output columns of this block: 16 MT weight rows, or 8 MT gate/up pairs.
    const int per_block = swiglu ? 8 * MT : 16 * MT;
    const int j_base = blockIdx.x * per_block;
    const unsigned char* wrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int row;
            if (swiglu) {
                const int j = min(j_base + mt * 8 + g, m - 1);
                row = h ? m + j : j;
            } else {
                row = min(j_base + mt * 16 + g + 8 * h, m - 1);
            }
            wrow[mt][h] = w + ((size_t)row * k + k0) * ESZ + 16 * t;
        }
    }
    float acc[MT][NT][4];
    float sq[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        sq[nt] = 0.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
        }
    }
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int c0 = 0; c0 < chunks; c0 += U) {
        uint4 wv[U][MT][2];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (c0 + u < chunks) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    wv[u][mt][0] = sk_ld_w(wrow[mt][0] + 64 * (c0 + u));
                    wv[u][mt][1] = sk_ld_w(wrow[mt][1] + 64 * (c0 + u));
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (c0 + u >= chunks) break;
            const int kc = k0 + (c0 + u) * CH;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int r = nt * 8 + g;
                if (nt * 8 >= n) break;
                if (!Q8) {
                    const T* xp = x + (size_t)r * k + kc + 8 * t;
                    uint4 xv = r < n ? __ldg(reinterpret_cast<const uint4*>(xp)) : zero;
                    if (gamma != nullptr) xv = sk_norm_in(xv, __ldg(reinterpret_cast<const uint4*>(gamma + kc + 8 * t)), sq[nt]);
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const uint4 a0 = wv[u][mt][0], a1 = wv[u][mt][1];
                        unsigned fa[4] = {a0.x, a1.x, a0.y, a1.y};
                        mma_bf16(acc[mt][nt], fa, xv.x, xv.y);
                        unsigned fb[4] = {a0.z, a1.z, a0.w, a1.w};
                        mma_bf16(acc[mt][nt], fb, xv.z, xv.w);
                    }
                } else {
                    const T* xp = x + (size_t)r * k + kc + 16 * t;
                    const uint4 xa = r < n ? __ldg(reinterpret_cast<const uint4*>(xp)) : zero;
                    const uint4 xb = r < n ? __ldg(reinterpret_cast<const uint4*>(xp + 8)) : zero;
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            const unsigned w0 = sk_word(wv[u][mt][0], i), w1 = sk_word(wv[u][mt][1], i);
                            unsigned fa[4] = {sk_q8_pair(w0, 0), sk_q8_pair(w1, 0), sk_q8_pair(w0, 1), sk_q8_pair(w1, 1)};
                            const uint4 xs = i < 2 ? xa : xb;
                            const unsigned b0 = (i & 1) ? xs.z : xs.x;
                            const unsigned b1 = (i & 1) ? xs.w : xs.y;
                            mma_bf16(acc[mt][nt], fa, b0, b1);
                        }
                    }
                }
            }
        }
    }
    // Partial sums to shared memory: [warp][MT * 16 tile rows][NT * 8 activation rows].
    constexpr int P = SK_PITCH(NT);
    constexpr int WARP_FLOATS = MT * 16 * P;
    float* mine = sk_smem + warp * WARP_FLOATS;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            float* p = mine + (mt * 16 + g) * P + nt * 8 + 2 * t;
            p[0] = acc[mt][nt][0];
            p[1] = acc[mt][nt][1];
            p[8 * P] = acc[mt][nt][2];
            p[8 * P + 1] = acc[mt][nt][3];
        }
    }
    float* sqs = sk_smem + SK_WARPS * WARP_FLOATS;
    if (gamma != nullptr) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            float s = sq[nt];
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            if (t == 0) sqs[warp * NT * 8 + nt * 8 + g] = s;
        }
    }
    __syncthreads();
    // Each output once: its eight partial sums in warp order, then the epilogue.
    const int rows_out = min(n, NT * 8);
    const int outs = per_block * rows_out;
    for (int e = threadIdx.x; e < outs; e += blockDim.x) {
        const int jj = e % per_block;
        const int r = e / per_block;
        const int j = j_base + jj;
        if (j >= m) continue;
        float inv = 1.f;
        if (gamma != nullptr) {
            float s = 0.f;
#pragma unroll
            for (int v = 0; v < SK_WARPS; ++v) s += sqs[v * NT * 8 + r];
            inv = rsqrtf(s / (float)k + eps);
        }
        // Tile row of output jj (the gate row for SwiGLU; its up row is 8 further).
        const int tr = swiglu ? (jj / 8) * 16 + jj % 8 : jj;
        float y = 0.f;
#pragma unroll
        for (int v = 0; v < SK_WARPS; ++v) y += sk_smem[v * WARP_FLOATS + tr * P + r];
        if (Q8) y *= scale[swiglu ? j : j];
        y *= inv;
        T* o = out + (size_t)r * m + j;
        if (swiglu) {
            float up = 0.f;
#pragma unroll
            for (int v = 0; v < SK_WARPS; ++v) up += sk_smem[v * WARP_FLOATS + (tr + 8) * P + r];
            if (Q8) up *= scale[m + j];
            up *= inv;
            st(o, y / (1.f + expf(-y)) * up);
        } else if (epi == SK_ACC) {
            st(o, ld(o) + y);
        } else {
            st(o, y);
        }
    }
}
#endif

// `m`: output columns (weight rows, or gate rows for SwiGLU, whose weight holds 2 m rows); `mt`:
// weight tiles per block (1, 2 or 4, with mt * NT <= 8); k a multiple of 8 * (32 dense, 64 int8).
// `scale` (int8) and `gamma` (norm prologue) may be null.
#if MMA_ENABLED
#define SK_DISPATCH(Q8, NT)                                                                                       \
    switch (mt) {                                                                                                 \
        case 4: sk_body<Q8, NT, (NT <= 2 ? 4 : 1)>(x, (const unsigned char*)w, scale, gamma, out, n, k, m, eps, epi); break; \
        case 2: sk_body<Q8, NT, (NT <= 4 ? 2 : 1)>(x, (const unsigned char*)w, scale, gamma, out, n, k, m, eps, epi); break; \
        default: sk_body<Q8, NT, 1>(x, (const unsigned char*)w, scale, gamma, out, n, k, m, eps, epi); break;             \
    }
#else
#define SK_DISPATCH(Q8, NT)
#endif

#define SK_ENTRY(NAME, Q8, NT)                                                                                     \
    extern "C" __global__ void __launch_bounds__(SK_WARPS * 32)                                                    \
        NAME(const T* __restrict__ x, const void* __restrict__ w, const float* __restrict__ scale,                 \
             const T* __restrict__ gamma, T* __restrict__ out, int n, int k, int m, float eps, int epi, int mt) { \
        sk_prefetch_weights(w, k, m, epi, mt, Q8);                                                                 \
        pdl_enter();                                                                                                \
        SK_DISPATCH(Q8, NT)                                                                                         \
    }

SK_ENTRY(lm_skinny_n8, false, 1)
SK_ENTRY(lm_skinny_n16, false, 2)
SK_ENTRY(lm_skinny_n32, false, 4)
SK_ENTRY(lm_skinny_n64, false, 8)
SK_ENTRY(lm_skinny_q8_n8, true, 1)
SK_ENTRY(lm_skinny_q8_n16, true, 2)
SK_ENTRY(lm_skinny_q8_n32, true, 4)
SK_ENTRY(lm_skinny_q8_n64, true, 8)
