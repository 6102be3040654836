// Streaming sliding-window attention: one block per (row, head, tile of 4 queries). The block
// applies rotate-half RoPE (Su et al. 2021, "RoFormer", eq. 34, in the HF rotate-half layout) to
// the step's queries and keys, writes k and v into the slot's KV ring, then attends each query of
// its tile over its window with a softmax held in shared memory. Key and value rows are read by
// groups of `chunks` lanes, one 16-byte vector each, so that every row is one contiguous segment.

// The host picks the block width (a multiple of 32, at most ATTN_MAX_THREADS): each block's work is
// a chain of dependent latencies (slot, position, keys, values), so large batches run narrow
// blocks (many resident blocks) and small batches wide ones (more lanes per key window).
#define ATTN_MAX_THREADS 256
#define ATTN_MAX_TIME 4
// Keys each lane group loads before using any of them (loads in flight per thread).
#define ATTN_UNROLL 4

// Address of ring entry `pos` (k: which = 0, v: which = 1), head h, channel c0.
__device__ __forceinline__ const uint4* kv_vec(const T* kv, long long ring_base, int pos, int which, const AttnDims& d, int h,
                                               int c0) {
    int hd = d.heads * d.head_dim;
    return reinterpret_cast<const uint4*>(kv + ((ring_base + pos % d.ring) * 2 + which) * hd + h * d.head_dim + c0);
}

extern "C" __global__ void __launch_bounds__(ATTN_MAX_THREADS) attention(const T* __restrict__ qkv, T* kv,
                                                                       const int* __restrict__ tokens,
                                                                       const int* __restrict__ slots, T* __restrict__ out,
                                                                       AttnDims d) {
    pdl_enter();
    // Dynamic shared memory, sized by the host: queries [time, D], then for one tile of at most
    // ATTN_MAX_TIME queries their probabilities [tile, kmax] and per-warp partial outputs
    // [warps, tile, D]. A step of many tokens (several frames) runs its queries tile by tile.
    extern __shared__ float smem[];
    int kmax = d.window + ATTN_MAX_TIME - 1;
    float* sq = smem;
    float* sp = sq + d.time * d.head_dim;
    float* spart = sp + ATTN_MAX_TIME * kmax;
    // Blocks are (row, head, tile): a step of many tokens spreads its query tiles over blocks.
    // Every block of a (row, head) writes the step's keys and values (the same bits), so each
    // reads only its own writes.
    int tiles = (d.time + ATTN_MAX_TIME - 1) / ATTN_MAX_TIME;
    int tile = blockIdx.x % tiles;
    int r = blockIdx.x / tiles / d.heads;
    int h = blockIdx.x / tiles % d.heads;
    int slot = slots[r];
    int p0 = tokens[slot];
    int D = d.head_dim;
    int half_d = D / 2;
    int hd = d.heads * D;
    long long ring_base = (long long)slot * d.ring;

    // RoPE on q and k, write k and v to ring entry p % ring.
    float log2_theta = log2f(d.rope_theta);
    for (int idx = threadIdx.x; idx < d.time * half_d; idx += blockDim.x) {
        int t = idx / half_d;
        int i = idx % half_d;
        int p = p0 + t;
        const T* row = qkv + ((long long)r * d.time + t) * 3 * hd + h * D;
        // inv_freq = theta^(-2i/D) as in f32 references; the angle is reduced modulo 2*pi in
        // double so that long streams keep their phase.
        float inv_freq = exp2f(-(float)(2 * i) / (float)D * log2_theta);
        double turns = (double)p * (double)inv_freq * 0.15915494309189535;
        float angle = (float)((turns - floor(turns)) * 6.283185307179586);
        float sn, cs;
        sincosf(angle, &sn, &cs);
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

    float scale = rsqrtf((float)D);
    int chunks = D / VEC;  // a power of two dividing 32 (checked by the host)
    int groups = blockDim.x / chunks;
    int g = threadIdx.x / chunks;
    int c0 = (threadIdx.x % chunks) * VEC;
    int warp = threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    int warps = blockDim.x / 32;
    for (int t0 = tile * ATTN_MAX_TIME; t0 < d.time; t0 += tiles * ATTN_MAX_TIME) {
        // Keys any query of this tile can see: positions [first, p0 + t0 + nt - 1].
        int nt = min(ATTN_MAX_TIME, d.time - t0);
        int last = p0 + t0 + nt - 1;
        int first = max(p0 + t0 - d.window + 1, 0);
        int nk = last - first + 1;

        // Scores: each lane group takes keys g, g + groups, ...; partial dot products are reduced
        // across the group's lanes with shuffles. Every lane runs every iteration (shuffles need the
        // whole warp); lanes past the last key reload it and write nothing.
        for (int k0 = 0; k0 < nk; k0 += groups * ATTN_UNROLL) {
            uint4 raw[ATTN_UNROLL];
#pragma unroll
            for (int u = 0; u < ATTN_UNROLL; ++u) {
                int k = min(k0 + u * groups + g, nk - 1);
                raw[u] = *kv_vec(kv, ring_base, first + k, 0, d, h, c0);
            }
#pragma unroll
            for (int u = 0; u < ATTN_UNROLL; ++u) {
                int k = k0 + u * groups + g;
                int kp = first + min(k, nk - 1);
                float kf[VEC];
                unpack(raw[u], kf);
#pragma unroll
                for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                    if (t < nt) {
                        float acc = 0.f;
#pragma unroll
                        for (int e = 0; e < VEC; ++e) {
                            acc += sq[(t0 + t) * D + c0 + e] * kf[e];
                        }
                        for (int o = chunks / 2; o > 0; o >>= 1) {
                            acc += __shfl_xor_sync(0xffffffffu, acc, o);
                        }
                        int p = p0 + t0 + t;
                        if (c0 == 0 && k < nk) {
                            bool visible = kp <= p && kp > p - d.window;
                            sp[t * kmax + k] = visible ? acc * scale : NEG_INF;
                        }
                    }
                }
            }
        }
        __syncthreads();

        // Softmax: one warp per query.
        for (int t = warp; t < nt; t += warps) {
            float* s = sp + t * kmax;
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

        // out[t, c] = sum_k p[t, k] v[k, c]: each lane accumulates its chunk over its group's keys,
        // the groups of a warp are summed with shuffles, then the warps through shared memory.
        float acc[ATTN_MAX_TIME][VEC];
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                acc[t][e] = 0.f;
            }
        }
        for (int k0 = 0; k0 < nk; k0 += groups * ATTN_UNROLL) {
            uint4 raw[ATTN_UNROLL];
#pragma unroll
            for (int u = 0; u < ATTN_UNROLL; ++u) {
                int k = min(k0 + u * groups + g, nk - 1);
                raw[u] = *kv_vec(kv, ring_base, first + k, 1, d, h, c0);
            }
#pragma unroll
            for (int u = 0; u < ATTN_UNROLL; ++u) {
                int k = k0 + u * groups + g;
                if (k < nk) {
                    float v[VEC];
                    unpack(raw[u], v);
#pragma unroll
                    for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                        if (t < nt) {
                            float pk = sp[t * kmax + k];
#pragma unroll
                            for (int e = 0; e < VEC; ++e) {
                                acc[t][e] += pk * v[e];
                            }
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < ATTN_MAX_TIME; ++t) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                for (int o = chunks; o < 32; o <<= 1) {
                    acc[t][e] += __shfl_xor_sync(0xffffffffu, acc[t][e], o);
                }
            }
        }
        if (lane < chunks) {
#pragma unroll
            for (int t = 0; t < ATTN_MAX_TIME; ++t) {
                if (t < nt) {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        spart[(warp * ATTN_MAX_TIME + t) * D + c0 + e] = acc[t][e];
                    }
                }
            }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < nt * D; idx += blockDim.x) {
            int t = idx / D;
            int c = idx % D;
            float sum = 0.f;
            for (int w = 0; w < warps; ++w) {
                sum += spart[(w * ATTN_MAX_TIME + t) * D + c];
            }
            st(out + ((long long)r * d.time + t0 + t) * hd + h * D + c, sum);
        }
        // The next tile reuses the probabilities and partial outputs.
        __syncthreads();
    }
}
