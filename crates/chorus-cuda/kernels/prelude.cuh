// Shared definitions of every Chorus kernel. The translation unit is compiled once per precision:
// CHORUS_BF16=1 stores tensors as bf16 (raw bits, converted by hand so that no CUDA header is
// needed), CHORUS_BF16=0 as f32. Arithmetic is always f32.

struct __align__(2) bf16 {
    unsigned short bits;
};

#if CHORUS_BF16
typedef bf16 T;
#else
typedef float T;
#endif

// Elements of T in one 16-byte vector access.
#define VEC (16 / (int)sizeof(T))

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const bf16* p) { return __uint_as_float(((unsigned)p->bits) << 16); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ unsigned short to_bf16_bits(float v) {
    unsigned u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ void st(bf16* p, float v) { p->bits = to_bf16_bits(v); }

// 16-byte vector of T unpacked to f32 and packed back.
__device__ __forceinline__ void unpack(uint4 v, float* f) {
#if CHORUS_BF16
    unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
#else
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
#endif
}
__device__ __forceinline__ uint4 pack(const float* f) {
    uint4 v;
#if CHORUS_BF16
    v.x = (unsigned)to_bf16_bits(f[0]) | ((unsigned)to_bf16_bits(f[1]) << 16);
    v.y = (unsigned)to_bf16_bits(f[2]) | ((unsigned)to_bf16_bits(f[3]) << 16);
    v.z = (unsigned)to_bf16_bits(f[4]) | ((unsigned)to_bf16_bits(f[5]) << 16);
    v.w = (unsigned)to_bf16_bits(f[6]) | ((unsigned)to_bf16_bits(f[7]) << 16);
#else
    v.x = __float_as_uint(f[0]);
    v.y = __float_as_uint(f[1]);
    v.z = __float_as_uint(f[2]);
    v.w = __float_as_uint(f[3]);
#endif
    return v;
}

__device__ __forceinline__ float elu_f(float v) { return v > 0.f ? v : expm1f(v); }

__device__ __forceinline__ uint4 elu_vec(uint4 v) {
    float f[VEC];
    unpack(v, f);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        f[i] = elu_f(f[i]);
    }
    return pack(f);
}

// ELU of a 16-byte vector on its way into T storage: in bf16, __expf(v) - 1 (its error, about
// 1e-7 absolute, is far below a bf16 step, and it costs a fraction of expm1f); in f32 the exact
// expm1f, so the validation mode is unchanged.
__device__ __forceinline__ uint4 elu_vec_stored(uint4 v) {
#if CHORUS_BF16
    float f[VEC];
    unpack(v, f);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        f[i] = f[i] > 0.f ? f[i] : __expf(f[i]) - 1.f;
    }
    return pack(f);
#else
    return elu_vec(v);
#endif
}

// Grid-stride loop over [0, n). The host guarantees n < 2^31, so indices are 32-bit: index
// decomposition by division is several times cheaper than in 64-bit.
#define GRID_LOOP(i, n) \
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (unsigned)(n); i += gridDim.x * blockDim.x)

// C consecutive elements as f32: one 16-byte access when C == VEC, else C scalar loads.
template <int C>
__device__ __forceinline__ void load_c(const T* p, float* f) {
    if constexpr (C == VEC) {
        unpack(*reinterpret_cast<const uint4*>(p), f);
    } else {
#pragma unroll
        for (int e = 0; e < C; ++e) {
            f[e] = ld(p + e);
        }
    }
}

template <int C>
__device__ __forceinline__ void store_c(T* p, const float* f) {
    if constexpr (C == VEC) {
        *reinterpret_cast<uint4*>(p) = pack(f);
    } else {
#pragma unroll
        for (int e = 0; e < C; ++e) {
            st(p + e, f[e]);
        }
    }
}

// Geometry of a stride-one causal convolution (mirrors the host struct `ConvDims`). `elu_out`:
// the output is ELU'd (honoured by conv_shift_add; the host runs a pass for the other paths).
struct ConvDims {
    int rows, time, c_in, c_out, kernel, dilation, history, elu, elu_out;
};

// Geometry of a streaming transposed convolution (mirrors the host struct `ConvTrDims`).
struct ConvTrDims {
    int rows, time, c_in, c_out, kernel, stride, tail, depthwise, elu;
};

// Geometry of one attention call (mirrors the host struct `AttnDims`).
struct AttnDims {
    int rows, time, heads, head_dim, ring, window;
    float rope_theta;
};

// -inf without <math.h>.
#define NEG_INF (__int_as_float(0xff800000))

// Programmatic dependent launch (sm_90+): kernels are launched while their predecessor drains.
// Each kernel first waits for the predecessor's writes to be visible (and so for every earlier
// kernel: each of them waited in turn), then lets its own successor launch.
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The two halves of pdl_enter, for a kernel that reads only weights (never written during a
// step): it lets its successor launch first and waits for its predecessor last, before it
// exits, so its successor (which waits for it) still sees every earlier kernel's writes.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// `bytes` (a multiple of 16) from `p` into L2 in one bulk request (sm_90+; nothing before): the
// copy engine fetches them while the issuing threads go on, and they stay asked for after exit.
__device__ __forceinline__ void l2_prefetch_bulk(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Before waiting on its predecessor, a weight-streaming kernel asks L2 for the first weight row
// its warp will read (`row_bytes` long): weights are never written during a step, so this overlaps
// the DRAM latency of the first row with the predecessor's tail.
__device__ __forceinline__ void prefetch_first_row(const void* base, size_t row_bytes, int rows) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (warp >= rows) return;
    const char* p = static_cast<const char*>(base) + (size_t)warp * row_bytes;
    for (size_t off = (size_t)(threadIdx.x & 31) * 128; off < row_bytes; off += 32 * 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
    }
}
