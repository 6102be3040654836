// Optional classifier-free guidance, tie-inclusive top-k and the draw (CfgDrawArgs): one block per
// song.
//
// Each k-th largest value (torch.topk(x, k).values[-1]: duplicates counted, NaN above everything)
// is found exactly on an order-preserving 32-bit key: the largest key t with count(key >= t) >= k,
// built one bit at a time from the top (32 block-wide counts: a compare per element, a warp
// reduction and one barrier each). The elements live in registers (E per thread) for the LM's and
// the depth levels' vocabularies; larger ones are recomputed from the logits in every count. The
// winner is the largest score, lowest index on ties, by a block reduction in f64. Every step is the
// CPU backend's, operation for operation (no contraction into FMAs), so both pick the same code.

// Mirrors the host struct `DrawDims` (src/lm/draw.rs).
struct DrawDims {
    int songs, vocab, codes_stride, col;
    unsigned draw_offset;
    float cfg_scale;
    int cfg;            // 0: one logits row per song, no guidance
    float temperature;  // divides noise-mode values
    int cond_top_k;  // 0: no conditional prefilter (also for k >= vocab: it would mask nothing)
    int top_k;       // 0: every element a candidate (k >= vocab)
    int end;  // -1: no END column
    int per_thread;  // elements per thread in registers; 0: none (see lm_cfg_draw)
};

#define DRAW_MAX_THREADS 1024

// Order-preserving key: a > b (NaN above everything, all NaNs equal) iff key(a) > key(b). -0 and +0
// get adjacent keys, so the k-th key always decodes to a value equal to torch's k-th value.
__device__ __forceinline__ unsigned draw_key(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float draw_unkey(unsigned k) {
    if (k == 0xffffffffu) {
        return __uint_as_float(0x7fc00000u);
    }
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// splitmix64's output function and chorus_core::rng::exp_noise, bit for bit.
__device__ __forceinline__ unsigned long long draw_mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ float draw_exp_noise(unsigned long long seed, unsigned long long draw, unsigned long long index) {
    unsigned long long z = seed * 0x9e3779b97f4a7c15ull + draw * 0xd1b54a32d192ed03ull + index * 0x94d049bb133111ebull;
    double u = __dmul_rn(__dadd_rn((double)(draw_mix64(z) >> 11), 0.5), 0x1p-53);
    return __double2float_rn(-log(u));
}

// nan_to_num(g, nan = -1e9, posinf = 1e9, neginf = -1e9).
__device__ __forceinline__ float draw_nan_to_num(float g) {
    if (g != g || g == NEG_INF) {
        return -1e9f;
    }
    if (g == -NEG_INF) {
        return 1e9f;
    }
    return g;
}

// Visits a thread's elements i = e * blockDim.x + threadIdx.x in ascending order: E of them held in
// registers (e a compile-time index), or with E == 0 as many as the vocabulary needs. `body` sees
// `e`, `i` and `in` (i < n); every lane of the block runs every iteration.
#define DRAW_FOR_EACH(...)                                                      \
    if constexpr (E > 0) {                                                       \
        _Pragma("unroll") for (int e = 0; e < E; ++e) {                          \
            int i = e * (int)blockDim.x + (int)threadIdx.x;                      \
            bool in = i < n;                                                     \
            __VA_ARGS__                                                          \
        }                                                                        \
    } else {                                                                     \
        for (int e = 0; e * (int)blockDim.x < n; ++e) {                          \
            int i = e * (int)blockDim.x + (int)threadIdx.x;                      \
            bool in = i < n;                                                     \
            __VA_ARGS__                                                          \
        }                                                                        \
    }

// Block-wide k-th largest key (1 <= k <= n) of key_of(e, i) over the block's elements (keys
// >= 1; elements past n count as none). `tot` is [2][32] shared words, blockDim.x a multiple of 32
// and at most 1024. Every thread returns the key.
template <int E, typename KeyOf>
__device__ unsigned draw_select(KeyOf key_of, int n, int k, unsigned* tot) {
    int lane = threadIdx.x % 32;
    int warp = threadIdx.x / 32;
    int warps = blockDim.x / 32;
    unsigned prefix = 0;
    for (int bit = 31; bit >= 0; --bit) {
        unsigned t = prefix | (1u << bit);
        unsigned c = 0;
        DRAW_FOR_EACH({
            if constexpr (E > 0) {
                // Register keys past n are 0, below every t tried: no index or bound needed.
                c += key_of(e, i) >= t ? 1u : 0u;
            } else {
                if (in && key_of(e, i) >= t) {
                    ++c;
                }
            }
        })
        c = __reduce_add_sync(0xffffffffu, c);
        // Alternate buffers: a thread writing count b + 1's buffer has passed barrier b, so every
        // thread has finished reading count b - 1's, the same buffer.
        unsigned* buf = tot + (bit & 1) * 32;
        if (lane == 0) {
            buf[warp] = c;
        }
        __syncthreads();
        unsigned sum = __reduce_add_sync(0xffffffffu, lane < warps ? buf[lane] : 0u);
        if (sum >= (unsigned)k) {
            prefix = t;
        }
    }
    return prefix;
}

struct DrawShared {
    unsigned tot[2 * 32];
    double best_score[DRAW_MAX_THREADS / 32];
    int best_index[DRAW_MAX_THREADS / 32];
};

// Steps 1-5 for one song. E > 0: each thread keeps the keys of its E elements (conditional logits,
// then guided values) in registers; E == 0: every count recomputes them from the logits.
template <int E>
__device__ __forceinline__ void draw_song(const T* __restrict__ cp, const T* __restrict__ up, int* code, bool noise,
                                          int masked_end, unsigned long long seed, unsigned long long draw,
                                          const DrawDims& d, DrawShared& sh) {
    constexpr int R = E > 0 ? E : 1;
    const int n = d.vocab;
    const float scale = d.cfg_scale;
    const bool cfg = d.cfg != 0;

    // Step 2's threshold over the conditional logits as stored.
    bool use_cond = d.cond_top_k > 0;
    float cond_thr = 0.f;
    if (use_cond) {
        unsigned ck[R];
        if constexpr (E > 0) {
            DRAW_FOR_EACH({ ck[e] = in ? draw_key(ld(cp + i)) : 0u; })
        }
        auto cond_key = [&](int e, int i) -> unsigned {
            if constexpr (E > 0) {
                return ck[e];
            } else {
                return draw_key(ld(cp + i));
            }
        };
        cond_thr = draw_unkey(draw_select<E>(cond_key, n, min(d.cond_top_k, n), sh.tot));
    }
    // Steps 1-4: the guided value v[i], exactly as the CPU backend computes it (no FMA). Its key
    // decodes back to it bit for bit (v is never NaN).
    auto value_at = [&](int i) -> float {
        float c = ld(cp + i);
        float g = c;
        if (cfg) {
            float u = ld(up + i);
            g = __fadd_rn(u, __fmul_rn(__fsub_rn(c, u), scale));
        }
        if (noise) {
            g = __fdiv_rn(g, d.temperature);
        }
        if ((use_cond && c < cond_thr) || i == masked_end) {
            g = NEG_INF;
        }
        return draw_nan_to_num(g);
    };
    unsigned vk[R];
    if constexpr (E > 0) {
        DRAW_FOR_EACH({ vk[e] = in ? draw_key(value_at(i)) : 0u; })
    }
    auto value_key = [&](int e, int i) -> unsigned {
        if constexpr (E > 0) {
            return vk[e];
        } else {
            return draw_key(value_at(i));
        }
    };

    // Greedy needs no threshold: the largest v (lowest index first) is always a candidate.
    float thr = NEG_INF;
    if (noise && d.top_k > 0) {
        thr = draw_unkey(draw_select<E>(value_key, n, min(d.top_k, n), sh.tot));
    }

    // Each thread visits ascending indices and keeps strictly better scores: its lowest index wins
    // its ties; the reduction below prefers the lower index on equal scores.
    double best = __longlong_as_double((long long)0xfff0000000000000ull);  // -inf
    int bi = 0x7fffffff;
    DRAW_FOR_EACH({
        if (in) {
            float x = draw_unkey(value_key(e, i));
            if (x >= thr) {
                double score = (double)x;
                if (noise) {
                    score = __dsub_rn(score, log((double)draw_exp_noise(seed, draw, (unsigned long long)i)));
                }
                if (score > best) {
                    best = score;
                    bi = i;
                }
            }
        }
    })
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        double ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ob > best || (ob == best && oi < bi)) {
            best = ob;
            bi = oi;
        }
    }
    int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
        sh.best_score[warp] = best;
        sh.best_index[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int warps = blockDim.x / 32;
        best = sh.best_score[0];
        bi = sh.best_index[0];
        for (int w = 1; w < warps; ++w) {
            if (sh.best_score[w] > best || (sh.best_score[w] == best && sh.best_index[w] < bi)) {
                best = sh.best_score[w];
                bi = sh.best_index[w];
            }
        }
        *code = bi;
    }
}

// d.per_thread: elements per thread held in registers (1, 4 or 17, with vocab <= per_thread *
// blockDim.x), or 0 to recompute them in every pass (any vocabulary).
extern "C" __global__ void __launch_bounds__(DRAW_MAX_THREADS)
    lm_cfg_draw(const T* __restrict__ logits, int* __restrict__ codes, const int* __restrict__ mode,
                const int* __restrict__ seeds, const int* __restrict__ draws, const int* __restrict__ allow_end,
                const int* __restrict__ row_sampling, DrawDims d) {
    pdl_enter();
    __shared__ DrawShared sh;
    int s = blockIdx.x;
    int* code = codes + (long long)s * d.codes_stride + d.col;
    if (*code >= 0) {
        return;  // teacher forcing: the given code is kept
    }
    const T* cp = logits + (long long)((d.cfg ? 2 : 1) * s) * d.vocab;
    const T* up = d.cfg ? cp + d.vocab : cp;
    bool noise = mode[s] == 1;
    int masked_end = (d.end >= 0 && allow_end[s] == 0) ? d.end : -1;
    unsigned long long seed = (unsigned long long)(unsigned)seeds[2 * s] |
                              ((unsigned long long)(unsigned)seeds[2 * s + 1] << 32);
    unsigned long long draw = (unsigned long long)(unsigned)draws[s] + (unsigned long long)d.draw_offset;
    // The song's own temperature (f32 bits) and top-k replace the call's; k >= vocab selects
    // nothing (0), as the host maps the call's top-k.
    if (row_sampling != nullptr) {
        d.temperature = __int_as_float(row_sampling[2 * s]);
        int k = row_sampling[2 * s + 1];
        d.top_k = k >= d.vocab ? 0 : k;
    }
    switch (d.per_thread) {
        case 1:
            draw_song<1>(cp, up, code, noise, masked_end, seed, draw, d, sh);
            break;
        case 4:
            draw_song<4>(cp, up, code, noise, masked_end, seed, draw, d, sh);
            break;
        case 17:
            draw_song<17>(cp, up, code, noise, masked_end, seed, draw, d, sh);
            break;
        default:
            draw_song<0>(cp, up, code, noise, masked_end, seed, draw, d, sh);
            break;
    }
}
