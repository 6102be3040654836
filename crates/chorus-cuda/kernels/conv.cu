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
extern "C" __global__ void conv_gather(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                       T* __restrict__ col, ConvDims d, int vec) {
    int chunk = vec ? VEC : 1;
    unsigned chunks = d.c_in / chunk;
    unsigned total = (unsigned)d.rows * d.time * d.kernel * chunks;
    GRID_LOOP(i, total) {
        int cc = (int)(i % chunks);
        unsigned rest = i / chunks;
        int j = (int)(rest % (unsigned)d.kernel);
        rest /= (unsigned)d.kernel;
        int t = (int)(rest % (unsigned)d.time);
        int r = (int)(rest / (unsigned)d.time);
        bool apply;
        const T* src = conv_src(x, state, slots, d, r, t + j * d.dilation, &apply);
        T* dst = col + (((long long)r * d.time + t) * d.kernel + j) * d.c_in;
        int c0 = cc * chunk;
        if (vec) {
            uint4 v = *reinterpret_cast<const uint4*>(src + c0);
            *reinterpret_cast<uint4*>(dst + c0) = apply ? elu_vec(v) : v;
        } else {
            float v = ld(src + c0);
            st(dst + c0, apply ? elu_f(v) : v);
        }
    }
}

// state[slots[r], h] = xin[r, time + h] for h in [0, history). One thread walks h upwards for its
// channel, so the reads of later columns happen before they are overwritten.
extern "C" __global__ void conv_state(const T* __restrict__ x, T* state, const int* __restrict__ slots, ConvDims d) {
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

// Shared-memory floats of the direct convolution's input tile (48 KB, the static limit).
#define DIRECT_SMEM_FLOATS 12288

// Direct convolution for few output channels:
// out[r, t, o] = bias + residual + sum_{j,c} w[o, j, c] xin[r, t + j*dil, c].
// One block per (row, tile of `tile` times): the ELU'd input window is staged once in shared
// memory (rows padded by one float so that consecutive times hit different banks).
extern "C" __global__ void conv_direct(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                       const T* __restrict__ w, const T* __restrict__ bias, const T* __restrict__ residual,
                                       T* __restrict__ out, ConvDims d, int tile) {
    __shared__ float sx[DIRECT_SMEM_FLOATS];
    int tiles = (d.time + tile - 1) / tile;
    int r = blockIdx.x / tiles;
    int t0 = (blockIdx.x % tiles) * tile;
    int count = min(tile, d.time - t0);
    int span = count + d.history;
    int pitch = d.c_in + 1;
    for (int idx = threadIdx.x; idx < span * d.c_in; idx += blockDim.x) {
        int p = idx / d.c_in;
        int c = idx % d.c_in;
        bool apply;
        const T* src = conv_src(x, state, slots, d, r, t0 + p, &apply);
        float v = ld(src + c);
        sx[p * pitch + c] = apply ? elu_f(v) : v;
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
            const T* wr = w + ((long long)o * d.kernel + j) * d.c_in;
            for (int c = 0; c < d.c_in; ++c) {
                acc += ld(wr + c) * xs[c];
            }
        }
        st(out + at, acc);
    }
}
