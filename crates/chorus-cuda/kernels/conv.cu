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
    int chunks = d.c_in / chunk;
    long long total = (long long)d.rows * d.time * d.kernel * chunks;
    GRID_LOOP(i, total) {
        int cc = (int)(i % chunks);
        long long rest = i / chunks;
        int j = (int)(rest % d.kernel);
        rest /= d.kernel;
        int t = (int)(rest % d.time);
        int r = (int)(rest / d.time);
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
    GRID_LOOP(i, (long long)d.rows * d.c_in) {
        int c = (int)(i % d.c_in);
        int r = (int)(i / d.c_in);
        T* dst = state + (long long)slots[r] * d.history * d.c_in + c;
        for (int h = 0; h < d.history; ++h) {
            bool apply;
            const T* src = conv_src(x, state, slots, d, r, d.time + h, &apply);
            float v = ld(src + c);
            st(dst + (long long)h * d.c_in, apply ? elu_f(v) : v);
        }
    }
}

// Direct convolution for few output channels: out[r, t, o] = bias + residual + sum_{j,c} w[o, j, c] xin[r, t + j*dil, c].
extern "C" __global__ void conv_direct(const T* __restrict__ x, const T* __restrict__ state, const int* __restrict__ slots,
                                       const T* __restrict__ w, const T* __restrict__ bias, const T* __restrict__ residual,
                                       T* __restrict__ out, ConvDims d) {
    GRID_LOOP(i, (long long)d.rows * d.time * d.c_out) {
        int o = (int)(i % d.c_out);
        long long rt = i / d.c_out;
        int t = (int)(rt % d.time);
        int r = (int)(rt / d.time);
        float acc = bias ? ld(bias + o) : 0.f;
        if (residual) {
            acc += ld(residual + i);
        }
        for (int j = 0; j < d.kernel; ++j) {
            bool apply;
            const T* src = conv_src(x, state, slots, d, r, t + j * d.dilation, &apply);
            const T* wr = w + ((long long)o * d.kernel + j) * d.c_in;
            for (int c = 0; c < d.c_in; ++c) {
                float v = ld(src + c);
                acc += ld(wr + c) * (apply ? elu_f(v) : v);
            }
        }
        st(out + i, acc);
    }
}
