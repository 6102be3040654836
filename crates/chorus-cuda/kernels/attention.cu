// Streaming sliding-window attention: one block per (row, head). The block applies rotate-half
// RoPE (Su et al. 2021, "RoFormer", eq. 34, in the HF rotate-half layout) to the step's queries and
// keys, writes k and v into the slot's KV ring, then attends each query over its window with a
// softmax held in shared memory.

#define ATTN_THREADS 128
#define ATTN_MAX_TIME 4
#define ATTN_MAX_HEAD_DIM 128
#define ATTN_MAX_KEYS 512

// Loads 8 consecutive elements as f32 (16-byte aligned).
__device__ __forceinline__ void load8(const T* p, float* f) {
#if CHORUS_BF16
    unpack(*reinterpret_cast<const uint4*>(p), f);
#else
    unpack(reinterpret_cast<const uint4*>(p)[0], f);
    unpack(reinterpret_cast<const uint4*>(p)[1], f + 4);
#endif
}

extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attention(const T* __restrict__ qkv, T* kv,
                                                                       const int* __restrict__ tokens,
                                                                       const int* __restrict__ slots, T* __restrict__ out,
                                                                       AttnDims d) {
    __shared__ float sq[ATTN_MAX_TIME * ATTN_MAX_HEAD_DIM];
    __shared__ float sp[ATTN_MAX_TIME * ATTN_MAX_KEYS];
    int r = blockIdx.x / d.heads;
    int h = blockIdx.x % d.heads;
    int slot = slots[r];
    int p0 = tokens[slot];
    int D = d.head_dim;
    int half_d = D / 2;
    int hd = d.heads * D;
    long long ring_base = (long long)slot * d.ring;

    // RoPE on q and k, write k and v to ring entry p % ring.
    for (int idx = threadIdx.x; idx < d.time * half_d; idx += blockDim.x) {
        int t = idx / half_d;
        int i = idx % half_d;
        int p = p0 + t;
        const T* row = qkv + ((long long)r * d.time + t) * 3 * hd + h * D;
        // angle = p * theta^(-2i/D), reduced in double so that long streams keep their phase.
        double inv_freq = exp(-2.0 * i / D * log((double)d.rope_theta));
        double angle = fmod((double)p * inv_freq, 6.283185307179586);
        float sn, cs;
        sincosf((float)angle, &sn, &cs);
        float q1 = ld(row + i), q2 = ld(row + i + half_d);
        sq[t * D + i] = q1 * cs - q2 * sn;
        sq[t * D + i + half_d] = q2 * cs + q1 * sn;
        float k1 = ld(row + hd + i), k2 = ld(row + hd + i + half_d);
        T* entry = kv + ((ring_base + p % d.ring) * 2) * hd + h * D;
        st(entry + i, k1 * cs - k2 * sn);
        st(entry + i + half_d, k2 * cs + k1 * sn);
        st(entry + hd + i, ld(row + 2 * hd + i));
        st(entry + hd + i + half_d, ld(row + 2 * hd + i + half_d));
    }
    __syncthreads();

    // Keys any query of this step can see: positions [first, p0 + time - 1].
    int last = p0 + d.time - 1;
    int first = p0 - d.window + 1;
    if (first < 0) {
        first = 0;
    }
    int nk = last - first + 1;
    float scale = rsqrtf((float)D);
    for (int k = threadIdx.x; k < nk; k += blockDim.x) {
        int kp = first + k;
        const T* key = kv + ((ring_base + kp % d.ring) * 2) * hd + h * D;
        float acc[ATTN_MAX_TIME];
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) {
            acc[t] = 0.f;
        }
        for (int c = 0; c < D; c += 8) {
            float kf[8];
            load8(key + c, kf);
#pragma unroll
            for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                if (t < d.time) {
#pragma unroll
                    for (int e = 0; e < 8; ++e) {
                        acc[t] += sq[t * D + c + e] * kf[e];
                    }
                }
            }
        }
        for (int t = 0; t < d.time; ++t) {
            int p = p0 + t;
            bool visible = kp <= p && kp > p - d.window;
            sp[t * ATTN_MAX_KEYS + k] = visible ? acc[t] * scale : NEG_INF;
        }
    }
    __syncthreads();

    // Softmax: one warp per query.
    int warp = threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    for (int t = warp; t < d.time; t += blockDim.x / 32) {
        float* s = sp + t * ATTN_MAX_KEYS;
        float m = NEG_INF;
        for (int k = lane; k < nk; k += 32) {
            m = fmaxf(m, s[k]);
        }
        for (int o = 16; o > 0; o >>= 1) {
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        }
        float sum = 0.f;
        for (int k = lane; k < nk; k += 32) {
            float e = expf(s[k] - m);
            s[k] = e;
            sum += e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        }
        float inv = 1.f / sum;
        for (int k = lane; k < nk; k += 32) {
            s[k] *= inv;
        }
    }
    __syncthreads();

    // out[t, c] = sum_k p[t, k] v[k, c]; consecutive threads read consecutive channels.
    for (int idx = threadIdx.x; idx < d.time * D; idx += blockDim.x) {
        int t = idx / D;
        int c = idx % D;
        const float* s = sp + t * ATTN_MAX_KEYS;
        float acc = 0.f;
        for (int k = 0; k < nk; ++k) {
            float pk = s[k];
            if (pk != 0.f) {
                acc += pk * ld(kv + ((ring_base + (first + k) % d.ring) * 2 + 1) * hd + h * D + c);
            }
        }
        st(out + ((long long)r * d.time + t) * hd + h * D + c, acc);
    }
}
