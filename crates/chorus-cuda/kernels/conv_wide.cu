// Tensor-core causal convolution for wide layers (bf16): the implicit GEMM of conv_mma.cu,
// out[m, n] = bias + residual + sum_k A[m, k] W[n, k] over the flattened output times
// m = r * time + t and k = j * c_in + c, with A[m, k] = xin[r, t + j*dil, c] (xin: the slot's
// history, then ELU(x) or x). Where conv_mma stages a block's whole weights once and re-reads the
// input once per 64 outputs, this kernel streams both operands through shared memory in
// WIDE_BK-wide slices of k (a three-stage cp.async pipeline), so its 128 x 128 block tile fits
// layers of any width and any k, and flattened tiles serve rows of two times as well as 480.
// It serves the decoder's upsampling as output phases (a dense transposed convolution of kernel
// 2 * stride is one two-tap convolution with stride * c_out outputs).

#define WIDE_BM 128
#define WIDE_BN 128
#define WIDE_BK 64
#define WIDE_STAGES 3
#define WIDE_WARPS 8
// Each warp computes 64 x 32 of the block tile: 2 warps along m, 4 along n.
#define WIDE_WM 64
#define WIDE_WN 32
#define WIDE_PITCH (WIDE_BK + MMA_PAD)

// Geometry of one wide convolution (mirrors the host struct `WideConvDims`).
struct WideConvDims {
    int rows, time, c_in, n_out, taps, dilation, history, elu;
    int m_total, n_blocks;
};

#if MMA_ENABLED
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Where this thread's A chunks come from: each thread loads the same 4 rows of every k-slice, so
// their rows' (row, time, slot) are found once per tile.
struct WideRows {
    int t[4];
    long long x_row[4];    // element offset of x[r, 0, 0]
    long long s_row[4];    // element offset of state[slot, 0, 0]
    bool live[4];
};

// Thread `tid` loads A rows tid / 8 + 32 i (i < 4), 16-byte chunk tid % 8 of each.
__device__ __forceinline__ WideRows wide_rows(const int* __restrict__ slots, int m0, const WideConvDims& d) {
    WideRows w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int m = m0 + (int)(threadIdx.x >> 3) + 32 * i;
        w.live[i] = m < d.m_total;
        int r = w.live[i] ? m / d.time : 0;
        w.t[i] = w.live[i] ? m - r * d.time : 0;
        w.x_row[i] = (long long)r * d.time * d.c_in;
        w.s_row[i] = d.history > 0 ? (long long)slots[r] * d.history * d.c_in : 0;
    }
    return w;
}

// Starts loading k-slice kt into stage buffers (sa, sb): A rows from the history or x (zero past
// the last time), B rows n0 + [0, WIDE_BN) of the weights [n][k].
__device__ __forceinline__ void wide_issue(const T* __restrict__ x, const T* __restrict__ state, const T* __restrict__ w,
                                           T* sa, T* sb, const WideRows& rows, int n0, int kt, const WideConvDims& d) {
    int k0 = kt * WIDE_BK;
    int j = k0 / d.c_in;
    int c = k0 - j * d.c_in + (threadIdx.x & 7) * VEC;
    int row0 = threadIdx.x >> 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        T* dst = sa + (row0 + 32 * i) * WIDE_PITCH + (threadIdx.x & 7) * VEC;
        int p = rows.t[i] + j * d.dilation;
        if (!rows.live[i]) {
            *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
        } else if (p < d.history) {
            cp_async16(dst, state + rows.s_row[i] + (long long)p * d.c_in + c);
        } else {
            cp_async16(dst, x + rows.x_row[i] + (long long)(p - d.history) * d.c_in + c);
        }
    }
    long long k_total = (long long)d.taps * d.c_in;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int n = row0 + 32 * i;
        cp_async16(sb + n * WIDE_PITCH + (threadIdx.x & 7) * VEC, w + (long long)(n0 + n) * k_total + k0 + (threadIdx.x & 7) * VEC);
    }
    cp_async_commit();
}

// Applies ELU to this thread's A chunks of slice kt that came from x (the history holds ELU'd
// columns already); its copies of the slice are complete.
__device__ __forceinline__ void wide_elu(T* sa, const WideRows& rows, int kt, const WideConvDims& d) {
    int j = (kt * WIDE_BK) / d.c_in;
    int row0 = threadIdx.x >> 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (rows.live[i] && rows.t[i] + j * d.dilation >= d.history) {
            uint4* cell = reinterpret_cast<uint4*>(sa + (row0 + 32 * i) * WIDE_PITCH + (threadIdx.x & 7) * VEC);
            *cell = elu_vec_fast(*cell);
        }
    }
}

// out = acc + bias (+ residual) for one warp's 64 x 32, summed in f32 before the one rounding,
// staged through `stage` (64 rows of WIDE_WN + MMA_PAD) so that each lane stores 16-byte vectors.
__device__ __forceinline__ void wide_store(const float (*acc)[4][4], const T* __restrict__ bias, const T* __restrict__ residual,
                                           T* __restrict__ out, T* stage, int m_base, int n_base, const WideConvDims& d) {
    constexpr int SPITCH = WIDE_WN + MMA_PAD;
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int q = lane & 3;
#pragma unroll
    for (int nf = 0; nf < 4; ++nf) {
        int n = nf * 8 + 2 * q;
        float b0 = bias ? ld(bias + n_base + n) : 0.f;
        float b1 = bias ? ld(bias + n_base + n + 1) : 0.f;
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int row = mi * 16 + g + 8 * h;
                int m = m_base + row;
                float v0 = acc[mi][nf][2 * h] + b0;
                float v1 = acc[mi][nf][2 * h + 1] + b1;
                if (residual && m < d.m_total) {
                    unsigned u = *reinterpret_cast<const unsigned*>(residual + (long long)m * d.n_out + n_base + n);
                    v0 += __uint_as_float(u << 16);
                    v1 += __uint_as_float(u & 0xffff0000u);
                }
                *reinterpret_cast<unsigned*>(stage + row * SPITCH + n) = pack_bf16x2(v0, v1);
            }
        }
    }
    __syncwarp();
    // 64 rows x 4 vectors of 8 outputs.
#pragma unroll
    for (int i = lane; i < WIDE_WM * 4; i += 32) {
        int row = i >> 2;
        int col = (i & 3) * VEC;
        int m = m_base + row;
        if (m < d.m_total) {
            *reinterpret_cast<uint4*>(out + (long long)m * d.n_out + n_base + col) =
                *reinterpret_cast<const uint4*>(stage + row * SPITCH + col);
        }
    }
}

__device__ __forceinline__ void conv_wide_body(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                               const T* __restrict__ w, const T* __restrict__ bias,
                                               const T* __restrict__ residual, T* __restrict__ out, const WideConvDims& d) {
    extern __shared__ __align__(128) unsigned char wide_smem[];
    T* smem = reinterpret_cast<T*>(wide_smem);
    constexpr int STAGE_A = WIDE_BM * WIDE_PITCH;
    constexpr int STAGE = (WIDE_BM + WIDE_BN) * WIDE_PITCH;
    // Consecutive blocks share an m tile (its input stays in L2 across the n tiles).
    int nb = blockIdx.x % d.n_blocks;
    int m0 = (blockIdx.x / d.n_blocks) * WIDE_BM;
    int n0 = nb * WIDE_BN;
    int warp = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    int wm = warp & 1;
    int wn = warp >> 1;
    int k_tiles = d.taps * d.c_in / WIDE_BK;
    WideRows rows = wide_rows(slots, m0, d);
#pragma unroll
    for (int s = 0; s < WIDE_STAGES - 1; ++s) {
        if (s < k_tiles) {
            wide_issue(x, state, w, smem + s * STAGE, smem + s * STAGE + STAGE_A, rows, n0, s, d);
        } else {
            cp_async_commit();
        }
    }
    float acc[4][4][4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int nf = 0; nf < 4; ++nf)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][nf][e] = 0.f;
    for (int kt = 0; kt < k_tiles; ++kt) {
        T* sa = smem + (kt % WIDE_STAGES) * STAGE;
        T* sb = sa + STAGE_A;
        cp_async_wait_group<WIDE_STAGES - 2>();
        if (d.elu) wide_elu(sa, rows, kt, d);
        // Slice kt is complete (and ELU'd) for every warp, and every warp is done with the stage
        // the next copies overwrite (it computed slice kt - 1 before arriving here).
        __syncthreads();
        int next = kt + WIDE_STAGES - 1;
        if (next < k_tiles) {
            T* na = smem + (next % WIDE_STAGES) * STAGE;
            wide_issue(x, state, w, na, na + STAGE_A, rows, n0, next, d);
        } else {
            cp_async_commit();
        }
        const T* arow = sa + (wm * WIDE_WM + (lane & 15)) * WIDE_PITCH + (lane >> 4) * 8;
        const T* brow = sb + (wn * WIDE_WN + (lane >> 4) * 8 + (lane & 7)) * WIDE_PITCH + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int ks = 0; ks < WIDE_BK; ks += 16) {
            unsigned a[4][4];
            unsigned b[2][4];
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) ldmatrix_x4(a[mi], arow + mi * 16 * WIDE_PITCH + ks);
#pragma unroll
            for (int ni = 0; ni < 2; ++ni) ldmatrix_x4(b[ni], brow + ni * 16 * WIDE_PITCH + ks);
#pragma unroll
            for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
                for (int nf = 0; nf < 4; ++nf) {
                    mma_bf16(acc[mi][nf], a[mi], b[nf >> 1][(nf & 1) * 2], b[nf >> 1][(nf & 1) * 2 + 1]);
                }
            }
        }
    }
    cp_async_wait_group<0>();
    // Every warp is done with the pipeline's buffers: they now stage the outputs.
    __syncthreads();
    T* stage = smem + warp * WIDE_WM * (WIDE_WN + MMA_PAD);
    wide_store(acc, bias, residual, out, stage, m0 + wm * WIDE_WM, n0 + wn * WIDE_WN, d);
}
#endif

extern "C" __global__ void __launch_bounds__(WIDE_WARPS * 32, 2) conv_wide(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                                                          const T* __restrict__ w, const T* __restrict__ bias,
                                                                          const T* __restrict__ residual, T* __restrict__ out, WideConvDims d) {
    pdl_enter();
#if MMA_ENABLED
    conv_wide_body(x, state, slots, w, bias, residual, out, d);
#endif
}
