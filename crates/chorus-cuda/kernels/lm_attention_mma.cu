// Decode attention on the tensor cores (bf16 storage, sm_80+; head_dim 128, a GQA group of up to
// 8 query heads per kv head), over caches in the storage type or 8-bit (E4M3 and a scale per
// head vector, sm_89+). The blocks, splits, partials and combine are lm_paged_attention's; only
// the inner loop differs. The plain decode kernel spends 8 FMAs per key channel and lane on a
// group of 4 (and 3 conversions per 2 values over 8-bit caches): at the copy bandwidth that is
// the SMs' whole issue rate. Here the products are mma, so the loop is loads.
//
// One block of PAM_WARPS warps per (row, kv head, split); warp w takes the split's keys in steps
// of PAM_KEYS (16; PAM8_KEYS, 32, over 8-bit caches), steps w, w + PAM_WARPS, ..., each with its
// own streaming softmax (base 2); the warps merge through shared memory (pa_merge_store). Lane
// (g = lane / 4, t = lane % 4). Over caches in the storage type (mma.m16n8k16, bf16):
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
// Over 8-bit caches (pam8_decode) each cache byte is unpacked once to f16 (exact) and the products
// are f16 mma.m16n8k16, the queries and the weights in f16, scaled by powers of two (sm_90 has no
// E4M3 mma.sync of its own: it unpacks every operand byte of each such product, hi + lo query
// terms included). Keys are consumed 32 at a time, four n8 score tiles; the value fragment takes
// four keys' bytes of one channel, a 4 x 4 byte transpose of the loaded words (pam_t4).
// Sums are f32; each step's products start from zero and are added to the running accumulators.
// Each warp copies its steps into shared memory (cp.async) two steps ahead of the one it
// computes: the bytes in flight take no registers, so copies are in flight while the warp
// computes (the loads in registers were in flight only between a step's start and its use).
//
// Addresses: a lane's keys in a step are fixed offsets from the step's first key, whose (table
// index, offset in block) advance with the step (PamCursor): no division per key.

#define PAM_WARPS 4
#define PAM_KEYS 16
#define PAM8_KEYS 32
#define PAM_D 128

#if MMA_ENABLED
// A step's first key: its block's index in the row's table (the ring's, ring = max_blocks *
// block_size) and its offset in that block.
struct PamCursor {
    int b, o;
};

__device__ __forceinline__ PamCursor pam_cursor(int kp, const PagedDims& d) {
    const int i = pa_ring(kp, d);
    return {i / d.block_size, i % d.block_size};
}

__device__ __forceinline__ void pam_advance(PamCursor& c, int by, const PagedDims& d) {
    c.o += by;
    while (c.o >= d.block_size) {
        c.o -= d.block_size;
        c.b = c.b + 1 == d.max_blocks ? 0 : c.b + 1;
    }
}

// The entry `off` keys past the cursor, as pa_locate finds it.
__device__ __forceinline__ PaLoc pam_locate(const int* __restrict__ table, PamCursor c, int off, const PagedDims& d) {
    pam_advance(c, off, d);
    const int blk = table[c.b];
    return {min(max(blk, 0), d.num_blocks - 1), c.o};
}

// Element offset of the entry `off` keys past the cursor (kv head 0).
__device__ __forceinline__ long long pam_entry(const int* __restrict__ table, PamCursor c, int off, const PagedDims& d) {
    return pa_entry_at(pam_locate(table, c, off, d), d);
}

// The (row, kv head, split) of a decode block, its keys [k_begin, k_end) of the row's n, the
// row's block table and the lane's query head (head g of the group, its last past G).
struct PamBlock {
    int s, h, r, n, k_begin, k_end;
    const int* table;
    const T* q;
};

template <int G>
__device__ __forceinline__ PamBlock pam_block(const T* __restrict__ qkv, const int* __restrict__ tables,
                                              const int* __restrict__ start, const PagedDims& d) {
    const int g = threadIdx.x % 32 / 4;
    PamBlock b;
    b.s = blockIdx.x % d.splits;
    const int pair = blockIdx.x / d.splits;
    b.h = pair % d.kv_heads;
    b.r = pair / d.kv_heads;
    b.n = start[b.r] + 1;
    const int lo = pa_first_key(start[b.r], d);
    const int split_len = pa_split_len(b.n - lo, d);
    b.k_begin = lo + b.s * split_len;
    b.k_end = min(b.n, b.k_begin + split_len);
    b.table = tables + (long long)b.r * d.max_blocks;
    const int width = (d.q_heads + 2 * d.kv_heads) * PAM_D;
    b.q = qkv + (long long)b.r * width + (b.h * G + min(g, G - 1)) * PAM_D;
    return b;
}

// The end of a block: each warp's accumulators (times `unit`), maxima and sums to shared memory
// as pa_merge_store reads them ([warp][head][D], then maxima and sums), then the merge. Output
// tile i's row g holds channel 16 g + RI * i, row g + 8 channel 16 g + RI * i + R8; the
// accumulators hold heads 2 t and 2 t + 1.
template <int G, int R8, int RI>
__device__ __forceinline__ void pam_finish(const float (&acc)[PAM_D / 16][4], float unit, float m, float l,
                                           const PamBlock& b, T* __restrict__ out, float* __restrict__ part,
                                           const PagedDims& d) {
    constexpr int D = PAM_D;
    extern __shared__ float pa_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    float* sacc = pa_smem;
    float* sm = sacc + PAM_WARPS * G * D;
    float* sl = sm + PAM_WARPS * G;
#pragma unroll
    for (int i = 0; i < D / 16; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int head = 2 * t + (e & 1);
            const int c = 16 * g + RI * i + R8 * (e >> 1);
            if (head < G) {
                sacc[(warp * G + head) * D + c] = acc[i][e] * unit;
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
    pa_merge_store<D, G, PAM_WARPS>(pa_smem, b.r, b.h, b.s, b.n - 1, out, part, d);
}

// f16x2 of (lo, hi), rounded to nearest even: lo in the low half.
__device__ __forceinline__ unsigned pam_f16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ unsigned pam_word(const uint4* v, int i) {
    const uint4 x = v[i / 4];
    const int k = i % 4;
    return k == 0 ? x.x : k == 1 ? x.y : k == 2 ? x.z : x.w;
}

template <int G>
__device__ __forceinline__ void pam_decode(const T* __restrict__ qkv, const T* __restrict__ k_cache,
                                           const T* __restrict__ v_cache, const int* __restrict__ tables,
                                           const int* __restrict__ start, T* __restrict__ out,
                                           float* __restrict__ part, const PagedDims& d) {
    constexpr int D = PAM_D;
    constexpr int KS = D / 16;  // k-steps of a score tile
    constexpr int KL = D / 4 * 2 / 16;  // 16-byte loads of a lane's key chunk
    constexpr int VL = D / 8 * 2 / 16;  // 16-byte loads of a lane's value chunk
    constexpr int PER = 8;              // elements per 16-byte load
    constexpr int MT = D / 16;          // output tiles (16 channels each)
    extern __shared__ float pa_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const PamBlock b = pam_block<G>(qkv, tables, start, d);
    if (b.k_begin >= b.n) {
        return;  // the whole block: no barrier is reached
    }
    const int h = b.h, k_begin = b.k_begin, k_end = b.k_end;
    const int* table = b.table;

    // Query fragments of head g (zero past the group): k-step ks takes chunk words 2 ks, 2 ks + 1.
    unsigned qa[KS][2];
    {
        const T* q = b.q + (D / 4) * t;
#pragma unroll
        for (int w = 0; w < D / 32; ++w) {
            const uint4 v = g < G ? *reinterpret_cast<const uint4*>(q + 8 * w) : make_uint4(0u, 0u, 0u, 0u);
            const unsigned wd[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                qa[(4 * w + i) / 2][(4 * w + i) % 2] = wd[i];
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
    const T* k_head = k_cache + h * D;
    const T* v_head = v_cache + h * D;

    for (int k0 = k_begin + warp * PAM_KEYS; k0 < k_end; k0 += PAM_WARPS * PAM_KEYS) {
        // Every load of the step before any use. Keys past the split reload its last key and are
        // masked below.
        const int last = k_end - 1 - k0;
        const PamCursor cur = pam_cursor(k0, d);
        uint4 kr[2][KL], vr[4][VL];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const long long e = pam_entry(table, cur, min(8 * j + g, last), d);
#pragma unroll
            for (int w = 0; w < KL; ++w) {
                kr[j][w] = *reinterpret_cast<const uint4*>(k_head + e + (D / 4) * t + w * PER);
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            // This lane's score columns and value rows: keys 2t, 2t + 1, 2t + 8, 2t + 9.
            const long long e = pam_entry(table, cur, min(2 * t + (u & 1) + 8 * (u >> 1), last), d);
#pragma unroll
            for (int w = 0; w < VL; ++w) {
                vr[u][w] = *reinterpret_cast<const uint4*>(v_head + e + (D / 8) * g + w * PER);
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
                const unsigned a[4] = {qa[ks][0], 0u, qa[ks][1], 0u};
                mma_bf16(sc[j], a, pam_word(kr[j], 2 * ks), pam_word(kr[j], 2 * ks + 1));
            }
        }
        float x[4];  // keys 2t, 2t + 1, 2t + 8, 2t + 9 (u order)
        float mt = NEG_INF;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int key = 2 * t + (u & 1) + 8 * (u >> 1);
            x[u] = key <= last ? sc[u >> 1][u & 1] * d.scale : NEG_INF;
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
        const unsigned pb0 = bf16x2_rn(p[0], p[1]);
        const unsigned pb1 = bf16x2_rn(p[2], p[3]);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            // Rows g and g + 8 of tile i: chunk channels i and 8 + i of the four keys.
            unsigned a[4];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int c = i + 8 * half;
#pragma unroll
                for (int kp = 0; kp < 2; ++kp) {
                    a[half + 2 * kp] = __byte_perm(pam_word(vr[2 * kp], c / 2), pam_word(vr[2 * kp + 1], c / 2),
                                                   (c % 2) ? 0x7632 : 0x5410);
                }
            }
            mma_bf16(acc[i], a, pb0, pb1);
        }
    }

    // Tile i's rows g and g + 8 are channels 16 g + i and 16 g + 8 + i.
    pam_finish<G, 8, 1>(acc, 1.f, m, l, b, out, part, d);
}
#endif

#if MMA_ENABLED && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define PAM8_ENABLED 1
#else
#define PAM8_ENABLED 0
#endif

#if PAM8_ENABLED
// On sm_90 an mma.sync over E4M3 operands is not native: it compiles to an f16 HMMA per k16
// with every operand byte unpacked first (F2FP), so the 8-bit decode unpacks each cache byte
// once itself and takes f16 products, its queries and weights in f16 (10 bits, held or packed
// once), half the HMMAs of E4M3 products with hi + lo terms.
__device__ __forceinline__ void pam_mma_f16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A word's four E4M3 values as two f16x2, exactly: bytes 0, 1 in `lo`, bytes 2, 3 in `hi`, the
// lower byte in the low half (the halves split in PTX, so no shift extracts the high one).
__device__ __forceinline__ void pam_e4m3x4(unsigned w, unsigned& lo, unsigned& hi) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
}

// 2^e for a biased exponent e in [1, 254].
__device__ __forceinline__ float pam_pow2(int biased) { return __int_as_float(biased << 23); }

// Bytes b of four words x0..x3 gathered into y[b] = (x0.b, x1.b, x2.b, x3.b), low byte first.
__device__ __forceinline__ void pam_t4(unsigned x0, unsigned x1, unsigned x2, unsigned x3, unsigned* y) {
    const unsigned t0 = __byte_perm(x0, x1, 0x5140), t1 = __byte_perm(x0, x1, 0x7362);
    const unsigned t2 = __byte_perm(x2, x3, 0x5140), t3 = __byte_perm(x2, x3, 0x7362);
    y[0] = __byte_perm(t0, t2, 0x5410);
    y[1] = __byte_perm(t0, t2, 0x7632);
    y[2] = __byte_perm(t1, t3, 0x5410);
    y[3] = __byte_perm(t1, t3, 0x7632);
}

// Shared-memory reads kept where they are written (volatile: the compiler would hoist a step's
// reads together and run out of registers for them; the stage's copies land behind an asm
// wait the compiler cannot see through otherwise).
__device__ __forceinline__ uint4 pam_lds128(const void* p) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(smem_addr(p)));
    return v;
}

// 4-byte asynchronous copy global -> shared, and waiting for all but the N newest groups.
__device__ __forceinline__ void pam_cp4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src));
}
template <int N>
__device__ __forceinline__ void pam_wait_all_but_newest() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A warp's stage of 32 keys in shared memory: keys' bytes (16-byte chunk c of key k at chunk
// c ^ swizzle, so that the fragment reads below hit 8 distinct chunks of 128 bytes per quarter
// warp), values' likewise, then the keys' and values' scales.
#define PAM8_STAGE_K 0
#define PAM8_STAGE_V (PAM8_KEYS * PAM_D)
#define PAM8_STAGE_KS (2 * PAM8_KEYS * PAM_D)
#define PAM8_STAGE_VS (PAM8_STAGE_KS + 4 * PAM8_KEYS)
#define PAM8_STAGE_BYTES (PAM8_STAGE_VS + 4 * PAM8_KEYS)
// Stages per warp: the next step's keys load while a step is computed (mirrors MMA8_STAGES); two
// stages fit three blocks per multiprocessor, 4% faster on the STT step than three stages at two.
#define PAM8_STAGES 2
// Key rows are read by lanes (g, t) at chunks t and t + 4 of key g: their swizzle sends odd
// keys to the other half of the line. Value rows are read at chunk g of key 2 t + e: XOR with
// the key's low bits.
__device__ __forceinline__ int pam8_k_chunk(int c, int key) { return c ^ (((key & 1) << 2) | ((key >> 1) & 3)); }
__device__ __forceinline__ int pam8_v_chunk(int c, int key) { return c ^ (key & 7); }

// Where lane l's copies land in a stage: chunk l % 8 of keys l / 8 + 4 i, i < 8, at
// dst[i % 2] + 512 i (keys) and dst[2 + i % 2] + 512 i (values); the swizzle depends on the key's
// low three bits, which only i % 2 changes.
__device__ __forceinline__ void pam8_issue_offsets(int lane, int* dst) {
    const int a = lane / 8, c = lane % 8;
#pragma unroll
    for (int odd = 0; odd < 2; ++odd) {
        const int key = a + 4 * odd;
        dst[odd] = PAM8_STAGE_K + a * PAM_D + 16 * pam8_k_chunk(c, key);
        dst[2 + odd] = PAM8_STAGE_V + a * PAM_D + 16 * pam8_v_chunk(c, key);
    }
}

// Starts copying the step of 32 keys from the cursor (those past the split, `last` keys on,
// repeat its last key) into a stage: lane l copies chunk l % 8 of keys l / 8 + 4 i (i < 8) of the
// keys and the values, and key l's two scales. Lane l finds key l's cache position once and the
// others take theirs by shuffle (warp-uniform call): one table lookup per lane and step.
__device__ __forceinline__ void pam8_issue(unsigned char* stage, const int* dst, const unsigned char* __restrict__ k_head,
                                           const unsigned char* __restrict__ v_head,
                                           const float* __restrict__ k_scale, const float* __restrict__ v_scale,
                                           const int* __restrict__ table, PamCursor cur, int last, int h, int lane,
                                           const PagedDims& d) {
    const int c = lane % 8;
    const PaLoc loc = pam_locate(table, cur, min(lane, last), d);
    const int row = loc.blk * d.block_size + loc.o;  // the entry's position in the pool
    const long long stride = (long long)d.kv_heads * PAM_D;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const long long e = (long long)__shfl_sync(0xffffffffu, row, min(lane / 8 + 4 * i, last)) * stride + 16 * c;
        cp_async16(stage + dst[i % 2] + 512 * i, k_head + e);
        cp_async16(stage + dst[2 + i % 2] + 512 * i, v_head + e);
    }
    // Consecutive keys of a block: consecutive scales, so the warp's copies share sectors.
    const long long sc = pa_scale_at(loc, h, d);
    pam_cp4(stage + PAM8_STAGE_KS + 4 * lane, k_scale + sc);
    pam_cp4(stage + PAM8_STAGE_VS + 4 * lane, v_scale + sc);
}

// Over 8-bit caches, f16 products of unpacked E4M3 bytes (m16n8k16), each warp streaming its
// steps of 32 keys through PAM8_STAGES stages of shared memory (cp.async: the bytes in flight
// hold no registers). Per step from k0: score tile j (keys 8 j .. 8 j + 7) takes key 8 j + g's
// chunks t and t + 4, word w (channels 4 w .. 4 w + 3 of the two chunks) one k16 product: its
// low bytes at k 2 t, 2 t + 1, its high bytes at 2 t + 8, 2 t + 9, the queries' channels alike.
// The lane's scores are keys 8 j + 2 t, 8 j + 2 t + 1 of head g; the value products take keys
// 2 t, 2 t + 1 (k 2 t, 2 t + 1) and 8 + 2 t, 9 + 2 t (k 2 t + 8, 2 t + 9), then the same 16 keys
// on, so the weights' fragments are the lane's own. Output tile i, row g is channel 16 g + 2 i,
// row g + 8 channel 16 g + 2 i + 1: the lane reads chunk g of its eight keys' values.
template <int G>
__device__ __forceinline__ void pam8_decode(const T* __restrict__ qkv, const unsigned char* __restrict__ k_cache,
                                            const unsigned char* __restrict__ v_cache, const int* __restrict__ tables,
                                            const int* __restrict__ start, T* __restrict__ out,
                                            float* __restrict__ part, const float* __restrict__ k_scale,
                                            const float* __restrict__ v_scale, const PagedDims& d) {
    constexpr int D = PAM_D;
    constexpr int KW = D / 16;  // a lane's key words per score tile: a k16 product each
    constexpr int MT = D / 16;  // output tiles (16 channels each)
    extern __shared__ float pa_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const PamBlock b = pam_block<G>(qkv, tables, start, d);
    if (b.k_begin >= b.n) {
        return;  // the whole block: no barrier is reached
    }
    const int h = b.h, k_begin = b.k_begin, k_end = b.k_end;
    const int* table = b.table;
    const unsigned char* k_head = k_cache + h * D;
    const unsigned char* v_head = v_cache + h * D;
    // Shared memory: every warp's stages; the merge reuses them.
    unsigned char* stages = reinterpret_cast<unsigned char*>(pa_smem) + warp * PAM8_STAGES * PAM8_STAGE_BYTES;

    // The first steps' copies start before anything else; `cur` is the next step to copy.
    const int first = k_begin + warp * PAM8_KEYS;
    constexpr int STEP = PAM_WARPS * PAM8_KEYS;
    PamCursor cur = pam_cursor(first, d);
    int dst[4];
    pam8_issue_offsets(lane, dst);
#pragma unroll
    for (int p = 0; p < PAM8_STAGES - 1; ++p) {
        const int kp = first + p * STEP;
        if (kp < k_end) {
            pam8_issue(stages + p * PAM8_STAGE_BYTES, dst, k_head, v_head, k_scale, v_scale, table, cur, k_end - 1 - kp,
                       h, lane, d);
        }
        cp_async_commit();
        pam_advance(cur, STEP, d);
    }

    // Head g's channels of the lane's chunks t and t + 4 (zero past the group), scaled by 2^e so
    // that the head's largest lies in [128, 256), as f16 fragments: word w's channels 4 w, 4 w + 1
    // in qlo[w], 4 w + 2, 4 w + 3 in qhi[w].
    float qf;  // d.scale / 2^e: a score's factor besides its key's scale
    unsigned qlo[8], qhi[8];
    {
        float qv[32];  // chunk t's 16 channels, then chunk t + 4's
        const T* q = b.q;
        float amax = 0.f;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const int ch = 16 * (t + 4 * (w / 2)) + 8 * (w % 2);
            const uint4 v = g < G ? *reinterpret_cast<const uint4*>(q + ch) : make_uint4(0u, 0u, 0u, 0u);
            const unsigned wd[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                qv[8 * w + 2 * i] = __uint_as_float(wd[i] << 16);
                qv[8 * w + 2 * i + 1] = __uint_as_float(wd[i] & 0xffff0000u);
            }
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(qv[i]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        // amax = 2^(eb - 127) x 1.f: 2^(134 - eb) puts it in [128, 256). Tiny or zero heads keep 2^0.
        const int eb = (__float_as_int(amax) >> 23) & 0xff;
        const bool scaled = eb > 7 && eb < 254;
        const float up = scaled ? pam_pow2(261 - eb) : 1.f;
        qf = scaled ? d.scale * pam_pow2(eb - 7) : d.scale;
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            qlo[w] = pam_f16x2(qv[4 * w] * up, qv[4 * w + 1] * up);
            qhi[w] = pam_f16x2(qv[4 * w + 2] * up, qv[4 * w + 3] * up);
        }
    }

    // The lane's reads in a stage: key 8 j + g's chunk t + 4 h at k_at[h] + 1024 j; value key
    // 2 t + e + 8 m's chunk g at v_at[e] + 1024 m, its scales at 4 (2 t + e) + 32 m.
    int k_at[2], v_at[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        k_at[e] = PAM8_STAGE_K + g * D + 16 * pam8_k_chunk(t + 4 * e, g);
        v_at[e] = PAM8_STAGE_V + (2 * t + e) * D + 16 * pam8_v_chunk(g, 2 * t + e);
    }

    float m = NEG_INF;  // head g's running maximum (the same in its four lanes)
    float l = 0.f;      // this lane's share of head g's sum of weights
    int ev = 8;         // biased exponent bounding every value scale seen (2^-119 to start)
    float acc[MT][4];   // the outputs times 2^(8 - (ev - 127))
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
    }

    int stage = 0;  // the stage of the step at k0
    for (int k0 = first; k0 < k_end; k0 += STEP) {
        // The copies PAM8_STAGES - 1 steps ahead, then this step's wait (a group per step, empty
        // past the split).
        const int ahead = k0 + (PAM8_STAGES - 1) * STEP;
        const int into = stage == 0 ? PAM8_STAGES - 1 : stage - 1;
        if (ahead < k_end) {
            pam8_issue(stages + into * PAM8_STAGE_BYTES, dst, k_head, v_head, k_scale, v_scale, table, cur,
                       k_end - 1 - ahead, h, lane, d);
        }
        cp_async_commit();
        pam_advance(cur, STEP, d);
        pam_wait_all_but_newest<PAM8_STAGES - 1>();
        __syncwarp();
        const unsigned char* st = stages + stage * PAM8_STAGE_BYTES;
        stage = stage + 1 == PAM8_STAGES ? 0 : stage + 1;
        const float* sks = reinterpret_cast<const float*>(st + PAM8_STAGE_KS);
        const float* svs = reinterpret_cast<const float*>(st + PAM8_STAGE_VS);
        const int last = k_end - 1 - k0;

        // Scores: tile j's sc[j][0..1] = S[head g][keys 8 j + 2 t, + 1] (entries 2, 3: zero rows).
        float sc[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint4 kr[2] = {pam_lds128(st + k_at[0] + 1024 * j), pam_lds128(st + k_at[1] + 1024 * j)};
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[j][e] = 0.f;
#pragma unroll
            for (int w = 0; w < KW; ++w) {
                unsigned b0, b1;
                pam_e4m3x4(pam_word(kr, w), b0, b1);
                const unsigned a[4] = {qlo[w], 0u, qhi[w], 0u};
                pam_mma_f16(sc[j], a, b0, b1);
            }
        }
        float x[8], vsc[8];  // the lane's eight keys, u order: 2t, 2t + 1, 8 + 2t, 9 + 2t, 16 + 2t, ...
        float mt = NEG_INF;
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int key = 2 * t + (u & 1) + 8 * (u >> 1);
            x[u] = key <= last ? sc[u >> 1][u & 1] * qf * sks[key] : NEG_INF;
            vsc[u] = svs[key];  // key = 2 t + (u & 1) + 8 (u >> 1): an immediate past 2 t
            mt = fmaxf(mt, x[u]);
        }
        // The step's largest value scale: every lane's own key (a key past the split repeats the last).
        float vmax = svs[lane];
#pragma unroll
        for (int o = 16; o > 0; o /= 2) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        const float mn = fmaxf(m, mt);
        // Nothing seen yet (every key masked): keep everything at zero.
        const float ref = mn == NEG_INF ? 0.f : mn;
        const float alpha = exp2f(m - ref);
        m = mn;
        // Every value scale of the step is below 2^(ev' - 127): the weights times their value
        // scales times 2^(8 - (ev' - 127)) lie in [0, 256].
        const int ev_new = max(ev, min(((__float_as_int(vmax) >> 23) & 0xff) + 1, 254));
        const int sh = 127 + ev - ev_new;  // the accumulators' factor 2^(ev - ev'), 0 when that underflows
        const float shrink = sh >= 1 ? pam_pow2(sh) : 0.f;
        ev = ev_new;
        const float wf = pam_pow2(262 - ev);
        float p[8];
        float psum = 0.f;
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            p[u] = g < G ? exp2f(x[u] - ref) : 0.f;
            psum += p[u];
        }
        l = l * alpha + psum;
        unsigned pw[4];  // the weights times their value scales, f16 pairs in u order
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            pw[k] = pam_f16x2(p[2 * k] * vsc[2 * k] * wf, p[2 * k + 1] * vsc[2 * k + 1] * wf);
        }
        // The accumulators are heads 2t and 2t + 1: their factors live in lanes 8t and 8t + 4.
        const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * t) * shrink;
        const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * t + 4) * shrink;
        uint4 vr[8];  // chunk g of the lane's eight keys' values (u order)
#pragma unroll
        for (int u = 0; u < 8; ++u) vr[u] = pam_lds128(st + v_at[u & 1] + 1024 * (u >> 1));
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            // Channels 16 g + 4 w .. + 3 of the lane's keys, transposed: tiles 2 w and 2 w + 1.
            unsigned ya[4], yb[4];
            pam_t4(pam_word(&vr[0], w), pam_word(&vr[1], w), pam_word(&vr[2], w), pam_word(&vr[3], w), ya);
            pam_t4(pam_word(&vr[4], w), pam_word(&vr[5], w), pam_word(&vr[6], w), pam_word(&vr[7], w), yb);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = 2 * w + half;
                // Keys 2 t, 2 t + 1 | 8 + 2 t, 9 + 2 t of ya, the 16 keys on of yb (rows g, g + 8).
                unsigned a[4], a2[4];
                pam_e4m3x4(ya[2 * half], a[0], a[2]);
                pam_e4m3x4(ya[2 * half + 1], a[1], a[3]);
                pam_e4m3x4(yb[2 * half], a2[0], a2[2]);
                pam_e4m3x4(yb[2 * half + 1], a2[1], a2[3]);
                float c[4] = {0.f, 0.f, 0.f, 0.f};
                pam_mma_f16(c, a, pw[0], pw[1]);
                pam_mma_f16(c, a2, pw[2], pw[3]);
                acc[i][0] = fmaf(acc[i][0], a0, c[0]);
                acc[i][1] = fmaf(acc[i][1], a1, c[1]);
                acc[i][2] = fmaf(acc[i][2], a0, c[2]);
                acc[i][3] = fmaf(acc[i][3], a1, c[3]);
            }
        }
        // Every lane has read the stage before the next step's copies overwrite it.
        __syncwarp();
    }
    cp_async_wait_all();
    // The merge's area overlaps the stages: every warp is past its loop.
    __syncthreads();

    // Tile i's rows g and g + 8 are channels 16 g + 2 i and 16 g + 2 i + 1; the accumulators are
    // in units of 2^(8 - (ev - 127)).
    pam_finish<G, 1, 2>(acc, ev > 8 ? pam_pow2(ev - 8) : 0.f, m, l, b, out, part, d);
}
#endif

#define PAM_SWITCH(F, ...)                                        \
    switch (d.q_heads / d.kv_heads) {                             \
        case 1: F<1>(__VA_ARGS__); break;                         \
        case 2: F<2>(__VA_ARGS__); break;                         \
        case 4: F<4>(__VA_ARGS__); break;                         \
        default: F<8>(__VA_ARGS__); break;                        \
    }

// Decode (time == 1, head_dim 128, groups of 1, 2, 4 or 8) over caches in the storage type; the
// host launches it in bf16 storage on sm_80+ only.
extern "C" __global__ void __launch_bounds__(PAM_WARPS * 32, 3)
    lm_paged_attention_mma(const T* __restrict__ qkv, const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                           const int* __restrict__ tables, const int* __restrict__ start, T* __restrict__ out,
                           float* __restrict__ part, PagedDims d) {
    pdl_enter();
#if MMA_ENABLED
    PAM_SWITCH(pam_decode, qkv, k_cache, v_cache, tables, start, out, part, d)
#endif
}

// The same over 8-bit caches (sm_89+): three blocks per multiprocessor (registers and stages).
extern "C" __global__ void __launch_bounds__(PAM_WARPS * 32, 3)
    lm_paged_attention_mma8(const T* __restrict__ qkv, const unsigned char* __restrict__ k_cache,
                            const unsigned char* __restrict__ v_cache, const int* __restrict__ tables,
                            const int* __restrict__ start, T* __restrict__ out, float* __restrict__ part,
                            const float* __restrict__ k_scale, const float* __restrict__ v_scale, PagedDims d) {
    pdl_enter();
#if PAM8_ENABLED
    PAM_SWITCH(pam8_decode, qkv, k_cache, v_cache, tables, start, out, part, k_scale, v_scale, d)
#endif
}
