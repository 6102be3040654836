// Convolution to one output channel from 64 (the decoder's last layer: 64 -> 1, seven taps, ELU'd
// input), bf16 on the tensor cores. Rather than one product per output time and tap, each window
// row's per-tap products P[p][j] = w[j] . xin[p] are one m16n8k16 product per 16 channels
// (n = the 8 taps, zero past the kernel), then out[t] = bias + residual + sum_j P[t + j*dil][j]
// from shared memory: 4 products per 16 rows where the implicit GEMM needs 28. A dot product may
// take its channels in any order, so lane q's k-steps walk its own 16 contiguous channels: each
// lane reads whole 16-byte vectors of its rows straight from global memory, with no staging.

#define OUT1_C_IN 64
#define OUT1_TAPS 8
// Most output times per block (the host picks fewer when that leaves SMs idle).
#define OUT1_TILE 256
#define OUT1_MAX_HISTORY 64
#define OUT1_THREADS 128
#define OUT1_ROWS_PER_WARP 16

#if MMA_ENABLED
// ELU of two packed bf16 values, repacked.
__device__ __forceinline__ unsigned elu_bf16x2(unsigned v) {
    float lo = __uint_as_float(v << 16);
    float hi = __uint_as_float(v & 0xffff0000u);
    lo = lo > 0.f ? lo : __expf(lo) - 1.f;
    hi = hi > 0.f ? hi : __expf(hi) - 1.f;
    return pack_bf16x2(lo, hi);
}

// Lane q's 16 channels [16 q, 16 q + 16) of window row p (zero past the window), ELU'd where
// they come from x: two 16-byte vectors as eight bf16 pairs.
__device__ __forceinline__ void out1_row(const T* x, const T* state, const int* slots, const ConvDims& d, int r,
                                         int pos, bool live, int q, unsigned* v) {
    uint4 a = make_uint4(0u, 0u, 0u, 0u), b = a;
    bool apply = false;
    if (live) {
        const uint4* src = reinterpret_cast<const uint4*>(conv_src(x, state, slots, d, r, pos, &apply) + 16 * q);
        a = src[0];
        b = src[1];
    }
    unsigned raw[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = apply ? elu_bf16x2(raw[i]) : raw[i];
}
#endif

extern "C" __global__ void __launch_bounds__(OUT1_THREADS) conv_out1(const T* __restrict__ x, const T* __restrict__ state,
                                                                     const int* __restrict__ slots, const T* __restrict__ w,
                                                                     const T* __restrict__ bias, const T* __restrict__ residual,
                                                                     T* __restrict__ out, ConvDims d, int tile) {
    pdl_enter();
#if MMA_ENABLED
    __shared__ float sp[(OUT1_TILE + OUT1_MAX_HISTORY) * OUT1_TAPS];
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    int g = lane >> 2;
    int q = lane & 3;
    // B fragments: tap g's weights over lane q's channels, k-step s holding channels
    // 16 q + 4 s + {0, 1} (b0) and + {2, 3} (b1), as the A fragments below.
    unsigned wb[8];
    {
        uint4 a = make_uint4(0u, 0u, 0u, 0u), b = a;
        if (g < d.kernel) {
            const uint4* src = reinterpret_cast<const uint4*>(w + g * OUT1_C_IN + 16 * q);
            a = src[0];
            b = src[1];
        }
        unsigned raw[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) wb[i] = raw[i];
    }
    int tiles = (d.time + tile - 1) / tile;
    int r = blockIdx.x / tiles;
    int t0 = (blockIdx.x % tiles) * tile;
    int count = min(tile, d.time - t0);
    int span = count + d.history;
    for (int p0 = warp * OUT1_ROWS_PER_WARP; p0 < span; p0 += (OUT1_THREADS / 32) * OUT1_ROWS_PER_WARP) {
        unsigned lo[8], hi[8];
        out1_row(x, state, slots, d, r, t0 + p0 + g, p0 + g < span, q, lo);
        out1_row(x, state, slots, d, r, t0 + p0 + g + 8, p0 + g + 8 < span, q, hi);
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            unsigned a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
            mma_bf16(acc, a, wb[2 * s], wb[2 * s + 1]);
        }
        // acc: P[p0 + g][2q, 2q + 1] and P[p0 + g + 8][2q, 2q + 1].
        if (p0 + g < span) {
            *reinterpret_cast<float2*>(sp + (p0 + g) * OUT1_TAPS + 2 * q) = make_float2(acc[0], acc[1]);
        }
        if (p0 + g + 8 < span) {
            *reinterpret_cast<float2*>(sp + (p0 + g + 8) * OUT1_TAPS + 2 * q) = make_float2(acc[2], acc[3]);
        }
    }
    __syncthreads();
    float b0 = bias ? ld(bias) : 0.f;
    for (int tt = threadIdx.x; tt < count; tt += OUT1_THREADS) {
        long long at = (long long)r * d.time + t0 + tt;
        float a = b0 + (residual ? ld(residual + at) : 0.f);
        for (int j = 0; j < d.kernel; ++j) {
            a += sp[(tt + j * d.dilation) * OUT1_TAPS + j];
        }
        st(out + at, a);
    }
#endif
}
