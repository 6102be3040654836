// Streaming sliding-window attention: one block per (row, head). The block applies rotate-half
// RoPE (Su et al. 2021, "RoFormer", eq. 34, in the HF rotate-half layout) to the step's queries and
// keys, writes k and v into the slot's KV ring, then attends each query over its window with a
// softmax held in shared memory.

#define ATTN_THREADS 256
#define ATTN_MAX_TIME 4
#define ATTN_MAX_HEAD_DIM 128
#define ATTN_MAX_KEYS 512

extern "C" __global__ void __launch_bounds__(ATTN_THREADS) attention(const T* __restrict__ qkv, T* kv,
                                                                       const int* __restrict__ tokens,
                                                                       const int* __restrict__ slots, T* __restrict__ out,
                                                                       AttnDims d) {
    __shared__ float sq[ATTN_MAX_TIME * ATTN_MAX_HEAD_DIM];
    __shared__ float sp[ATTN_MAX_TIME * ATTN_MAX_KEYS];
    // Per key-group partial outputs: groups * ATTN_MAX_TIME * head_dim <= ATTN_THREADS * VEC * ATTN_MAX_TIME.
    __shared__ float spart[ATTN_THREADS * VEC * ATTN_MAX_TIME];
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
    // Scores: `chunks` consecutive lanes share one key, each loading one 16-byte chunk of it (so a
    // key row is read as one contiguous segment), then reduce their partial dot products.
    int chunks = D / VEC;
    int groups = blockDim.x / chunks;
    int g = threadIdx.x / chunks;
    int c0 = (threadIdx.x % chunks) * VEC;
#pragma unroll 2
    for (int k0 = 0; k0 < nk; k0 += groups) {
        int k = k0 + g;
        int kp = first + (k < nk ? k : nk - 1);
        float kf[VEC];
        unpack(*reinterpret_cast<const uint4*>(kv + ((ring_base + kp % d.ring) * 2) * hd + h * D + c0), kf);
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) {
            if (t < d.time) {
                float acc = 0.f;
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    acc += sq[t * D + c0 + e] * kf[e];
                }
                for (int o = chunks / 2; o > 0; o >>= 1) {
                    acc += __shfl_xor_sync(0xffffffffu, acc, o);
                }
                int p = p0 + t;
                if (c0 == 0 && k < nk) {
                    bool visible = kp <= p && kp > p - d.window;
                    sp[t * ATTN_MAX_KEYS + k] = visible ? acc * scale : NEG_INF;
                }
            }
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

    // out[t, c] = sum_k p[t, k] v[k, c]. Each thread owns one 16-byte chunk of channels for the
    // keys of its group (k = g, g + groups, ...), so every load is a 16-byte vector and many are
    // in flight; the groups' partial sums are then reduced through shared memory.
    float acc[ATTN_MAX_TIME][VEC];
#pragma unroll
    for (int t = 0; t < ATTN_MAX_TIME; ++t) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            acc[t][e] = 0.f;
        }
    }
    if (g < groups) {
        for (int k = g; k < nk; k += groups) {
            float v[VEC];
            unpack(*reinterpret_cast<const uint4*>(kv + ((ring_base + (first + k) % d.ring) * 2 + 1) * hd + h * D + c0), v);
#pragma unroll
            for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                if (t < d.time) {
                    float pk = sp[t * ATTN_MAX_KEYS + k];
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        acc[t][e] += pk * v[e];
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) {
            if (t < d.time) {
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    spart[(g * ATTN_MAX_TIME + t) * D + c0 + e] = acc[t][e];
                }
            }
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < d.time * D; idx += blockDim.x) {
        int t = idx / D;
        int c = idx % D;
        float sum = 0.f;
        for (int gg = 0; gg < groups; ++gg) {
            sum += spart[(gg * ATTN_MAX_TIME + t) * D + c];
        }
        st(out + ((long long)r * d.time + t) * hd + h * D + c, sum);
    }
}
