// Streaming transposed convolution, overlap-add stage. With y the full transposed convolution of
// f(x[r]) (time*stride + tail columns, no bias): out[r, s] = y[s] + bias (+ state[slot, s] for
// s < tail), and state[slot, u] = y[time*stride + u]. Dense layers read y's per-input-column
// products from the GEMM result Y[r*time + t, j*c_out + o]; depthwise layers compute them here.

// Adds output column q, channels [o, o + C), of row r into acc.
template <int C>
__device__ __forceinline__ void convtr_column(const T* __restrict__ src, const T* __restrict__ w, const ConvTrDims& d, int r,
                                              int q, int o, float* acc) {
    int t_lo = q - d.kernel + 1;
    t_lo = t_lo <= 0 ? 0 : (t_lo + d.stride - 1) / d.stride;
    int t_hi = q / d.stride;
    if (t_hi > d.time - 1) {
        t_hi = d.time - 1;
    }
    for (int t = t_lo; t <= t_hi; ++t) {
        int j = q - t * d.stride;
        long long row = (long long)r * d.time + t;
        float v[C];
        if (d.depthwise) {
            load_c<C>(src + row * d.c_out + o, v);
#pragma unroll
            for (int e = 0; e < C; ++e) {
                acc[e] += (d.elu ? elu_f(v[e]) : v[e]) * ld(w + (long long)(o + e) * d.kernel + j);
            }
        } else {
            load_c<C>(src + (row * d.kernel + j) * d.c_out + o, v);
#pragma unroll
            for (int e = 0; e < C; ++e) {
                acc[e] += v[e];
            }
        }
    }
}

// One thread per C output channels of one column; the thread of column s < tail also owns state
// column s, so the read of the old tail and the write of the new one never race.
template <int C>
__device__ __forceinline__ void convtr_body(const T* src, const T* w, const T* bias, T* state, const int* slots, T* out,
                                            const ConvTrDims& d) {
    unsigned produced = d.time * d.stride;
    unsigned chunks = d.c_out / C;
    GRID_LOOP(i, (unsigned)d.rows * produced * chunks) {
        int o = (int)(i % chunks) * C;
        unsigned rs = i / chunks;
        int s = (int)(rs % produced);
        int r = (int)(rs / produced);
        float acc[C], b[C];
#pragma unroll
        for (int e = 0; e < C; ++e) acc[e] = 0.f;
        convtr_column<C>(src, w, d, r, s, o, acc);
        if (bias) {
            load_c<C>(bias + o, b);
#pragma unroll
            for (int e = 0; e < C; ++e) acc[e] += b[e];
        }
        if (s < d.tail) {
            T* cell = state + ((long long)slots[r] * d.tail + s) * d.c_out + o;
            load_c<C>(cell, b);
#pragma unroll
            for (int e = 0; e < C; ++e) {
                acc[e] += b[e];
                b[e] = 0.f;
            }
            convtr_column<C>(src, w, d, r, (int)produced + s, o, b);
            store_c<C>(cell, b);
        }
        store_c<C>(out + ((long long)r * produced + s) * d.c_out + o, acc);
    }
}

// c_out is a multiple of VEC when `vec` is set.
extern "C" __global__ void convtr_overlap(const T* __restrict__ src, const T* __restrict__ w, const T* __restrict__ bias,
                                          T* state, const int* __restrict__ slots, T* __restrict__ out, ConvTrDims d, int vec) {
    pdl_enter();
    if (vec) {
        convtr_body<VEC>(src, w, bias, state, slots, out, d);
    } else {
        convtr_body<1>(src, w, bias, state, slots, out, d);
    }
}
