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
