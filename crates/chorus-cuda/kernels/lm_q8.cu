// int8 ConvRot weights (chorus_core::convrot): out[n, m] = (x[n, k] . q[m, k]^T) * scale[m] with
// int8 q and f32 scales, x already rotated by lm_hadamard; f32 accumulation, the scale applied
// once per output after the sum. The device holds each int8 b as the byte b + 128 (biased at
// upload, src/lm/q8.rs), so the conversions below need no sign flip.
//
// - lm_gemv_q8 (n <= 16, used for n <= 4; k a multiple of 16): lm_gemv.cu's layout, one byte per weight: one warp
//   per weight row, 16-byte loads (16 int8 per lane) that bypass L1, several in flight per lane,
//   one f32 accumulator per activation row. An int8 becomes f32 exactly with one byte permute and
//   one subtraction (2^23 + (b + 128) - (2^23 + 128) = b), cheaper than a conversion instruction.
// - lm_dequant_q8 (more rows, or k not a multiple of 16): the int8 rows times their scales in the
//   storage type, for a cuBLAS product (W8A16 by dequantization: 5 bytes moved per weight instead
//   of 1, but cuBLAS's speed at any row count; a tensor-core W8A16 kernel would do better).
// - lm_hadamard: one block per (row, group): the block in shared memory, the radix-4 stages of
//   convrot::rotate_block in the same order (bitwise the CPU's in f32), then * 2^-stages.

// Independent 16-byte weight loads in flight per lane.
#define Q8_UNROLL 4
// Int8 weights per 16-byte load.
#define Q8_VEC 16

__device__ __forceinline__ uint4 q8_ld_stream(const signed char* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Four biased int8 (one 32-bit word, byte 0 first) to f32, exactly.
__device__ __forceinline__ void q8_unpack4(unsigned u, float* f) {
    f[0] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540)) - 8388736.f;
    f[1] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541)) - 8388736.f;
    f[2] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542)) - 8388736.f;
    f[3] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543)) - 8388736.f;
}

// acc[r] += sum_e w[e] * x[r, kk + e] over the 16 weights of `wv`, for the rows r < n.
template <int N>
__device__ __forceinline__ void q8_fma16(uint4 wv, const T* __restrict__ x, int kk, int n, int k, float* acc) {
    float wf[Q8_VEC];
    q8_unpack4(wv.x, wf);
    q8_unpack4(wv.y, wf + 4);
    q8_unpack4(wv.z, wf + 8);
    q8_unpack4(wv.w, wf + 12);
#pragma unroll
    for (int r = 0; r < N; ++r) {
        if (r < n) {
            float xf[Q8_VEC];
#pragma unroll
            for (int v = 0; v < Q8_VEC / VEC; ++v) {
                unpack(*reinterpret_cast<const uint4*>(x + (size_t)r * k + kk + v * VEC), xf + v * VEC);
            }
#pragma unroll
            for (int e = 0; e < Q8_VEC; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
        }
    }
}

template <int N>
__device__ __forceinline__ void gemv_q8_body(const T* __restrict__ x, const signed char* __restrict__ w,
                                             const float* __restrict__ scale, T* __restrict__ out, int n, int k,
                                             int m, int acc_out) {
    const int lane = threadIdx.x & 31;
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int warps = (gridDim.x * blockDim.x) >> 5;
    const int step = 32 * Q8_VEC;
    for (int j = warp; j < m; j += warps) {
        float acc[N];
#pragma unroll
        for (int r = 0; r < N; ++r) acc[r] = 0.f;
        const signed char* wr = w + (size_t)j * k;
        int kk = lane * Q8_VEC;
        for (; kk + (Q8_UNROLL - 1) * step < k; kk += Q8_UNROLL * step) {
            uint4 wv[Q8_UNROLL];
#pragma unroll
            for (int u = 0; u < Q8_UNROLL; ++u) wv[u] = q8_ld_stream(wr + kk + u * step);
#pragma unroll
            for (int u = 0; u < Q8_UNROLL; ++u) q8_fma16<N>(wv[u], x, kk + u * step, n, k, acc);
        }
        for (; kk < k; kk += step) q8_fma16<N>(q8_ld_stream(wr + kk), x, kk, n, k, acc);
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
            st(o, acc_out ? ld(o) + v * scale[j] : v * scale[j]);
        }
    }
}

// `tile` is the row capacity of the instantiation (2, 4, 8 or 16), >= n; k is a multiple of 16;
// `acc_out` non-zero adds the product to `out`.
extern "C" __global__ void lm_gemv_q8(const T* __restrict__ x, const signed char* __restrict__ w,
                                      const float* __restrict__ scale, T* __restrict__ out, int n, int k, int m,
                                      int tile, int acc_out) {
    prefetch_first_row(w, (size_t)k, m);
    pdl_enter();
    switch (tile) {
        case 2: gemv_q8_body<2>(x, w, scale, out, n, k, m, acc_out); break;
        case 4: gemv_q8_body<4>(x, w, scale, out, n, k, m, acc_out); break;
        case 8: gemv_q8_body<8>(x, w, scale, out, n, k, m, acc_out); break;
        default: gemv_q8_body<16>(x, w, scale, out, n, k, m, acc_out); break;
    }
}

// out[j, kk] = T(q[j, kk] * scale[j]) for the [m, k] weight: the int8 rows in the storage type for
// a cuBLAS product (the input is already rotated, so the rotated rows are what is needed). With
// `vec` (k a multiple of 16) each step converts one 16-byte load; m * k < 2^31.
extern "C" __global__ void lm_dequant_q8(const signed char* __restrict__ q, const float* __restrict__ scale,
                                         T* __restrict__ out, int m, int k, int vec) {
    pdl_enter();
    if (vec) {
        const unsigned chunks = (unsigned)m * (unsigned)(k / Q8_VEC);
        GRID_LOOP(c, chunks) {
            const unsigned i = c * Q8_VEC;
            const float s = scale[i / (unsigned)k];
            const uint4 v = q8_ld_stream(q + i);
            float f[Q8_VEC];
            q8_unpack4(v.x, f);
            q8_unpack4(v.y, f + 4);
            q8_unpack4(v.z, f + 8);
            q8_unpack4(v.w, f + 12);
#pragma unroll
            for (int e = 0; e < Q8_VEC; ++e) f[e] *= s;
#pragma unroll
            for (int p = 0; p < Q8_VEC / VEC; ++p) *reinterpret_cast<uint4*>(out + i + p * VEC) = pack(f + p * VEC);
        }
    } else {
        const unsigned char* qb = reinterpret_cast<const unsigned char*>(q);
        GRID_LOOP(i, (unsigned)m * (unsigned)k) st(out + i, (float)((int)qb[i] - 128) * scale[i / (unsigned)k]);
    }
}

// v as f16 bits, rounded to nearest even; finite values past the f16 range saturate to +-65504
// (the largest finite f16), NaN stays NaN.
__device__ __forceinline__ unsigned short q8_f16_sat(float v) {
    v = fabsf(v) > 65504.f ? copysignf(65504.f, v) : v;
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

// Butterfly q (of group / 4) of one radix-4 stage of stride s over the group in `hs`
// (convrot::rotate_block's order), in place.
__device__ __forceinline__ void q8_butterfly4(float* hs, int q, int s) {
    const int i = (q / s) * 4 * s + q % s;
    const float a = hs[i], b = hs[i + s], c = hs[i + 2 * s], d = hs[i + 3 * s];
    const float ab = a + b, cd = c - d, amb = a - b, cpd = c + d;
    hs[i] = ab + cd;
    hs[i + s] = ab - cd;
    hs[i + 2 * s] = amb + cpd;
    hs[i + 3 * s] = cpd - amb;
}

// The radix-4 stages of convrot::rotate_block on `group` = 4^stages floats in shared memory, then
// the 2^-stages scale, stored to out (the caller's block filled hs and passed a barrier): as T, or
// with `half_out` as f16 bits (the input of lm_skinny's int8 products, whose tensor-core f16
// products take it as it is).
__device__ __forceinline__ void q8_rotate_store(float* hs, T* __restrict__ out, int group, int stages,
                                                int half_out) {
    int s = 1;
    for (int stage = 0; stage < stages; ++stage) {
        for (int t = threadIdx.x; t < group / 4; t += blockDim.x) q8_butterfly4(hs, t, s);
        __syncthreads();
        s *= 4;
    }
    const float scale = 1.f / (float)(1 << stages);
    if (half_out) {
        unsigned short* oh = reinterpret_cast<unsigned short*>(out);
        for (int i = threadIdx.x; i < group; i += blockDim.x) oh[i] = q8_f16_sat(hs[i] * scale);
    } else {
        for (int i = threadIdx.x; i < group; i += blockDim.x) st(out + i, hs[i] * scale);
    }
}

// Block b rotates group b % (dim / group) of row b / (dim / group); `group` = 4^stages floats of
// dynamic shared memory. out and x do not alias; `half_out`: out holds f16 bits (q8_rotate_store).
extern "C" __global__ void lm_hadamard(const T* __restrict__ x, T* __restrict__ out, int dim, int group,
                                       int stages, int half_out) {
    pdl_enter();
    extern __shared__ float q8_hs[];
    const int per_row = dim / group;
    const size_t base = (size_t)(blockIdx.x / per_row) * dim + (size_t)(blockIdx.x % per_row) * group;
    for (int i = threadIdx.x; i < group; i += blockDim.x) q8_hs[i] = ld(x + base + i);
    __syncthreads();
    q8_rotate_store(q8_hs, out + base, group, stages, half_out);
}

// RMSNorm and the rotation in one launch (the normed inputs of int8 products): as lm_rms_norm
// into a buffer then lm_hadamard, whose launch and round trip it saves. Every block of a row
// takes the row's sum of squares itself (the row is a few KiB in L2) with VEC-wide loads over
// Q8_NORM_THREADS threads (64 scalar loads a thread measured 25 us against 9 for the two
// kernels), and rounds its normed group to T, as lm_rms_norm's output was, before rotating it.
// dim is a multiple of VEC (the host checks).
#define Q8_NORM_THREADS 256
extern "C" __global__ void __launch_bounds__(Q8_NORM_THREADS)
    lm_norm_hadamard(const T* __restrict__ x, const T* __restrict__ gamma, T* __restrict__ out, int dim, int group,
                     int stages, float eps, int half_out) {
    pdl_enter();
    extern __shared__ float q8_hs[];
    const int per_row = dim / group;
    const size_t row = (size_t)(blockIdx.x / per_row) * dim;
    const int g0 = (blockIdx.x % per_row) * group;
    float ss = 0.f;
    for (int c = threadIdx.x; c < dim / VEC; c += blockDim.x) {
        float v[VEC];
        load_c<VEC>(x + row + (size_t)c * VEC, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) ss += v[e] * v[e];
    }
    const float inv = rsqrtf(lmr_block_sum(ss) / (float)dim + eps);
    for (int i = threadIdx.x; i < group; i += blockDim.x) {
        T normed;
        st(&normed, ld(x + row + g0 + i) * inv * ld(gamma + g0 + i));
        q8_hs[i] = ld(&normed);
    }
    __syncthreads();
    q8_rotate_store(q8_hs, out + row + g0, group, stages, half_out);
}
