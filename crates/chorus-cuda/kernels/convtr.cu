// Streaming transposed convolution, overlap-add stage. With y the full transposed convolution of
// f(x[r]) (time*stride + tail columns, no bias): out[r, s] = y[s] + bias (+ state[slot, s] for
// s < tail), and state[slot, u] = y[time*stride + u]. Dense layers read y's per-input-column
// products from the GEMM result Y[r*time + t, j*c_out + o]; depthwise layers compute them here.

__device__ __forceinline__ float convtr_column(const T* __restrict__ src, const T* __restrict__ w, const ConvTrDims& d, int r,
                                               int q, int o) {
    int t_lo = q - d.kernel + 1;
    t_lo = t_lo <= 0 ? 0 : (t_lo + d.stride - 1) / d.stride;
    int t_hi = q / d.stride;
    if (t_hi > d.time - 1) {
        t_hi = d.time - 1;
    }
    float acc = 0.f;
    for (int t = t_lo; t <= t_hi; ++t) {
        int j = q - t * d.stride;
        long long row = (long long)r * d.time + t;
        if (d.depthwise) {
            float v = ld(src + row * d.c_out + o);
            acc += (d.elu ? elu_f(v) : v) * ld(w + (long long)o * d.kernel + j);
        } else {
            acc += ld(src + (row * d.kernel + j) * d.c_out + o);
        }
    }
    return acc;
}

// One thread per output element; the thread of column s < tail also owns state column s, so the
// read of the old tail and the write of the new one never race.
extern "C" __global__ void convtr_overlap(const T* __restrict__ src, const T* __restrict__ w, const T* __restrict__ bias,
                                          T* state, const int* __restrict__ slots, T* __restrict__ out, ConvTrDims d) {
    int produced = d.time * d.stride;
    GRID_LOOP(i, (long long)d.rows * produced * d.c_out) {
        int o = (int)(i % d.c_out);
        long long rs = i / d.c_out;
        int s = (int)(rs % produced);
        int r = (int)(rs / produced);
        float acc = convtr_column(src, w, d, r, s, o);
        if (bias) {
            acc += ld(bias + o);
        }
        if (s < d.tail) {
            T* cell = state + ((long long)slots[r] * d.tail + s) * d.c_out + o;
            acc += ld(cell);
            st(cell, convtr_column(src, w, d, r, produced + s, o));
        }
        st(out + i, acc);
    }
}
