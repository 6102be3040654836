// Element-wise kernels: casts, activations, residual updates, token counters, code embedding.

extern "C" __global__ void cast_f32_to_t(const float* __restrict__ src, T* __restrict__ dst, long long n) {
    pdl_enter();
    GRID_LOOP(i, n) { st(dst + i, src[i]); }
}

extern "C" __global__ void cast_t_to_f32(const T* __restrict__ src, float* __restrict__ dst, long long n) {
    pdl_enter();
    GRID_LOOP(i, n) { dst[i] = ld(src + i); }
}

// Exact GELU, x * Phi(x).
__device__ __forceinline__ float gelu_f(float v) { return 0.5f * v * (1.f + erff(v * 0.70710678118654752f)); }

// Exact GELU in place.
extern "C" __global__ void gelu(T* x, long long n) {
    pdl_enter();
    GRID_LOOP(i, n) { st(x + i, gelu_f(ld(x + i))); }
}

// ELU (alpha 1) of `n` elements; n is a multiple of VEC when `vec` is set.
extern "C" __global__ void elu(const T* __restrict__ x, T* __restrict__ out, long long n, int vec) {
    pdl_enter();
    if (vec) {
        GRID_LOOP(i, n / VEC) {
            reinterpret_cast<uint4*>(out)[i] = elu_vec_stored(reinterpret_cast<const uint4*>(x)[i]);
        }
    } else {
        GRID_LOOP(i, n) { st(out + i, elu_f(ld(x + i))); }
    }
}

// out[i, o] += bias[o] + residual[i, o] (either may be null), C channels per thread.
template <int C>
__device__ __forceinline__ void bias_residual_body(T* out, const T* bias, const T* residual, long long n, int c_out) {
    int chunks = c_out / C;
    GRID_LOOP(i, n * chunks) {
        int o = (int)(i % (unsigned)chunks) * C;
        long long at = (long long)(i / (unsigned)chunks) * c_out + o;
        float v[C], b[C];
        load_c<C>(out + at, v);
        if (bias) {
            load_c<C>(bias + o, b);
#pragma unroll
            for (int e = 0; e < C; ++e) v[e] += b[e];
        }
        if (residual) {
            load_c<C>(residual + at, b);
#pragma unroll
            for (int e = 0; e < C; ++e) v[e] += b[e];
        }
        store_c<C>(out + at, v);
    }
}

// c_out is a multiple of VEC when `vec` is set.
extern "C" __global__ void bias_residual(T* out, const T* __restrict__ bias, const T* __restrict__ residual, long long n, int c_out,
                                         int vec) {
    pdl_enter();
    if (vec) {
        bias_residual_body<VEC>(out, bias, residual, n, c_out);
    } else {
        bias_residual_body<1>(out, bias, residual, n, c_out);
    }
}

// tokens[slots[r]] += count for each row, then tokens[dummy] = 0. One block.
extern "C" __global__ void advance_tokens(int* tokens, const int* __restrict__ slots, int rows, int count, int dummy) {
    pdl_enter();
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        atomicAdd(tokens + slots[r], count);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        tokens[dummy] = 0;
    }
}

// Rows list[i] (i < count, NO_ROW = -1 entries skipped) of buf [total_rows, row_len] become `src`
// (a [row_len] row) or zeros: the state of every slot a step admits, in one launch. The grid is
// `along` blocks along a row times gridDim.x / along blocks striding over the list.
extern "C" __global__ void reset_rows(T* buf, const T* __restrict__ src, const int* __restrict__ list, int count,
                                      long long row_len, int total_rows, int along) {
    pdl_enter();
    const int over = gridDim.x / along;
    const long long first = (long long)(blockIdx.x % along) * blockDim.x + threadIdx.x;
    const long long stride = (long long)along * blockDim.x;
    for (int i = blockIdx.x / along; i < count; i += over) {
        const int r = list[i];
        if (r < 0 || r >= total_rows) continue;
        T* row = buf + (long long)r * row_len;
        for (long long e = first; e < row_len; e += stride) st(row + e, src ? ld(src + e) : 0.f);
    }
}

// ints[list[i]] = value for i < count (NO_ROW entries skipped).
extern "C" __global__ void reset_ints(int* ints, const int* __restrict__ list, int count, int value, int total) {
    pdl_enter();
    GRID_LOOP(i, count) {
        const int r = list[i];
        if (r >= 0 && r < total) ints[r] = value;
    }
}

// out[r, d] = latents[r, d] + sum_q table[q, codes[r, q], d] over the codes that are present.
extern "C" __global__ void embed_codes(const int* __restrict__ codes, const T* __restrict__ table, const T* __restrict__ latents,
                                       T* __restrict__ out, int rows, int codebooks, int cardinality, int dim) {
    pdl_enter();
    GRID_LOOP(i, (long long)rows * dim) {
        int r = (int)(i / (unsigned)dim);
        int d = (int)(i % (unsigned)dim);
        float acc = ld(latents + i);
        for (int q = 0; q < codebooks; ++q) {
            int code = codes[r * codebooks + q];
            if (code >= 0 && code < cardinality) {
                acc += ld(table + ((long long)q * cardinality + code) * dim + d);
            }
        }
        st(out + i, acc);
    }
}

// LayerNorm over the last axis: one warp per row, two passes in f32.
extern "C" __global__ void layer_norm(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                                      T* __restrict__ out, int n, int dim, float eps) {
    pdl_enter();
    int warps = blockDim.x / 32;
    int row = blockIdx.x * warps + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n) {
        return;
    }
    const T* xr = x + (long long)row * dim;
    float sum = 0.f;
    for (int c = lane; c < dim; c += 32) {
        sum += ld(xr + c);
    }
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    float mean = sum / dim;
    float var = 0.f;
    for (int c = lane; c < dim; c += 32) {
        float d = ld(xr + c) - mean;
        var += d * d;
    }
    for (int o = 16; o > 0; o >>= 1) {
        var += __shfl_xor_sync(0xffffffffu, var, o);
    }
    float rstd = rsqrtf(var / dim + eps);
    T* orow = out + (long long)row * dim;
    for (int c = lane; c < dim; c += 32) {
        st(orow + c, (ld(xr + c) - mean) * rstd * ld(gamma + c) + ld(beta + c));
    }
}
