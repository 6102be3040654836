// Skinny products on the tensor cores (bf16 storage): out = epilogue(norm?(x)[n, k] . W[rows, k]^T)
// for n <= 64 activation rows, with dense bf16 or int8 weights. int8 products are W8A16 in f16:
// their input comes rotated as f16 (lm_q8.cu's rotation with `half_out`; 3 more mantissa bits than
// bf16) and each int8 becomes f16 exactly in registers, the f16 MMA taking both.
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
// - Each block reads all of its rows' activations from L2, so their traffic is n / (16 MT) times
//   the weights' (twice that for int8): past 8 rows it, not HBM, bounds the kernel
//   (docs/PERFORMANCE.md), hence two weight tiles per block wherever the grid stays full.
// - Norm prologue: B = bf16(x * gamma) and the row's sum of squares of x accumulates beside the
//   product; the epilogue multiplies by rsqrt(mean(x^2) + eps) (so the rows are never written
//   normed). Epilogues: store, add to out (a residual update), or SwiGLU of a fused gate/up weight
//   (tile rows g: gate row j, g + 8: up row inter + j, paired in the epilogue).

#define SK_WARPS 8
#define SK_STORE 0
#define SK_ACC 1
#define SK_SWIGLU 2

// The product that follows this one in the step (src/lm/skinny.rs's `SkNext`, mirrored field by
// field): `rows` weight rows of `row_bytes` from `a` (and as many from `b`, the up half of a fused
// gate/up weight), `seg` bytes at each of `slices` offsets `slice` apart in a row. Each block asks
// L2 for its share as it issues its last weight loads, so the next product's first reads find
// L2 while this one's reduction and epilogue, and the small kernels between, run. Null `a`: none.
struct SkNext {
    const unsigned char* a;
    const unsigned char* b;
    long long row_bytes;
    int rows;
    int slices;
    int slice;
    int seg;
};

#if MMA_ENABLED
// Weights are read once per product: lm_q8.cu's 16-byte load that bypasses L1.
__device__ __forceinline__ uint4 sk_ld_w(const unsigned char* p) {
    return q8_ld_stream(reinterpret_cast<const signed char*>(p));
}

__device__ __forceinline__ unsigned sk_word(uint4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Bytes 2h and 2h + 1 of a word of four biased int8 (b + 128, lm_q8.cu) as an f16 pair, exactly:
// one byte permute puts each byte under the exponent of 1024 (f16 0x64xx = 1024 + byte), one
// paired subtraction of 1024 + 128 leaves b. Two instructions per pair, against six through f32
// for a bf16 pair: the int8 products were bound by these conversions (docs/PERFORMANCE.md).
__device__ __forceinline__ unsigned sk_q8_half2(unsigned u, int h) {
    const unsigned biased = __byte_perm(u, 0x64646464u, h ? 0x4342 : 0x4140);
    unsigned r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(biased), "r"(0x64806480u));
    return r;
}

__device__ __forceinline__ void mma_f16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x (8 bf16 in a uint4) times gamma into a bf16 B pair set, adding x^2 to `sq`.
__device__ __forceinline__ uint4 sk_norm_in(uint4 xv, uint4 gv, float& sq) {
    float xf[8], gf[8];
    unpack(xv, xf);
    unpack(gv, gf);
#pragma unroll
    for (int e = 0; e < 8; ++e) sq = fmaf(xf[e], xf[e], sq);
    uint4 o;
    o.x = bf16x2_rn(xf[0] * gf[0], xf[1] * gf[1]);
    o.y = bf16x2_rn(xf[2] * gf[2], xf[3] * gf[3]);
    o.z = bf16x2_rn(xf[4] * gf[4], xf[5] * gf[5]);
    o.w = bf16x2_rn(xf[6] * gf[6], xf[7] * gf[7]);
    return o;
}

// Pitch (floats) of one warp's partial-sum rows in shared memory: padded against bank conflicts.
#define SK_PITCH(NT) ((NT) * 8 + 1)

// The input rotation inside the int8 product (ROT entry points, at most SK_ROT_ROWS rows and
// k / SK_WARPS <= SK_ROT_MAX_SLICE): each warp rotates its own k slice of every row (whole
// groups of SK_ROT_GROUP, lm_q8.cu's radix-4 stages in the same order) into f16 in shared memory,
// with the row's RMSNorm first when `gamma` is given (warp r takes row r's sum of squares), so
// that no rotation kernel or rotated copy sits between the products. src/lm/skinny.rs's
// `rot_smem_bytes` mirrors the layout: [SK_ROT_ROWS inverse RMS][a group of f32 per warp]
// [per warp: SK_ROT_ROWS rows of SK_ROT_PITCH(slice) halves].
#define SK_ROT_ROWS 8
#define SK_ROT_GROUP 256
#define SK_ROT_STAGES 4
#define SK_ROT_MAX_SLICE 512
// Halves per rotated row: 16 bytes of padding move each row's reads to other banks.
#define SK_ROT_PITCH(ks) ((ks) + 8)

__device__ __forceinline__ const unsigned short* sk_rot_prologue(float* base, const T* __restrict__ x,
                                                                 const T* __restrict__ gamma, int n, int k, int k0,
                                                                 int ks, float eps, int warp, int lane) {
    float* inv = base;
    float* hs = base + SK_ROT_ROWS + warp * SK_ROT_GROUP;
    unsigned short* xs =
        reinterpret_cast<unsigned short*>(base + SK_ROT_ROWS + SK_WARPS * SK_ROT_GROUP) +
        warp * SK_ROT_ROWS * SK_ROT_PITCH(ks);
    if (gamma != nullptr) {
        if (warp < n) {
            float ss = 0.f;
            for (int c = lane * 8; c < k; c += 32 * 8) {
                float v[8];
                load_c<8>(x + (size_t)warp * k + c, v);
#pragma unroll
                for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) inv[warp] = rsqrtf(ss / (float)k + eps);
        }
        __syncthreads();
    }
    for (int r = 0; r < n; ++r) {
        unsigned short* xr = xs + r * SK_ROT_PITCH(ks);
        for (int g0 = 0; g0 < ks; g0 += SK_ROT_GROUP) {
            const int c = k0 + g0 + lane * 8;
            float v[8];
            load_c<8>(x + (size_t)r * k + c, v);
            if (gamma != nullptr) {
                float gv[8];
                load_c<8>(gamma + c, gv);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    // Rounded to T as lm_norm_hadamard's normed group is.
                    T normed;
                    st(&normed, v[e] * inv[r] * gv[e]);
                    v[e] = ld(&normed);
                }
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) hs[lane * 8 + e] = v[e];
            __syncwarp();
            int s = 1;
            for (int stage = 0; stage < SK_ROT_STAGES; ++stage) {
                for (int q = lane; q < SK_ROT_GROUP / 4; q += 32) q8_butterfly4(hs, q, s);
                __syncwarp();
                s *= 4;
            }
            const float scale = 1.f / (float)(1 << SK_ROT_STAGES);
            unsigned h[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
                h[e] = (unsigned)q8_f16_sat(hs[lane * 8 + 2 * e] * scale) |
                       ((unsigned)q8_f16_sat(hs[lane * 8 + 2 * e + 1] * scale) << 16);
            *reinterpret_cast<uint4*>(xr + g0 + lane * 8) = make_uint4(h[0], h[1], h[2], h[3]);
            // The group's scratch is read before the next group overwrites it.
            __syncwarp();
        }
    }
    return xs;
}

__device__ __forceinline__ void sk_prefetch_next(const SkNext& nx) {
    if (nx.a == nullptr) return;
    const int halves = nx.b != nullptr ? 2 : 1;
    const long long items = (long long)nx.rows * nx.slices * halves;
    // Item i on block i % grid: every multiprocessor's copy engine takes a share.
    for (long long i = (long long)threadIdx.x * gridDim.x + blockIdx.x; i < items;
         i += (long long)gridDim.x * blockDim.x) {
        const int s = (int)(i % nx.slices);
        const long long rh = i / nx.slices;
        const unsigned char* base = (rh % halves) ? nx.b : nx.a;
        l2_prefetch_bulk(base + (rh / halves) * nx.row_bytes + (long long)s * nx.slice, (unsigned)nx.seg);
    }
}

template <bool Q8, int NT, int MT, bool ROT>
__device__ __forceinline__ void sk_body(const T* __restrict__ x, const unsigned char* __restrict__ w,
                                        const float* __restrict__ scale, const T* __restrict__ gamma,
                                        T* __restrict__ out, int n, int k, int m, float eps, int epi,
                                        const SkNext& nx) {
    // Chunks of 64 bytes per weight row in a group; two groups in registers (the next loads
    // while this one multiplies): 64 registers of weights per lane, 32 from 32 rows (whose
    // accumulators and activations take the rest).
    constexpr int U = (NT >= 4 ? 2 : 4) / MT;
    constexpr int CH = Q8 ? 64 : 32;  // columns per chunk
    constexpr int ESZ = Q8 ? 1 : 2;   // weight bytes per element
    extern __shared__ float sk_smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int ks = k / SK_WARPS;
    const int k0 = warp * ks;
    const int chunks = ks / CH;
    const bool swiglu = epi == SK_SWIGLU;
    // Output columns of a tile: 16 MT weight rows, or 8 MT gate/up pairs. A block takes tiles
    // blockIdx.x, + gridDim.x, ... (one tile a block, or a persistent grid of resident blocks).
    const int per_block = swiglu ? 8 * MT : 16 * MT;
    const int tiles = (m + per_block - 1) / per_block;
    // This lane's first weight byte of each row pair of the tile at output j_base.
    auto rows_of = [&](int j_base, const unsigned char* (&wr)[MT][2]) {
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
                wr[mt][h] = w + ((size_t)row * k + k0) * ESZ + 16 * t;
            }
        }
    };
    // Two named weight groups (not one array indexed by a variable, which would live in local
    // memory): the loop body runs twice per iteration with their roles swapped.
    uint4 wa[U][MT][2], wb[U][MT][2];
    auto load_first = [&](const unsigned char* (&wr)[MT][2], uint4 (&dst)[U][MT][2]) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (u < chunks) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    dst[u][mt][0] = sk_ld_w(wr[mt][0] + 64 * u);
                    dst[u][mt][1] = sk_ld_w(wr[mt][1] + 64 * u);
                }
            }
        }
    };
    // With an even number of groups a tile's last group multiplies `wb`, so the next tile's
    // first group can load into `wa` meanwhile: the weights keep streaming through the partial
    // sums' reduction and the epilogue.
    const int groups = (chunks + U - 1) / U;
    const bool carry = (groups & 1) == 0;
    const unsigned char* wrow[MT][2];
    rows_of(blockIdx.x * per_block, wrow);
    // The weights are constants: the first group loads before waiting on the previous kernel.
    load_first(wrow, wa);
    pdl_enter();
    // ROT: this warp's slice of the rotated rows, past the partial sums and the sums of squares.
    const unsigned short* xs_w = nullptr;
    if constexpr (ROT) {
        xs_w = sk_rot_prologue(sk_smem + SK_WARPS * MT * 16 * SK_PITCH(NT) + SK_WARPS * NT * 8, x, gamma, n, k, k0,
                               ks, eps, warp, lane);
    }
    float acc[MT][NT][4];
    float sq[NT];
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int j_base = tile * per_block;
        const bool prefetch = carry && tile + (int)gridDim.x < tiles;
        if (tile != (int)blockIdx.x) {
            rows_of(j_base, wrow);
            if (!carry) load_first(wrow, wa);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            sq[nt] = 0.f;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
            }
        }
        // The group at chunk c0 multiplies `cur` while `nxt` loads the group after it (the next
        // tile's first, after the last).
        auto group = [&](int c0, uint4 (&cur)[U][MT][2], uint4 (&nxt)[U][MT][2]) {
            if (c0 + U < chunks) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (c0 + U + u < chunks) {
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) {
                            nxt[u][mt][0] = sk_ld_w(wrow[mt][0] + 64 * (c0 + U + u));
                            nxt[u][mt][1] = sk_ld_w(wrow[mt][1] + 64 * (c0 + U + u));
                        }
                    }
                }
            } else if (prefetch) {
                // The next tile's rows, only here: their registers are free in the last group.
                const unsigned char* wnext[MT][2];
                rows_of(j_base + (int)gridDim.x * per_block, wnext);
                load_first(wnext, nxt);
            } else if (tile + (int)gridDim.x >= tiles) {
                // This block's last loads are in flight: the next product's weights follow them.
                sk_prefetch_next(nx);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                if (c0 + u >= chunks) break;
                const int kc = k0 + (c0 + u) * CH;
                if (!Q8) {
                    uint4 xv[NT];
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        const int r = nt * 8 + g;
                        xv[nt] = r < n ? __ldg(reinterpret_cast<const uint4*>(x + (size_t)r * k + kc + 8 * t)) : zero;
                    }
                    if (gamma != nullptr) {
                        const uint4 gv = __ldg(reinterpret_cast<const uint4*>(gamma + kc + 8 * t));
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt) xv[nt] = sk_norm_in(xv[nt], gv, sq[nt]);
                    }
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        const uint4 a0 = cur[u][mt][0], a1 = cur[u][mt][1];
                        const unsigned fa[4] = {a0.x, a1.x, a0.y, a1.y};
                        const unsigned fb[4] = {a0.z, a1.z, a0.w, a1.w};
#pragma unroll
                        for (int nt = 0; nt < NT; ++nt) {
                            if (nt * 8 < n) {
                                mma_bf16(acc[mt][nt], fa, xv[nt].x, xv[nt].y);
                                mma_bf16(acc[mt][nt], fb, xv[nt].z, xv[nt].w);
                            }
                        }
                    }
                } else {
                    uint4 xa[NT], xb[NT];
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        const int r = nt * 8 + g;
                        if constexpr (ROT) {
                            const unsigned short* xp = xs_w + r * SK_ROT_PITCH(ks) + (kc - k0) + 16 * t;
                            xa[nt] = r < n ? *reinterpret_cast<const uint4*>(xp) : zero;
                            xb[nt] = r < n ? *reinterpret_cast<const uint4*>(xp + 8) : zero;
                        } else {
                            const T* xp = x + (size_t)r * k + kc + 16 * t;
                            xa[nt] = r < n ? __ldg(reinterpret_cast<const uint4*>(xp)) : zero;
                            xb[nt] = r < n ? __ldg(reinterpret_cast<const uint4*>(xp + 8)) : zero;
                        }
                    }
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            // Dequantised once per chunk, used by every activation tile.
                            const unsigned w0 = sk_word(cur[u][mt][0], i), w1 = sk_word(cur[u][mt][1], i);
                            const unsigned fa[4] = {sk_q8_half2(w0, 0), sk_q8_half2(w1, 0), sk_q8_half2(w0, 1),
                                                    sk_q8_half2(w1, 1)};
#pragma unroll
                            for (int nt = 0; nt < NT; ++nt) {
                                if (nt * 8 < n) {
                                    const uint4 xs = i < 2 ? xa[nt] : xb[nt];
                                    mma_f16(acc[mt][nt], fa, (i & 1) ? xs.z : xs.x, (i & 1) ? xs.w : xs.y);
                                }
                            }
                        }
                    }
                }
            }
        };
        for (int c0 = 0; c0 < chunks; c0 += 2 * U) {
            group(c0, wa, wb);
            if (c0 + U < chunks) group(c0 + U, wb, wa);
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
        // The norm applied in the epilogue (dense products); ROT's is in its prologue.
        const bool epi_norm = !ROT && gamma != nullptr;
        if (epi_norm) {
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
            if (epi_norm) {
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
            if (Q8) y *= scale[j];
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
        // The partial sums are read before the next tile overwrites them.
        if (tile + (int)gridDim.x < tiles) __syncthreads();
    }
}
#endif

// `m`: output columns (weight rows, or gate rows for SwiGLU, whose weight holds 2 m rows); k a
// multiple of 8 * (32 dense, 64 int8); `scale` (int8) and `gamma` (norm prologue) may be null.
// Each entry point fixes its activation tiles NT and weight tiles per block MT, and with them its
// register budget: two weight tiles halve the activations' L2 traffic where the grid stays full.
// Blocks per SM asked of the compiler: two up to 32 rows (at most 128 registers a thread).
#define SK_MIN_BLOCKS(NT) ((NT) >= 8 ? 1 : 2)
#if MMA_ENABLED
#define SK_DISPATCH(Q8, NT, MT, ROT) \
    sk_body<Q8, NT, MT, ROT>(x, (const unsigned char*)w, scale, gamma, out, n, k, m, eps, epi, nx);
#else
#define SK_DISPATCH(Q8, NT, MT, ROT) pdl_enter();
#endif

#define SK_ENTRY(NAME, Q8, NT, MT, ROT)                                                                               \
    extern "C" __global__ void __launch_bounds__(SK_WARPS * 32, SK_MIN_BLOCKS(NT))                                 \
        NAME(const T* __restrict__ x, const void* __restrict__ w, const float* __restrict__ scale,                 \
             const T* __restrict__ gamma, T* __restrict__ out, int n, int k, int m, float eps, int epi,          \
             SkNext nx) {                                                                                        \
        SK_DISPATCH(Q8, NT, MT, ROT)                                                                                \
    }

SK_ENTRY(lm_skinny_n8, false, 1, 1, false)
SK_ENTRY(lm_skinny_n16, false, 2, 1, false)
SK_ENTRY(lm_skinny_n32, false, 4, 1, false)
SK_ENTRY(lm_skinny_n8_m2, false, 1, 2, false)
SK_ENTRY(lm_skinny_n16_m2, false, 2, 2, false)
SK_ENTRY(lm_skinny_n32_m2, false, 4, 2, false)
SK_ENTRY(lm_skinny_n64_m2, false, 8, 2, false)
SK_ENTRY(lm_skinny_q8_n8, true, 1, 1, false)
SK_ENTRY(lm_skinny_q8_n16, true, 2, 1, false)
SK_ENTRY(lm_skinny_q8_n32, true, 4, 1, false)
SK_ENTRY(lm_skinny_q8_n8_m2, true, 1, 2, false)
SK_ENTRY(lm_skinny_q8_n16_m2, true, 2, 2, false)
SK_ENTRY(lm_skinny_q8_n32_m2, true, 4, 2, false)
SK_ENTRY(lm_skinny_q8_n64_m2, true, 8, 2, false)
// int8 with the input rotation (and its norm) inside: at most SK_ROT_ROWS rows.
SK_ENTRY(lm_skinny_q8r_n8, true, 1, 1, true)
SK_ENTRY(lm_skinny_q8r_n8_m2, true, 1, 2, true)
