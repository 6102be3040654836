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

template <int N>
__device__ __forceinline__ void gemv_body(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ out,
                                          int n, int k, int m, int acc_out) {
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
                        unpack(*reinterpret_cast<const uint4*>(x + (size_t)r * k + kk + u * step), xf);
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
                    unpack(*reinterpret_cast<const uint4*>(x + (size_t)r * k + kk), xf);
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
            st(o, acc_out ? ld(o) + v : v);
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
        case 2: gemv_body<2>(x, w, out, n, k, m, acc_out); break;
        case 4: gemv_body<4>(x, w, out, n, k, m, acc_out); break;
        case 8: gemv_body<8>(x, w, out, n, k, m, acc_out); break;
        default: gemv_body<16>(x, w, out, n, k, m, acc_out); break;
    }
}
