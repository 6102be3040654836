// int8 products of 65 to 256 rows on the tensor cores (W8A16 in f16, bf16 storage):
// out = epilogue(x[n, k] . W[rows, k]^T * scale) with x the f16 rotated input (lm_q8.cu's rotation
// with `half_out`) and W biased int8, read once per block of 128 activation rows and converted
// in registers (lm_skinny.cu's sk_q8_half2): no bf16 copy of the weights.
//
// - Block tile: Q8G_BM weight rows (or Q8G_BM / 2 gate/up pairs for SwiGLU, tile rows g: gate,
//   g + 8: up, as lm_skinny.cu) x 128 activation rows, k in tiles of 64 through a
//   Q8G_STAGES-deep cp.async pipeline in shared memory. 8 warps as 4 (weights, Q8G_MI x 16 rows
//   each) x 2 (activations, 64 each): each weight is converted by two warps.
// - Fragments without ldmatrix: lane (g, t) takes the 4-byte word t of a weight row's 16-column
//   step (columns 4t..4t+3) for A (bytes 0-1 the first k pair, 2-3 the second) and the matching
//   8 bytes of an activation row for B, a k permutation applied to both. The shared rows are
//   swizzled by 16-byte chunk so that those 32-bit and 64-bit reads are free of bank conflicts.
// - Stream-K (lm_q8_gemm below): the blocks share the tiles' k iterations evenly, so that tile
//   counts below or between multiples of the multiprocessors' slots leave none idle.

#define Q8G_WARPS 8
// 16-row weight tiles per warp (4 warps along the weights): 4 gives 256 weight rows a block, so
// that each activation byte read from L2 serves twice the weights of 2 (two blocks a
// multiprocessor, 128 registers). src/lm/q8_gemm.rs's WARP_TILES matches it.
#define Q8G_MI 4
#define Q8G_BM (Q8G_MI * 64)
#define Q8G_BN 128
#define Q8G_BK 64
#define Q8G_STAGES 4
// Shared bytes of one stage: the weights' int8 tile, then the activations' f16 tile.
#define Q8G_W_BYTES (Q8G_BM * Q8G_BK)
#define Q8G_X_BYTES (Q8G_BN * Q8G_BK * 2)
#define Q8G_STAGE_BYTES (Q8G_W_BYTES + Q8G_X_BYTES)
// Accumulator groups per thread: Q8G_MI (16-row weight tiles) x 8 (8-row activation tiles), of 4.
#define Q8G_GROUPS (Q8G_MI * 8)
#define Q8G_ACC (Q8G_GROUPS * 4)
// Blocks a multiprocessor keeps: the registers of Q8G_ACC accumulators a thread allow two at
// Q8G_MI 2 (128 registers), one at 4.
#define Q8G_MIN_BLOCKS (Q8G_MI == 2 ? 2 : 1)
// Alignment of the stages' base: the wgmma variant's 128-byte swizzle repeats every 1024 bytes
// of shared address (lm_q8_wgmma.cu); src/lm/q8_gemm.rs's SMEM keeps the slack.
#define Q8G_ALIGN 1024

#if MMA_ENABLED
__device__ __forceinline__ void q8g_cp16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void q8g_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void q8g_wait_stages() {
    asm volatile("cp.async.wait_group %0;" ::"n"(Q8G_STAGES - 2) : "memory");
}

// Byte offset of 16-byte chunk c of weight tile row r (4 chunks a row).
__device__ __forceinline__ int q8g_w_off(int r, int c) { return r * Q8G_BK + ((c ^ ((r >> 1) & 3)) << 4); }
// Byte offset of 16-byte chunk c of activation tile row r (8 chunks a row): swizzled for the
// mma.sync fragments' 8-byte reads, or (`sw128`) in the wgmma's 128-byte swizzle, chunk c ^ (r & 7).
__device__ __forceinline__ int q8g_x_off(int r, int c, bool sw128) {
    return r * Q8G_BK * 2 + ((c ^ (sw128 ? (r & 7) : ((r & 3) << 1))) << 4);
}

// 16-row weight tile of warp tile mi of warp wm (of 4 along the weights): the warps' tiles
// interleave so that tiles 4 mi .. 4 mi + 3 are one wgmma's 64 rows (lm_q8_wgmma.cu).
__device__ __forceinline__ int q8g_t16(int wm, int mi) { return mi * 4 + wm; }

// Weight row of tile row r in the block of first output j_base (SwiGLU: gate rows and up rows
// m further, in alternate groups of 8), clamped to the last row.
__device__ __forceinline__ int q8g_row(int r, int j_base, int m, bool swiglu) {
    if (swiglu) {
        const int j = min(j_base + (r >> 4) * 8 + (r & 7), m - 1);
        return (r & 8) ? m + j : j;
    }
    return min(j_base + r, m - 1);
}

// Loads k tile kt of the block into stage `st`: Q8G_MI weight chunks and 4 activation chunks per thread;
// activation rows past n are zero-filled.
__device__ __forceinline__ void q8g_load(unsigned smem, int st, int kt, const unsigned char* __restrict__ w,
                                         const unsigned short* __restrict__ x, const int* wrows, int n0, int n,
                                         int k, bool sw128) {
    const unsigned base = smem + st * Q8G_STAGE_BYTES;
#pragma unroll
    for (int i = 0; i < Q8G_MI; ++i) {
        const int idx = threadIdx.x + i * Q8G_WARPS * 32;
        const int r = idx >> 2, c = idx & 3;
        q8g_cp16(base + q8g_w_off(r, c), w + (size_t)wrows[i] * k + kt * Q8G_BK + c * 16, 16);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int idx = threadIdx.x + i * Q8G_WARPS * 32;
        const int r = idx >> 3, c = idx & 7;
        const int row = n0 + r;
        const unsigned short* src = x + (size_t)min(row, n - 1) * k + kt * Q8G_BK + c * 8;
        q8g_cp16(base + Q8G_W_BYTES + q8g_x_off(r, c, sw128), src, row < n ? 16 : 0);
    }
}

__device__ __forceinline__ unsigned q8g_smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// The outputs of accumulator group (mi, ni) of thread `tid` (`a`: its 4 values): stored, added,
// or (gate rows, e < 2) SwiGLU'd with the up row's accumulator e + 2.
__device__ __forceinline__ void q8g_out(const float* a, int tid, int mi, int ni, const float* __restrict__ scale,
                                        T* __restrict__ out, int j_base, int n0, int n, int m, int epi) {
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp & 3, wn = warp >> 2;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int r = n0 + wn * 64 + ni * 8 + 2 * t + (e & 1);
        if (r >= n) continue;
        if (epi == SK_SWIGLU) {
            if (e >= 2) continue;
            const int j = j_base + q8g_t16(wm, mi) * 8 + g;
            if (j >= m) continue;
            const float gate = a[e] * scale[j], up = a[e + 2] * scale[m + j];
            st(out + (size_t)r * m + j, gate / (1.f + expf(-gate)) * up);
        } else {
            const int j = j_base + q8g_t16(wm, mi) * 16 + g + ((e & 2) ? 8 : 0);
            if (j >= m) continue;
            const float y = a[e] * scale[j];
            T* o = out + (size_t)r * m + j;
            st(o, epi == SK_ACC ? ld(o) + y : y);
        }
    }
}

__device__ __forceinline__ void q8g_epilogue(const float* acc, const float* __restrict__ scale, T* __restrict__ out,
                                             int j_base, int n0, int n, int m, int epi) {
#pragma unroll
    for (int mi = 0; mi < Q8G_MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
            q8g_out(acc + (mi * 8 + ni) * 4, threadIdx.x, mi, ni, scale, out, j_base, n0, n, m, epi);
    }
}

// A 16 x 16 f16 A fragment from the byte pairs of rows g (w0) and g + 8 (w1): low pairs, then high.
__device__ __forceinline__ void q8g_afrag(unsigned* a, unsigned w0, unsigned w1) {
    a[0] = sk_q8_half2(w0, 0);
    a[1] = sk_q8_half2(w1, 0);
    a[2] = sk_q8_half2(w0, 1);
    a[3] = sk_q8_half2(w1, 1);
}

// One stage's products on mma.sync: each warp converts its weight fragments from int8 in registers
// and reads its activation fragments from the mma-swizzled tile. `ws`: the stage's generic base.
struct Q8gMmaStage {
    static constexpr bool sw128 = false;
    __device__ __forceinline__ void begin(float*) const {}
    __device__ __forceinline__ void ready() const {}
    __device__ __forceinline__ void operator()(float* acc, const unsigned char* ws, unsigned) const {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int g = lane >> 2, t = lane & 3;
        const int wm = warp & 3, wn = warp >> 2;
        const unsigned char* xs = ws + Q8G_W_BYTES;
#pragma unroll
        for (int ks = 0; ks < Q8G_BK / 16; ++ks) {
            unsigned a[Q8G_MI][4];
#pragma unroll
            for (int mi = 0; mi < Q8G_MI; ++mi) {
                const int r0 = q8g_t16(wm, mi) * 16 + g;
                const unsigned w0 = *reinterpret_cast<const unsigned*>(ws + q8g_w_off(r0, ks) + 4 * t);
                const unsigned w1 = *reinterpret_cast<const unsigned*>(ws + q8g_w_off(r0 + 8, ks) + 4 * t);
                q8g_afrag(a[mi], w0, w1);
            }
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
                const int r = wn * 64 + ni * 8 + g;
                const uint2 b =
                    *reinterpret_cast<const uint2*>(xs + q8g_x_off(r, 2 * ks + (t >> 1), false) + 8 * (t & 1));
#pragma unroll
                for (int mi = 0; mi < Q8G_MI; ++mi) mma_f16(acc + (mi * 8 + ni) * 4, a[mi], b.x, b.y);
            }
        }
    }
};

// The block's accumulators for k tiles [kt0, kt1) of the tile whose first output is j_base and
// first activation row n0: the cp.async ring of Q8G_STAGES stages, each consumed by `stage`
// (Q8gMmaStage, or Q8wStage in lm_q8_wgmma.cu: its tile layout, its fences, its products).
template <typename Stage>
__device__ __forceinline__ void q8g_tile(Stage stage, float* acc, unsigned smem, const unsigned char* gsmem,
                                         const unsigned short* __restrict__ x,
                                         const unsigned char* __restrict__ w, int j_base, int n0, int kt0, int kt1,
                                         int n, int k, int m, bool swiglu) {
    const int steps = kt1 - kt0;
    int wrows[Q8G_MI];
#pragma unroll
    for (int i = 0; i < Q8G_MI; ++i) wrows[i] = q8g_row((threadIdx.x + i * Q8G_WARPS * 32) >> 2, j_base, m, swiglu);
#pragma unroll
    for (int e = 0; e < Q8G_ACC; ++e) acc[e] = 0.f;
    stage.begin(acc);
    // The previous tile's last reads of the ring are done before its stages are refilled.
    __syncthreads();
#pragma unroll
    for (int s = 0; s < Q8G_STAGES - 1; ++s) {
        if (s < steps) q8g_load(smem, s, kt0 + s, w, x, wrows, n0, n, k, Stage::sw128);
        q8g_commit();
    }
    for (int it = 0; it < steps; ++it) {
        q8g_wait_stages();
        stage.ready();
        __syncthreads();
        const int nxt = it + Q8G_STAGES - 1;
        if (nxt < steps) q8g_load(smem, nxt % Q8G_STAGES, kt0 + nxt, w, x, wrows, n0, n, k, Stage::sw128);
        q8g_commit();
        const int at = (it % Q8G_STAGES) * Q8G_STAGE_BYTES;
        stage(acc, gsmem + at, smem + at);
    }
}

// First k iteration of block b of `blocks` over `total` (tiles x k tiles, tile-major); the host
// keeps total x blocks within 32 bits (a 64-bit division is a call, whose saves spill the
// accumulators).
__device__ __forceinline__ int q8g_start(int b, int blocks, int total) {
    return (int)((unsigned)total * (unsigned)b / (unsigned)blocks);
}

// The tile geometry of a product: outputs per block, weight tiles, tiles, k tiles.
struct Q8gShape {
    int per_block, tiles_w, tiles, tiles_k;
};
__device__ __forceinline__ Q8gShape q8g_shape(int n, int k, int m, int epi) {
    Q8gShape s;
    s.per_block = epi == SK_SWIGLU ? Q8G_BM / 2 : Q8G_BM;
    s.tiles_w = (m + s.per_block - 1) / s.per_block;
    s.tiles = s.tiles_w * ((n + Q8G_BN - 1) / Q8G_BN);
    s.tiles_k = k / Q8G_BK;
    return s;
}

// Block b's part of a tile it shares: slot 0 when its range starts in the tile, slot 1 when it
// ends there (a block shares at most the tile it starts in and the one it ends in).
__device__ __forceinline__ float* q8g_part(float* work, int b, int first, int tile_first) {
    return work + ((size_t)b * 2 + (first >= tile_first ? 0 : 1)) * Q8G_ACC * (Q8G_WARPS * 32);
}

// Stream-K: the grid's blocks split the (tile, k tile) iterations, tile-major, into equal
// contiguous ranges, so that every multiprocessor gets the same work whatever the tile count. A
// tile covered by one block gets its epilogue there; a tile shared by several blocks leaves their
// parts in `work` for lm_q8_gemm_sum (f32, two slots of Q8G_ACC x 256 per block; accumulator
// group q of a thread at float4 q x 256 + thread), so that no block waits on another and the
// sum's order does not depend on which finishes first. `m` output columns (gate rows for SwiGLU,
// whose weight holds 2 m rows); k a multiple of Q8G_BK. `Stage` computes a stage's products
// (Q8gMmaStage, or Q8wStage in lm_q8_wgmma.cu), both in the same accumulator layout.
template <typename Stage>
__device__ __forceinline__ void q8g_run(Stage stage, const unsigned short* __restrict__ x,
                                        const unsigned char* __restrict__ w, const float* __restrict__ scale,
                                        T* __restrict__ out, float* __restrict__ work, int n, int k, int m, int epi) {
    extern __shared__ __align__(16) unsigned char q8g_smem[];
    const unsigned raw = q8g_smem_addr(q8g_smem);
    const unsigned smem = (raw + Q8G_ALIGN - 1) & ~(unsigned)(Q8G_ALIGN - 1);
    const unsigned char* gsmem = q8g_smem + (smem - raw);
    const bool swiglu = epi == SK_SWIGLU;
    const Q8gShape sh = q8g_shape(n, k, m, epi);
    const int total = sh.tiles * sh.tiles_k;
    const int blocks = gridDim.x, b = blockIdx.x;
    const int first = q8g_start(b, blocks, total), last = q8g_start(b + 1, blocks, total);
    float acc[Q8G_ACC];
    for (int i = first; i < last;) {
        const int tile = i / sh.tiles_k;
        const int kt0 = i - tile * sh.tiles_k;
        const int kt1 = min(last - tile * sh.tiles_k, sh.tiles_k);
        i = tile * sh.tiles_k + kt1;
        const int j_base = (tile % sh.tiles_w) * sh.per_block;
        const int n0 = (tile / sh.tiles_w) * Q8G_BN;
        q8g_tile(stage, acc, smem, gsmem, x, w, j_base, n0, kt0, kt1, n, k, m, swiglu);
        if (kt0 > 0 || kt1 < sh.tiles_k) {
            float* mine = q8g_part(work, b, first, tile * sh.tiles_k);
#pragma unroll
            for (int q = 0; q < Q8G_ACC / 4; ++q)
                reinterpret_cast<float4*>(mine)[q * (Q8G_WARPS * 32) + threadIdx.x] =
                    make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
        } else {
            q8g_epilogue(acc, scale, out, j_base, n0, n, m, epi);
        }
    }
}

extern "C" __global__ void __launch_bounds__(Q8G_WARPS * 32, Q8G_MIN_BLOCKS)
    lm_q8_gemm(const unsigned short* __restrict__ x, const unsigned char* __restrict__ w,
               const float* __restrict__ scale, T* __restrict__ out, float* __restrict__ work, int n, int k, int m,
               int epi) {
    pdl_enter();
    q8g_run(Q8gMmaStage{}, x, w, scale, out, work, n, k, m, epi);
}

// The shared tiles' sums and epilogues after lm_q8_gemm of `blocks` blocks: block (b, q) of
// blocks x Q8G_GROUPS takes accumulator group q (mi = q / 8, ni = q % 8) of every lm_q8_gemm thread for
// the tile b's range ends in, when b is the first of the blocks sharing it (each shared tile
// has one such block), adding the parts in block order.
extern "C" __global__ void __launch_bounds__(Q8G_WARPS * 32)
    lm_q8_gemm_sum(const float* __restrict__ work, const float* __restrict__ scale, T* __restrict__ out, int blocks,
                   int n, int k, int m, int epi) {
    pdl_enter();
    const Q8gShape sh = q8g_shape(n, k, m, epi);
    const int total = sh.tiles * sh.tiles_k;
    const int b = blockIdx.x / Q8G_GROUPS, q = blockIdx.x % Q8G_GROUPS;
    const int first = q8g_start(b, blocks, total), last = q8g_start(b + 1, blocks, total);
    if (first >= last) return;
    const int tile = (last - 1) / sh.tiles_k;
    const int tile_first = tile * sh.tiles_k, tile_end = tile_first + sh.tiles_k;
    if (first > tile_first || last >= tile_end) return;
    float a[4] = {0.f, 0.f, 0.f, 0.f};
    for (int p = b, ps = first; ps < tile_end;) {
        const float4 v = reinterpret_cast<const float4*>(
            q8g_part(const_cast<float*>(work), p, ps, tile_first))[q * (Q8G_WARPS * 32) + threadIdx.x];
        a[0] += v.x;
        a[1] += v.y;
        a[2] += v.z;
        a[3] += v.w;
        ps = q8g_start(++p, blocks, total);
    }
    q8g_out(a, threadIdx.x, q >> 3, q & 7, scale, out, (tile % sh.tiles_w) * sh.per_block,
            (tile / sh.tiles_w) * Q8G_BN, n, m, epi);
}
#else
extern "C" __global__ void lm_q8_gemm(const unsigned short* x, const unsigned char* w, const float* scale, T* out,
                                      float* work, int n, int k, int m, int epi) {
    pdl_enter();
}
extern "C" __global__ void lm_q8_gemm_sum(const float* work, const float* scale, T* out, int blocks, int n, int k,
                                          int m, int epi) {
    pdl_enter();
}
#endif
