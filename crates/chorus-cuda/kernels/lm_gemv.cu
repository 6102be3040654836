// Skinny products out[n, m] = x[n, k] . w[m, k]^T for few rows (n <= 16), the shape of every
// linear of an LM decode step (2 rows per song). The step is weight-bandwidth bound: each warp
// streams one weight row with 16-byte loads that bypass L1 (the weights are read once per step),
// several loads in flight per lane, and keeps one f32 accumulator per activation row; the
// activations are tiny and stay cached.

// Independent 16-byte weight loads in flight per lane.
#define GEMV_UNROLL 4

__device__ __forceinline__ uint4 ld_stream(const T* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// VEC consecutive activations as f32: from the activations (T) or from shared memory (f32).
__device__ __forceinline__ void load_xv(const float* p, float* f) {
#pragma unroll
    for (int e = 0; e < VEC; e += 4) {
        float4 v = *reinterpret_cast<const float4*>(p + e);
        f[e] = v.x;
        f[e + 1] = v.y;
        f[e + 2] = v.z;
        f[e + 3] = v.w;
    }
}
#if CHORUS_BF16
__device__ __forceinline__ void load_xv(const bf16* p, float* f) { unpack(*reinterpret_cast<const uint4*>(p), f); }
#endif

// `acc_out` adds the product to `out` (a residual update); `gelu` applies exact GELU to it.
template <int N, typename X>
__device__ __forceinline__ void gemv_body(const X* __restrict__ x, const T* __restrict__ w, T* __restrict__ out,
                                          int n, int k, int m, int acc_out, int gelu) {
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const int step = 32 * VEC;
    for (int j = warp; j < m; j += warps) {
        float acc[N];
#pragma unroll
        for (int r = 0; r < N; ++r) acc[r] = 0.f;
        const T* wr = w + (size_t)j * k;
        int kk = lane * VEC;
        for (; kk + (GEMV_UNROLL - 1) * step < k; kk += GEMV_UNROLL * step) {
            uint4 wv[GEMV_UNROLL];
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; ++u) wv[u] = ld_stream(wr + kk + u * step);
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; ++u) {
                float wf[VEC];
                unpack(wv[u], wf);
#pragma unroll
                for (int r = 0; r < N; ++r) {
                    if (r < n) {
                        float xf[VEC];
                        load_xv(x + (size_t)r * k + kk + u * step, xf);
#pragma unroll
                        for (int e = 0; e < VEC; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
                    }
                }
            }
        }
        for (; kk < k; kk += step) {
            float wf[VEC];
            unpack(ld_stream(wr + kk), wf);
#pragma unroll
            for (int r = 0; r < N; ++r) {
                if (r < n) {
                    float xf[VEC];
                    load_xv(x + (size_t)r * k + kk, xf);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < N; ++r) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
        }
        if (lane < N && lane < n) {
            float v = 0.f;
#pragma unroll
            for (int r = 0; r < N; ++r) v = (r == lane) ? acc[r] : v;
            T* o = out + (size_t)lane * m + j;
            float y = acc_out ? ld(o) + v : v;
            st(o, gelu ? gelu_f(y) : y);
        }
    }
}

// `tile` is the row capacity of the instantiation (2, 4, 8 or 16), >= n; k is a multiple of VEC.
// `acc_out` non-zero adds the product to `out` (a residual update) instead of overwriting it.
extern "C" __global__ void lm_gemv(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out, int n, int k,
                                   int m, int tile, int acc_out) {
    prefetch_first_row(w, (size_t)k * sizeof(T), m);
    pdl_enter();
    switch (tile) {
        case 2: gemv_body<2, T>(x, w, out, n, k, m, acc_out, 0); break;
        case 4: gemv_body<4, T>(x, w, out, n, k, m, acc_out, 0); break;
        case 8: gemv_body<8, T>(x, w, out, n, k, m, acc_out, 0); break;
        default: gemv_body<16, T>(x, w, out, n, k, m, acc_out, 0); break;
    }
}

// The bulk-copy GEMV (sm_90+, `CudaOptions::gemv_tma`): each warp streams its weight rows through
// its own ring of GEMV_TMA_STAGES shared-memory segments of GEMV_TMA_SEG bytes, each filled by one
// bulk copy (cp.async.bulk) that completes on the segment's mbarrier. A warp thus keeps
// GEMV_TMA_STAGES * GEMV_TMA_SEG bytes in flight whatever its registers, and asks for its first
// segments before it waits on the predecessor (weights are never written during a step), so a
// product's ramp overlaps the kernel before it. Rows go to warps grid-stride, as in lm_gemv, so
// the warps read neighbouring rows at any moment. The sums are those of lm_gemv's 2-row tile.
#define GEMV_TMA_SEG 4096
#define GEMV_TMA_STAGES 3
#define GEMV_TMA_WARPS 8

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}

// One bulk copy of `bytes` (a multiple of 16) into shared memory, counted on `bar`; the weights
// are read once per step, so L2 evicts them first.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                          unsigned long long policy) {
    asm volatile(
        "{\n .reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}" ::"r"(bar), "r"(bytes)
        : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
        "%4;" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(policy)
        : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}
#endif

// Epilogues of the bulk-copy GEMV (mirror chorus_core::lm_ops::Epilogue): store, add to `out`,
// or SwiGLU over the weight's two halves (gate rows [0, m/2), up rows [m/2, m)).
#define GEMV_STORE 0
#define GEMV_ACC 1
#define GEMV_SWIGLU 2

// The bulk-copy GEMV's body, `out = epi(norm?(x) . w^T)` for at most 2 rows: its first segments
// are asked for, then it waits on its predecessor (pdl_enter) and streams. With `gamma` (an
// RMSNorm's weight) the input is multiplied by it on the fly and each row's rsqrt(mean(x^2) + eps)
// scales the sums (as LmOps::fused_linear allows); each block takes the rows' sums of squares
// itself. Under GEMV_SWIGLU a warp's column takes its gate row, then its up row. Without a norm
// and with GEMV_STORE / GEMV_ACC the sums are those of lm_gemv's 2-row tile, bit for bit.
// Shared memory: GEMV_TMA_WARPS * GEMV_TMA_STAGES segments (sized by the host).
__device__ __forceinline__ void gemv_tma_body(const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ gamma, T* __restrict__ out, float eps, int n,
                                              int k, int m, int epi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int N = 2;
    constexpr int SEG = GEMV_TMA_SEG / (int)sizeof(T);
    extern __shared__ float4 gemv_tma_smem[];
    __shared__ __align__(8) unsigned long long bars[GEMV_TMA_WARPS * GEMV_TMA_STAGES];
    __shared__ float sumsq[GEMV_TMA_WARPS][N];
    __shared__ float row_scale[N];
    const int lane = threadIdx.x & 31;
    const int wib = threadIdx.x >> 5;
    const int gw = blockIdx.x * GEMV_TMA_WARPS + wib;
    const int warps = gridDim.x * GEMV_TMA_WARPS;
    const int parts = epi == GEMV_SWIGLU ? 2 : 1;
    const int cols = m / parts;
    const int nseg = (k + SEG - 1) / SEG;
    const int per_col = parts * nseg;
    const int my_cols = gw < cols ? (cols - 1 - gw) / warps + 1 : 0;
    const int units = my_cols * per_col;
    char* ring = reinterpret_cast<char*>(gemv_tma_smem) + (size_t)wib * GEMV_TMA_STAGES * GEMV_TMA_SEG;
    const unsigned bar0 = smem_u32(bars + wib * GEMV_TMA_STAGES);
    unsigned long long policy = 0;
    // Unit u of this warp: column u / per_col, then its part (gate, up) and segment.
    auto issue = [&](int u, int stage) {
        const int c = u / per_col, rem = u % per_col;
        const int row = gw + c * warps + (rem / nseg) * cols, off = (rem % nseg) * SEG;
        bulk_load(smem_u32(ring + stage * GEMV_TMA_SEG), w + (size_t)row * k + off,
                  (unsigned)(min(SEG, k - off) * sizeof(T)), bar0 + 8 * stage, policy);
    };
    if (lane == 0) {
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#pragma unroll
        for (int s = 0; s < GEMV_TMA_STAGES; ++s) mbar_init(bar0 + 8 * s);
        // The barriers are initialised before the copy engine signals them.
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        for (int u = 0; u < units && u < GEMV_TMA_STAGES; ++u) issue(u, u);
    }
    __syncwarp();
    pdl_enter();
    if (gamma != nullptr) {
        // Every block takes the rows' sums of squares (the rows are a few KB, in L2).
        for (int r = 0; r < n; ++r) {
            float q = 0.f;
            for (int c = threadIdx.x * VEC; c < k; c += blockDim.x * VEC) {
                float f[VEC];
                load_xv(x + (size_t)r * k + c, f);
#pragma unroll
                for (int v = 0; v < VEC; ++v) q = fmaf(f[v], f[v], q);
            }
            q = warp_sum(q);
            if (lane == 0) sumsq[wib][r] = q;
        }
        __syncthreads();
        if (threadIdx.x < n) {
            float q = 0.f;
#pragma unroll
            for (int i = 0; i < GEMV_TMA_WARPS; ++i) q += sumsq[i][threadIdx.x];
            row_scale[threadIdx.x] = rsqrtf(q / k + eps);
        }
        __syncthreads();
    }
    float acc[N], gate[N];
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] = gate[r] = 0.f;
    for (int u = 0; u < units; ++u) {
        const int stage = u % GEMV_TMA_STAGES;
        mbar_wait(bar0 + 8 * stage, (unsigned)(u / GEMV_TMA_STAGES) & 1u);
        const int rem = u % per_col;
        const int off = (rem % nseg) * SEG, len = min(SEG, k - off);
        const T* seg = reinterpret_cast<const T*>(ring + stage * GEMV_TMA_SEG);
#pragma unroll 4
        for (int e = lane * VEC; e < len; e += 32 * VEC) {
            float wf[VEC];
            unpack(*reinterpret_cast<const uint4*>(seg + e), wf);
            if (gamma != nullptr) {
                float gf[VEC];
                load_xv(gamma + off + e, gf);
#pragma unroll
                for (int v = 0; v < VEC; ++v) wf[v] *= gf[v];
            }
#pragma unroll
            for (int r = 0; r < N; ++r) {
                if (r < n) {
                    float xf[VEC];
                    load_xv(x + (size_t)r * k + off + e, xf);
#pragma unroll
                    for (int v = 0; v < VEC; ++v) acc[r] = fmaf(wf[v], xf[v], acc[r]);
                }
            }
        }
        // Every lane has read the segment before it is refilled.
        __syncwarp();
        if (lane == 0 && u + GEMV_TMA_STAGES < units) issue(u + GEMV_TMA_STAGES, stage);
        if (rem % nseg != nseg - 1) continue;
        // A row's sums are complete: reduce them across the warp.
#pragma unroll
        for (int r = 0; r < N; ++r) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
            if (gamma != nullptr) acc[r] *= row_scale[r < n ? r : 0];
        }
        if (rem != per_col - 1) {
            // The gate row of a SwiGLU column: its up row follows.
#pragma unroll
            for (int r = 0; r < N; ++r) {
                gate[r] = acc[r];
                acc[r] = 0.f;
            }
            continue;
        }
        if (lane < N && lane < n) {
            const float y = lane == 0 ? acc[0] : acc[1];
            const float g = lane == 0 ? gate[0] : gate[1];
            T* o = out + (size_t)lane * cols + gw + (u / per_col) * warps;
            st(o, epi == GEMV_SWIGLU ? g / (1.f + expf(-g)) * y : epi == GEMV_ACC ? ld(o) + y : y);
        }
#pragma unroll
        for (int r = 0; r < N; ++r) acc[r] = 0.f;
    }
#else
    pdl_enter();
#endif
}

// Two blocks per SM (their rings fill 192 KB of shared memory): at most 128 registers.
extern "C" __global__ void __launch_bounds__(GEMV_TMA_WARPS * 32, 2)
    lm_gemv_tma(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ gamma, T* __restrict__ out,
                float eps, int n, int k, int m, int epi) {
    gemv_tma_body(x, w, gamma, out, eps, n, k, m, epi);
}

// Rows the fused norm + GEMV kernel takes (the plain kernel's smallest tile).
#define GEMV_NORM_ROWS 2

// out = act(LayerNorm(x) . w^T) for at most GEMV_NORM_ROWS rows (a transformer's pre-norm
// projections at batch 1): each block first normalises the rows into shared memory in f32 (two-pass
// statistics, as layer_norm), then its warps stream their weight rows against them, so the norm
// costs no launch of its own. Shared memory: n * k floats. (warp_sum comes from attention.cu.)
extern "C" __global__ void gemv_norm(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                                     float eps, const T* __restrict__ w, T* __restrict__ out, int n, int k, int m,
                                     int gelu) {
    prefetch_first_row(w, (size_t)k * sizeof(T), m);
    pdl_enter();
    extern __shared__ float4 gemv_norm_smem[];
    float* xs = reinterpret_cast<float*>(gemv_norm_smem);
    __shared__ float stats[2 * GEMV_NORM_ROWS];
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    if (warp < n) {
        const T* xr = x + (size_t)warp * k;
        float sum = 0.f;
        for (int c = lane; c < k; c += 32) sum += ld(xr + c);
        float mean = warp_sum(sum) / k;
        float var = 0.f;
        for (int c = lane; c < k; c += 32) {
            float d = ld(xr + c) - mean;
            var += d * d;
        }
        var = warp_sum(var);
        if (lane == 0) {
            stats[2 * warp] = mean;
            stats[2 * warp + 1] = rsqrtf(var / k + eps);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n * k; i += blockDim.x) {
        int r = i / k;
        int c = i - r * k;
        xs[i] = (ld(x + i) - stats[2 * r]) * stats[2 * r + 1] * ld(gamma + c) + ld(beta + c);
    }
    __syncthreads();
    gemv_body<GEMV_NORM_ROWS, float>(xs, w, out, n, k, m, 0, gelu);
}
