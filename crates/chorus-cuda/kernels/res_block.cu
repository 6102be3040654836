// SEANet residual block on the tensor cores (moshi modules/seanet.py, SEANetResnetBlock with a
// true skip): out = x + b2 + W2 . ELU(b1 + W1 * xin), xin the slot's history followed by ELU(x).
// The hidden activation never leaves the chip: the first product's m16n8 accumulators are, pair
// by pair, the A fragments of the second product (rows g and g + 8, columns 2q and 2q + 1 in
// both layouts). One kernel reads x once and writes out once, where the two convolutions apart
// write and re-read the hidden activation, its ELU and the output. The tiling and the input
// staging are those of conv_mma.cu, whose `MmaConvDims` describe the first convolution (c_in = C,
// n_out = HID, ELU'd input, one output block); the history update is a separate launch.

#if MMA_ENABLED
// The hidden activation of one warp's 16 times, as the A fragments of the second product:
// h = ELU(acc + b1) rounded to bf16, k-step s holding hidden columns [16 s, 16 s + 16).
template <int HID>
__device__ __forceinline__ void res_hidden_fragments(const float (*acc)[4], const T* __restrict__ b1, unsigned (*ha)[4]) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int s = 0; s < HID / 16; ++s) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            int f = 2 * s + half;
            int n = f * 8 + (lane & 3) * 2;
            float b0 = b1 ? ld(b1 + n) : 0.f;
            float bb = b1 ? ld(b1 + n + 1) : 0.f;
            float v[4] = {acc[f][0] + b0, acc[f][1] + bb, acc[f][2] + b0, acc[f][3] + bb};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                v[e] = v[e] > 0.f ? v[e] : __expf(v[e]) - 1.f;
            }
            ha[s][2 * half] = pack_bf16x2(v[0], v[1]);
            ha[s][2 * half + 1] = pack_bf16x2(v[2], v[3]);
        }
    }
}

// out = acc + b2 + x for one warp's 16 times. The skip (raw x, where the window holds its ELU)
// is read in the accumulator layout (its rows were just copied into the window, so L2 serves
// it) and summed in f32 before the one rounding; the packed results then pass through `stage`
// (the warp's 16 window rows) so that each lane stores whole 16-byte vectors of a row.
template <int C>
__device__ __forceinline__ void res_store(const float (*acc)[4], const float (*b2_r)[2], const T* __restrict__ x,
                                          T* __restrict__ out, T* stage, int r, int t_base, int time) {
    constexpr int NF = C / 8;
    constexpr int PITCH = C + MMA_PAD;
    constexpr int ROW_VECS = C / 8;
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        int t = t_base + g + 8 * h;
        const T* xrow = x + ((long long)r * time + t) * C;
#pragma unroll
        for (int f = 0; f < NF; ++f) {
            int n = f * 8 + 2 * q;
            float v0 = acc[f][2 * h] + b2_r[f][0];
            float v1 = acc[f][2 * h + 1] + b2_r[f][1];
            if (t < time) {
                unsigned u = *reinterpret_cast<const unsigned*>(xrow + n);
                v0 += __uint_as_float(u << 16);
                v1 += __uint_as_float(u & 0xffff0000u);
            }
            *reinterpret_cast<unsigned*>(stage + (g + 8 * h) * PITCH + n) = pack_bf16x2(v0, v1);
        }
    }
    __syncwarp();
#pragma unroll
    for (int i = lane; i < 16 * ROW_VECS; i += 32) {
        int row = i / ROW_VECS;
        int col = (i % ROW_VECS) * 8;
        if (t_base + row < time) {
            *reinterpret_cast<uint4*>(out + ((long long)r * time + t_base + row) * C + col) =
                *reinterpret_cast<const uint4*>(stage + row * PITCH + col);
        }
    }
}

template <int C, int HID>
__device__ __forceinline__ void res_block_body(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                               const T* __restrict__ w1, const T* __restrict__ b1,
                                               const T* __restrict__ w2, const T* __restrict__ b2,
                                               T* __restrict__ out, const MmaConvDims& d) {
    extern __shared__ __align__(128) unsigned char mma_smem[];
    constexpr int NF1 = HID / 8;
    constexpr int NF2 = C / 8;
    constexpr int W2PITCH = HID + MMA_PAD;
    constexpr int XPITCH = C + MMA_PAD;
    // The second convolution as conv_mma.cu's staging and epilogue see it.
    MmaConvDims d2 = d;
    d2.c_in = HID;
    d2.n_out = C;
    d2.taps = 1;
    d2.history = 0;
    d2.w_sn = HID;
    int w1pitch = d.taps * C + MMA_PAD;
    int window = (MMA_BM + d.history) * XPITCH;
    T* sw1 = reinterpret_cast<T*>(mma_smem);
    T* sw2 = sw1 + HID * w1pitch;
    T* sx0 = sw2 + C * W2PITCH;  // two windows: sx0 and sx0 + window
    int warp = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    int m0 = warp * 16;
    int total_tiles = d.rows * d.tiles;
    int tix = blockIdx.x;
    if (tix < total_tiles) {
        mma_issue_input(x, state, slots, sx0, XPITCH, tix / d.tiles, (tix % d.tiles) * MMA_BM, d);
    }
    mma_stage_weights(w1, sw1, w1pitch, HID, 0, d);
    mma_stage_weights(w2, sw2, W2PITCH, C, 0, d2);
    float b2_r[NF2][2];
#pragma unroll
    for (int f = 0; f < NF2; ++f) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            b2_r[f][e] = b2 ? ld(b2 + f * 8 + (lane & 3) * 2 + e) : 0.f;
        }
    }
    for (int buf = 0; tix < total_tiles; tix += gridDim.x, buf ^= 1) {
        int r = tix / d.tiles;
        int t0 = (tix % d.tiles) * MMA_BM;
        T* sx = sx0 + buf * window;
        mma_finish_input(sx, XPITCH, t0, d);
        // The window (and on the first tile the weights) is complete, and every warp is done with
        // the other buffer, which the next tile's copies now overwrite.
        __syncthreads();
        int next = tix + gridDim.x;
        if (next < total_tiles) {
            mma_issue_input(x, state, slots, sx0 + (buf ^ 1) * window, XPITCH, next / d.tiles, (next % d.tiles) * MMA_BM, d);
        }
        // A warp whose 16 times are all past the row's end computes nothing but still meets the
        // barrier below.
        bool live = t0 + m0 < d.time;
        float acc2[NF2][4];
#pragma unroll
        for (int f = 0; f < NF2; ++f) {
            acc2[f][0] = acc2[f][1] = acc2[f][2] = acc2[f][3] = 0.f;
        }
        if (live) {
            float acc1[NF1][4];
#pragma unroll
            for (int f = 0; f < NF1; ++f) {
                acc1[f][0] = acc1[f][1] = acc1[f][2] = acc1[f][3] = 0.f;
            }
            for (int j = 0; j < d.taps; ++j) {
                const T* arow = sx + (m0 + j * d.dilation + (lane & 15)) * XPITCH + (lane >> 4) * 8;
                const T* brow = sw1 + (lane & 7) * w1pitch + j * C;
#pragma unroll
                for (int c0 = 0; c0 < C; c0 += 16) {
                    unsigned a[4];
                    ldmatrix_x4(a, arow + c0);
#pragma unroll
                    for (int f = 0; f < NF1; f += 2) {
                        unsigned b[4];
                        ldmatrix_x4(b, brow + (f * 8 + (lane >> 4) * 8) * w1pitch + c0 + ((lane >> 3) & 1) * 8);
                        mma_bf16(acc1[f], a, b[0], b[1]);
                        mma_bf16(acc1[f + 1], a, b[2], b[3]);
                    }
                }
            }
            unsigned ha[HID / 16][4];
            res_hidden_fragments<HID>(acc1, b1, ha);
            const T* brow2 = sw2 + (lane & 7) * W2PITCH;
#pragma unroll
            for (int s = 0; s < HID / 16; ++s) {
#pragma unroll
                for (int f = 0; f < NF2; f += 2) {
                    unsigned b[4];
                    ldmatrix_x4(b, brow2 + (f * 8 + (lane >> 4) * 8) * W2PITCH + s * 16 + ((lane >> 3) & 1) * 8);
                    mma_bf16(acc2[f], ha[s], b[0], b[1]);
                    mma_bf16(acc2[f + 1], ha[s], b[2], b[3]);
                }
            }
        }
        // Every warp is done reading the window: its first 64 rows now stage the outputs.
        __syncthreads();
        if (live) {
            res_store<C>(acc2, b2_r, x, out, sx + m0 * XPITCH, r, t0 + m0, d.time);
        }
    }
}
#endif

// One entry per (channels, hidden channels) of Mimi's last two stages (the earlier stages' weights
// do not fit in shared memory; they run as two convolutions).
// Five blocks per SM of the c64 kernel (37 KB of shared memory each; six would spill registers).
#define RES_BLOCK_C64_MIN_BLOCKS 5

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32, RES_BLOCK_C64_MIN_BLOCKS) res_block_c64(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                                                     const T* __restrict__ w1, const T* __restrict__ b1,
                                                                     const T* __restrict__ w2, const T* __restrict__ b2,
                                                                     T* __restrict__ out, MmaConvDims d) {
    pdl_enter();
#if MMA_ENABLED
    res_block_body<64, 32>(x, state, slots, w1, b1, w2, b2, out, d);
#endif
}

extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32) res_block_c128(const T* __restrict__ x, const T* state, const int* __restrict__ slots,
                                                                      const T* __restrict__ w1, const T* __restrict__ b1,
                                                                      const T* __restrict__ w2, const T* __restrict__ b2,
                                                                      T* __restrict__ out, MmaConvDims d) {
    pdl_enter();
#if MMA_ENABLED
    res_block_body<128, 64>(x, state, slots, w1, b1, w2, b2, out, d);
#endif
}
