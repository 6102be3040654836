// Causal convolutions with per-slot history. The input of row r is
// xin[r] = concat(state[slots[r]], f(x[r])) along time (f = ELU or identity); the GEMM path gathers
// its im2col matrix, the direct path (few output channels) reads xin in place.

__device__ __forceinline__ const T* conv_src(const T* x, const T* state, const int* slots, const ConvDims& d, int r, int pos,
                                             bool* apply) {
    if (pos < d.history) {
        *apply = false;
        return state + ((long long)slots[r] * d.history + pos) * d.c_in;
    }
    *apply = d.elu != 0;
    return x + ((long long)r * d.time + pos - d.history) * d.c_in;
}

// col[r*time + t, j*c_in + c] = xin[r, t + j*dilation, c]; c_in is a multiple of VEC when `vec` is set.
// One thread per chunk of an input column (history, then x): it reads (and ELUs) the chunk once
// and writes it to every tap that sees it. (A thread per output chunk ELU'd each input `kernel`
// times, with expm1f and three divisions each: 266 us for the decoder's last upsampling at batch
// 1024 on the H200, against about 80 us to read and write its bytes.)
extern "C" __global__ void conv_gather(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                       T* __restrict__ col, ConvDims d, int vec) {
    pdl_enter();
    int chunk = vec ? VEC : 1;
    unsigned chunks = d.c_in / chunk;
    unsigned span = (unsigned)(d.time + d.history);
    unsigned total = (unsigned)d.rows * span * chunks;
    GRID_LOOP(i, total) {
        int c0 = (int)(i % chunks) * chunk;
        unsigned rp = i / chunks;
        int pos = (int)(rp % span);
        int r = (int)(rp / span);
        bool apply;
        const T* src = conv_src(x, state, slots, d, r, pos, &apply) + c0;
        T* row0 = col + (long long)r * d.time * d.kernel * d.c_in + c0;
        if (vec) {
            uint4 v = *reinterpret_cast<const uint4*>(src);
            if (apply) v = elu_vec_stored(v);
            for (int j = 0; j < d.kernel; ++j) {
                int t = pos - j * d.dilation;
                if (t >= 0 && t < d.time) {
                    *reinterpret_cast<uint4*>(row0 + ((long long)t * d.kernel + j) * d.c_in) = v;
                }
            }
        } else {
            float v = ld(src);
            if (apply) v = elu_f(v);
            for (int j = 0; j < d.kernel; ++j) {
                int t = pos - j * d.dilation;
                if (t >= 0 && t < d.time) st(row0 + ((long long)t * d.kernel + j) * d.c_in, v);
            }
        }
    }
}

// state[slots[r], h] = xin[r, time + h] for h in [0, history). One thread walks h upwards for its
// channel, so the reads of later columns happen before they are overwritten.
extern "C" __global__ void conv_state(const T* __restrict__ x, T* state, const int* __restrict__ slots, ConvDims d) {
    pdl_enter();
    GRID_LOOP(i, (unsigned)d.rows * d.c_in) {
        int c = (int)(i % (unsigned)d.c_in);
        int r = (int)(i / (unsigned)d.c_in);
        T* dst = state + (long long)slots[r] * d.history * d.c_in + c;
        for (int h = 0; h < d.history; ++h) {
            bool apply;
            const T* src = conv_src(x, state, slots, d, r, d.time + h, &apply);
            float v = ld(src + c);
            st(dst + (long long)h * d.c_in, apply ? elu_f(v) : v);
        }
    }
}

// Shared-memory floats of the direct convolution's input tile and weights (48 KB together).
#define DIRECT_SMEM_FLOATS 8192
#define DIRECT_MAX_WEIGHTS 4096

// Direct convolution for few output channels:
// out[r, t, o] = bias + residual + sum_{j,c} w[o, j, c] xin[r, t + j*dil, c].
// One block per (row, tile of `tile` times): the weights and the ELU'd input window are staged
// once in shared memory as f32 (window rows padded by one float so that consecutive times hit
// different banks). c_in is a multiple of VEC when `vec` is set.
extern "C" __global__ void conv_direct(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                       const T* __restrict__ w, const T* __restrict__ bias, const T* __restrict__ residual,
                                       T* __restrict__ out, ConvDims d, int tile, int vec) {
    pdl_enter();
    __shared__ float sx[DIRECT_SMEM_FLOATS];
    __shared__ float sw[DIRECT_MAX_WEIGHTS];
    int tiles = (d.time + tile - 1) / tile;
    int r = blockIdx.x / tiles;
    int t0 = (blockIdx.x % tiles) * tile;
    int count = min(tile, d.time - t0);
    int span = count + d.history;
    int pitch = d.c_in + 1;
    int n_w = d.c_out * d.kernel * d.c_in;
    for (int idx = threadIdx.x; idx < n_w; idx += blockDim.x) {
        sw[idx] = ld(w + idx);
    }
    int chunk = vec ? VEC : 1;
    int chunks = d.c_in / chunk;
    for (int idx = threadIdx.x; idx < span * chunks; idx += blockDim.x) {
        int p = idx / chunks;
        int c0 = (idx % chunks) * chunk;
        bool apply;
        const T* src = conv_src(x, state, slots, d, r, t0 + p, &apply) + c0;
        float* dst = sx + p * pitch + c0;
        if (vec) {
            float f[VEC];
            unpack(*reinterpret_cast<const uint4*>(src), f);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                dst[e] = apply ? elu_f(f[e]) : f[e];
            }
        } else {
            float v = ld(src);
            dst[0] = apply ? elu_f(v) : v;
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < count * d.c_out; idx += blockDim.x) {
        int tt = idx / d.c_out;
        int o = idx % d.c_out;
        long long at = ((long long)r * d.time + t0 + tt) * d.c_out + o;
        float acc = bias ? ld(bias + o) : 0.f;
        if (residual) {
            acc += ld(residual + at);
        }
        for (int j = 0; j < d.kernel; ++j) {
            const float* xs = sx + (tt + j * d.dilation) * pitch;
            const float* ws = sw + (o * d.kernel + j) * d.c_in;
            for (int c = 0; c < d.c_in; ++c) {
                acc += ws[c] * xs[c];
            }
        }
        st(out + at, acc);
    }
}

// Tap-split path (narrowing convolutions): xin is materialised once, one batched GEMM computes
// z[j] = xin @ w[:, j, :]^T for every tap j, and a shift-add sums the taps. It moves fewer bytes
// than im2col when c_out < c_in.

// xin[r, u, c] = xin(r, u) for u in [0, time + history); c_in is a multiple of VEC when `vec` is set.
extern "C" __global__ void conv_concat(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                       T* __restrict__ xin, ConvDims d, int vec) {
    pdl_enter();
    int chunk = vec ? VEC : 1;
    unsigned chunks = d.c_in / chunk;
    unsigned span = d.time + d.history;
    GRID_LOOP(i, (unsigned)d.rows * span * chunks) {
        int c0 = (int)(i % chunks) * chunk;
        unsigned rest = i / chunks;
        int u = (int)(rest % span);
        int r = (int)(rest / span);
        bool apply;
        const T* src = conv_src(x, state, slots, d, r, u, &apply) + c0;
        T* dst = xin + ((long long)r * span + u) * d.c_in + c0;
        if (vec) {
            uint4 v = *reinterpret_cast<const uint4*>(src);
            *reinterpret_cast<uint4*>(dst) = apply ? elu_vec_stored(v) : v;
        } else {
            float v = ld(src);
            st(dst, apply ? elu_f(v) : v);
        }
    }
}

template <int C>
__device__ __forceinline__ void shift_add_body(const T* z, const T* bias, const T* residual, T* out, const ConvDims& d) {
    unsigned chunks = d.c_out / C;
    unsigned span = d.time + d.history;
    long long tap_stride = (long long)d.rows * span * d.c_out;
    GRID_LOOP(i, (unsigned)d.rows * d.time * chunks) {
        int o = (int)(i % chunks) * C;
        unsigned rt = i / chunks;
        int t = (int)(rt % (unsigned)d.time);
        int r = (int)(rt / (unsigned)d.time);
        float acc[C], v[C];
#pragma unroll
        for (int e = 0; e < C; ++e) acc[e] = 0.f;
        if (bias) {
            load_c<C>(bias + o, v);
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] += v[e];
        }
        long long at = ((long long)r * d.time + t) * d.c_out + o;
        if (residual) {
            load_c<C>(residual + at, v);
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] += v[e];
        }
        for (int j = 0; j < d.kernel; ++j) {
            load_c<C>(z + j * tap_stride + ((long long)r * span + t + j * d.dilation) * d.c_out + o, v);
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] += v[e];
        }
        if (d.elu_out) {
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] = elu_f(acc[e]);
        }
        store_c<C>(out + at, acc);
    }
}

// out[r, t, o] = bias + residual + sum_j z[j, r*span + t + j*dilation, o]; c_out is a multiple of
// VEC when `vec` is set.
extern "C" __global__ void conv_shift_add(const T* __restrict__ z, const T* __restrict__ bias, const T* __restrict__ residual,
                                          T* __restrict__ out, ConvDims d, int vec) {
    pdl_enter();
    if (vec) {
        shift_add_body<VEC>(z, bias, residual, out, d);
    } else {
        shift_add_body<1>(z, bias, residual, out, d);
    }
}
