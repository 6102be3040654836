// Tensor-core causal convolution (bf16 storage; the f32 validation mode keeps the exact paths of
// conv.cu): an implicit GEMM out[r, t, n] = bias + residual + sum_{j, c} W[n, j, c] xin[r, t + j*dil, c],
// where xin is the slot's history (state) followed by f(x[r]) (f = ELU or identity). It reads the
// input once, where the im2col and tap-split paths write and re-read it once per tap.
// Each block stages its weights once (bf16, [n][k] with k = j*c_in + c) and then walks tiles of
// MMA_BM output times of one row: a tile's input window loads (cp.async) while the previous tile
// computes, f is applied in shared memory, and each warp multiplies 16 times by all the block's
// outputs with mma.m16n8k16.

#define MMA_WARPS 4
#define MMA_BM (16 * MMA_WARPS)
// bf16 elements of padding per shared-memory row: ldmatrix's eight 16-byte rows then fall in
// different banks (row pitches are 16 bytes past a multiple of 128).
#define MMA_PAD 8

// Geometry of one tensor-core convolution (mirrors the host struct `MmaConvDims`). Weight
// element (n, j, c) is w[n*w_sn + j*w_sj + c*w_sc].
struct MmaConvDims {
    int rows, time, c_in, n_out, taps, dilation, history, elu;
    int tiles, n_blocks;
    long long w_sn, w_sj, w_sc;
};

// Tensor-core code needs bf16 storage and sm_80; elsewhere the entry points compile empty and the
// host never launches them.
#if CHORUS_BF16 && defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 800
#define MMA_ENABLED 1
#endif
#endif
#ifndef MMA_ENABLED
#define MMA_ENABLED 0
#endif

#if MMA_ENABLED
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned)a;
}

__device__ __forceinline__ void ldmatrix_x4(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_bf16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16-byte asynchronous copy global -> shared (sm_80), so that a tile's input window loads while
// the previous tile computes.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Loads per thread issued before any is stored, so that their latencies overlap.
#define MMA_STAGE_UNROLL 8

// Stages the block's weights: sw[n][k] for n in [n0, n0 + bn) (zero past n_out), reading 16-byte
// vectors along k (each output's weights are contiguous).
__device__ __forceinline__ void mma_stage_weights(const T* __restrict__ w, T* sw, int wpitch, int bn, int n0,
                                                  const MmaConvDims& d) {
    int k_vecs = d.taps * d.c_in / VEC;
    int vecs = bn * k_vecs;
    for (int base = threadIdx.x; base < vecs; base += blockDim.x * MMA_STAGE_UNROLL) {
        uint4 v[MMA_STAGE_UNROLL];
#pragma unroll
        for (int u = 0; u < MMA_STAGE_UNROLL; ++u) {
            int idx = base + u * blockDim.x;
            int n = idx / k_vecs;
            v[u] = make_uint4(0u, 0u, 0u, 0u);
            if (idx < vecs && n0 + n < d.n_out) {
                v[u] = *reinterpret_cast<const uint4*>(w + (long long)(n0 + n) * d.w_sn + (idx - n * k_vecs) * VEC);
            }
        }
#pragma unroll
        for (int u = 0; u < MMA_STAGE_UNROLL; ++u) {
            int idx = base + u * blockDim.x;
            if (idx >= vecs) continue;
            int n = idx / k_vecs;
            *reinterpret_cast<uint4*>(sw + n * wpitch + (idx - n * k_vecs) * VEC) = v[u];
        }
    }
}

// Calls f(p, c0) for each 16-byte chunk (row p < span, channel c0) of a window that this thread
// owns. When the block width is a multiple of the chunks per row (power-of-two channel counts),
// each thread keeps one channel chunk and steps over rows, with no division per chunk.
template <class F>
__device__ __forceinline__ void for_window_chunks(int span, int chunks, F f) {
    if (blockDim.x % chunks == 0) {
        int c0 = (threadIdx.x % chunks) * VEC;
        int step = blockDim.x / chunks;
        for (int p = threadIdx.x / chunks; p < span; p += step) {
            f(p, c0);
        }
    } else {
        for (int idx = threadIdx.x; idx < span * chunks; idx += blockDim.x) {
            f(idx / chunks, (idx % chunks) * VEC);
        }
    }
}

// Starts loading the input window of the tile at output time t0 of row r into sx: rows p in
// [0, MMA_BM + history) hold xin[r, t0 + p] before f (zero past the row's end).
__device__ __forceinline__ void mma_issue_input(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                                T* sx, int xpitch, int r, int t0, const MmaConvDims& d) {
    const T* xrow = x + ((long long)r * d.time + t0 - d.history) * d.c_in;
    const T* srow = state + ((long long)slots[r] * d.history + t0) * d.c_in;
    for_window_chunks(MMA_BM + d.history, d.c_in / VEC, [&](int p, int c0) {
        int pos = t0 + p;
        T* dst = sx + p * xpitch + c0;
        if (pos < d.history) {
            cp_async16(dst, srow + p * d.c_in + c0);
        } else if (pos >= d.history && pos < d.history + d.time) {
            cp_async16(dst, xrow + p * d.c_in + c0);
        } else {
            *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
        }
    });
    cp_async_commit();
}

// Two floats as packed bf16 (round to nearest even, one instruction).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    return u;
}

// ELU with the hardware exponential: the input and the result are bf16, whose rounding
// (2^-9 relative) is far coarser than the error of exp(v) - 1 for v < 0.
__device__ __forceinline__ uint4 elu_vec_fast(uint4 v) {
    float f[VEC];
    unpack(v, f);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        f[i] = f[i] > 0.f ? f[i] : __expf(f[i]) - 1.f;
    }
    return make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
}

// Waits for this thread's copies of the window and applies f to its input columns in place (the
// same chunks it issued, so no barrier is needed before; the caller syncs after).
__device__ __forceinline__ void mma_finish_input(T* sx, int xpitch, int t0, const MmaConvDims& d) {
    cp_async_wait_all();
    if (!d.elu) return;
    for_window_chunks(MMA_BM + d.history, d.c_in / VEC, [&](int p, int c0) {
        int pos = t0 + p;
        if (pos >= d.history && pos < d.history + d.time) {
            uint4* cell = reinterpret_cast<uint4*>(sx + p * xpitch + c0);
            *cell = elu_vec_fast(*cell);
        }
    });
}

// Two adjacent bf16 values as f32.
__device__ __forceinline__ void ld_pair(const T* p, bool pair, bool second, float* v) {
    if (pair) {
        unsigned u = *reinterpret_cast<const unsigned*>(p);
        v[0] = __uint_as_float(u << 16);
        v[1] = __uint_as_float(u & 0xffff0000u);
    } else {
        v[0] = ld(p);
        v[1] = second ? ld(p + 1) : 0.f;
    }
}

// out = acc + bias (+ residual), masked to the row's times and the real outputs, by pairs of
// adjacent outputs (one 4-byte access each when n_out is even). Every load precedes every store.
template <int NF>
__device__ __forceinline__ void mma_epilogue(float (*acc)[4], const float (*bias_r)[2], const T* __restrict__ residual,
                                             T* __restrict__ out, int r, int t_base, int n0, const MmaConvDims& d) {
    int lane = threadIdx.x & 31;
    bool pair = (d.n_out & 1) == 0;
    int nl = n0 + (lane & 3) * 2;
    long long row_at[2];
    bool live[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int t = t_base + (lane >> 2) + h * 8;
        live[h] = t < d.time;
        row_at[h] = ((long long)r * d.time + t) * d.n_out;
    }
    float add[NF][4];
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int n = nl + f * 8;
            add[f][2 * h] = bias_r[f][0];
            add[f][2 * h + 1] = bias_r[f][1];
            if (!live[h] || n >= d.n_out) continue;
            float v[2];
            if (residual) {
                ld_pair(residual + row_at[h] + n, pair, n + 1 < d.n_out, v);
                add[f][2 * h] += v[0];
                add[f][2 * h + 1] += v[1];
            }
        }
    }
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int n = nl + f * 8;
            if (!live[h] || n >= d.n_out) continue;
            T* o = out + row_at[h] + n;
            float v0 = acc[f][2 * h] + add[f][2 * h];
            float v1 = acc[f][2 * h + 1] + add[f][2 * h + 1];
            if (pair) {
                *reinterpret_cast<unsigned*>(o) = pack_bf16x2(v0, v1);
            } else {
                st(o, v0);
                if (n + 1 < d.n_out) st(o + 1, v1);
            }
        }
    }
}

// As mma_epilogue, for a block whose NF * 8 outputs are whole 16-byte vectors of each output
// row: the residual is read in the accumulator layout and summed in f32 before the one rounding,
// and the packed results pass through `stage` (the warp's 16 rows of the consumed window, `pitch`
// elements apart) so that each lane stores whole vectors.
template <int NF>
__device__ __forceinline__ void mma_store_staged(float (*acc)[4], const float (*bias_r)[2], const T* __restrict__ residual,
                                                 T* __restrict__ out, T* stage, int pitch, int r, int t_base, int n0,
                                                 const MmaConvDims& d) {
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int t = t_base + g + 8 * h;
        long long row_at = ((long long)r * d.time + t) * d.n_out + n0;
#pragma unroll
        for (int f = 0; f < NF; ++f) {
            int n = f * 8 + 2 * q;
            float v0 = acc[f][2 * h] + bias_r[f][0];
            float v1 = acc[f][2 * h + 1] + bias_r[f][1];
            if (residual && t < d.time) {
                unsigned u = *reinterpret_cast<const unsigned*>(residual + row_at + n);
                v0 += __uint_as_float(u << 16);
                v1 += __uint_as_float(u & 0xffff0000u);
            }
            *reinterpret_cast<unsigned*>(stage + (g + 8 * h) * pitch + n) = pack_bf16x2(v0, v1);
        }
    }
    __syncwarp();
#pragma unroll
    for (int i = lane; i < 16 * NF; i += 32) {
        int row = i / NF;
        int col = (i % NF) * 8;
        if (t_base + row < d.time) {
            *reinterpret_cast<uint4*>(out + ((long long)r * d.time + t_base + row) * d.n_out + n0 + col) =
                *reinterpret_cast<const uint4*>(stage + row * pitch + col);
        }
    }
}

template <int NF>
__device__ __forceinline__ void conv_mma_body(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                              const T* __restrict__ w, const T* __restrict__ bias,
                                              const T* __restrict__ residual, T* __restrict__ out, MmaConvDims d) {
    extern __shared__ __align__(128) unsigned char mma_smem[];
    const int bn = NF * 8;
    int k_total = d.taps * d.c_in;
    int wpitch = k_total + MMA_PAD;
    int xpitch = d.c_in + MMA_PAD;
    int window = (MMA_BM + d.history) * xpitch;
    T* sw = reinterpret_cast<T*>(mma_smem);
    T* sx0 = sw + bn * wpitch;  // two windows: sx0 and sx0 + window
    int nb = blockIdx.x % d.n_blocks;
    int n0 = nb * bn;
    int warp = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    int m0 = warp * 16;
    int total_tiles = d.rows * d.tiles;
    int stride = gridDim.x / d.n_blocks;
    int tix = blockIdx.x / d.n_blocks;
    if (tix < total_tiles) {
        mma_issue_input(x, state, slots, sx0, xpitch, tix / d.tiles, (tix % d.tiles) * MMA_BM, d);
    }
    mma_stage_weights(w, sw, wpitch, bn, n0, d);
    float bias_r[NF][2];
#pragma unroll
    for (int f = 0; f < NF; ++f) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            int n = n0 + f * 8 + (lane & 3) * 2 + e;
            bias_r[f][e] = (bias && n < d.n_out) ? ld(bias + n) : 0.f;
        }
    }
    // Whole 16-byte rows of this block's outputs fit in the window's rows: store through them.
    bool staged = bn <= d.c_in && (d.n_out & 7) == 0 && n0 + bn <= d.n_out;
    for (int buf = 0; tix < total_tiles; tix += stride, buf ^= 1) {
        int r = tix / d.tiles;
        int t0 = (tix % d.tiles) * MMA_BM;
        mma_finish_input(sx0 + buf * window, xpitch, t0, d);
        // The window (and on the first tile the weights) is complete, and every warp is done with
        // the other buffer, which the next tile's copies now overwrite.
        __syncthreads();
        int next = tix + stride;
        if (next < total_tiles) {
            mma_issue_input(x, state, slots, sx0 + (buf ^ 1) * window, xpitch, next / d.tiles, (next % d.tiles) * MMA_BM, d);
        }
        // A warp whose 16 times are all past the row's end computes nothing but still meets the
        // barrier below.
        bool live = t0 + m0 < d.time;
        float acc[NF][4];
#pragma unroll
        for (int f = 0; f < NF; ++f) {
            acc[f][0] = acc[f][1] = acc[f][2] = acc[f][3] = 0.f;
        }
        for (int j = 0; live && j < d.taps; ++j) {
            const T* arow = sx0 + buf * window + (m0 + j * d.dilation + (lane & 15)) * xpitch + (lane >> 4) * 8;
            const T* brow = sw + (lane & 7) * wpitch + j * d.c_in;
            for (int c0 = 0; c0 < d.c_in; c0 += 16) {
                unsigned a[4];
                ldmatrix_x4(a, arow + c0);
                if constexpr (NF == 1) {
                    unsigned b[2];
                    ldmatrix_x2(b, brow + c0 + ((lane >> 3) & 1) * 8);
                    mma_bf16(acc[0], a, b[0], b[1]);
                } else {
#pragma unroll
                    for (int f = 0; f < NF; f += 2) {
                        unsigned b[4];
                        ldmatrix_x4(b, brow + (f * 8 + (lane >> 4) * 8) * wpitch + c0 + ((lane >> 3) & 1) * 8);
                        mma_bf16(acc[f], a, b[0], b[1]);
                        mma_bf16(acc[f + 1], a, b[2], b[3]);
                    }
                }
            }
        }
        if (staged) {
            // Every warp is done reading the window: its rows now stage the outputs.
            __syncthreads();
            if (live) mma_store_staged<NF>(acc, bias_r, residual, out, sx0 + buf * window + m0 * xpitch, xpitch, r, t0 + m0, n0, d);
        } else if (live) {
            mma_epilogue<NF>(acc, bias_r, residual, out, r, t0 + m0, n0, d);
        }
    }
}

#endif

// One entry per outputs-per-block (8 * NF).
extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) conv_mma_n8(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                                                   const T* __restrict__ w, const T* __restrict__ bias,
                                                                   const T* __restrict__ residual, T* __restrict__ out, MmaConvDims d) {
    pdl_enter();
#if MMA_ENABLED
    conv_mma_body<1>(x, state, slots, w, bias, residual, out, d);
#endif
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) conv_mma_n16(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                                                   const T* __restrict__ w, const T* __restrict__ bias,
                                                                   const T* __restrict__ residual, T* __restrict__ out, MmaConvDims d) {
    pdl_enter();
#if MMA_ENABLED
    conv_mma_body<2>(x, state, slots, w, bias, residual, out, d);
#endif
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) conv_mma_n32(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                                                   const T* __restrict__ w, const T* __restrict__ bias,
                                                                   const T* __restrict__ residual, T* __restrict__ out, MmaConvDims d) {
    pdl_enter();
#if MMA_ENABLED
    conv_mma_body<4>(x, state, slots, w, bias, residual, out, d);
#endif
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) conv_mma_n64(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                                                   const T* __restrict__ w, const T* __restrict__ bias,
                                                                   const T* __restrict__ residual, T* __restrict__ out, MmaConvDims d) {
    pdl_enter();
#if MMA_ENABLED
    conv_mma_body<8>(x, state, slots, w, bias, residual, out, d);
#endif
}
