// The int8 GEMM of lm_q8_gemm.cu on Hopper's warpgroup tensor cores (wgmma, sm_90a): the same
// tiles, stages, stream-K schedule, parts and epilogues, with each warpgroup's products issued as
// asynchronous m64n64k16 wgmmas instead of mma.sync.
//
// - A (weights) from registers: lane (g, t) of warp wm takes, per 16-column step of a weight
//   row, the two words holding columns 2t, 2t + 1 and 2t + 8, 2t + 9, picks their byte pairs with
//   one permute and converts them as lm_skinny.cu's sk_q8_half2: wgmma's A fragment, so that the
//   weights stay int8 in shared memory and are read once per warpgroup.
// - B (activations) from shared memory through a matrix descriptor: warpgroup wg takes 64 of the
//   block's 128 activation rows, K-major with the 128-byte swizzle (q8g_x_off with sw128), so
//   that the tensor cores read them without bank conflicts and no thread loads B fragments.
// - The accumulators of wgmma m64nN (thread (warp w, g, t): rows 16 w + g (+ 8), columns
//   8 i + 2 t (+ 1)) are those of the mma.sync kernel once its warp tiles interleave (q8g_t16):
//   both kernels share q8g_out, the parts and lm_q8_gemm_sum.
// PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Operation" gives the fragment
// and descriptor layouts used here.

#if MMA_ENABLED && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Bytes between 8-row groups of the activation tile (8 rows of 128 bytes): the descriptor's
// stride; the leading offset is unused by swizzled K-major layouts.
#define Q8W_SBO 1024
// wgmma's M: weight rows of one instruction (4 warps x 16).
#define Q8W_M 64
// Activation rows a warpgroup takes (wgmma's N).
#define Q8W_N 64

// Shared-memory matrix descriptor of a K-major, 128-byte-swizzled tile at shared address `addr`:
// start address >> 4 in bits 0-13, stride >> 4 in bits 32-45, swizzle mode 1 (128 B) in 62-63.
__device__ __forceinline__ unsigned long long q8w_desc(unsigned addr) {
    return (unsigned long long)((addr >> 4) & 0x3FFF) | ((unsigned long long)(Q8W_SBO >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void q8w_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void q8w_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void q8w_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// This thread's cp.async writes made visible to the tensor cores' (async proxy) reads.
__device__ __forceinline__ void q8w_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across a wgmma fence or wait.
__device__ __forceinline__ void q8w_pin(float* acc) {
#pragma unroll
    for (int i = 0; i < Q8G_ACC; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// d[64 x 64] += A (registers, 64 x 16) . B (descriptor, 16 x 64), f16 in, f32 accumulate.
__device__ __forceinline__ void q8w_mma(float* d, const unsigned* a, unsigned long long desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// One stage's products on wgmma: per 16-column step, each warp converts its weight fragments
// (A) and the warpgroup issues Q8G_MI m64n64k16 wgmmas over its 64 activation rows (B, through
// the descriptor); the stage's wgmmas complete before the ring refills it.
struct Q8wStage {
    static constexpr bool sw128 = true;
    __device__ __forceinline__ void begin(float* acc) const { q8w_pin(acc); }
    // This thread's cp.async writes made visible to the tensor cores' reads before the barrier.
    __device__ __forceinline__ void ready() const { q8w_proxy_fence(); }
    __device__ __forceinline__ void operator()(float* acc, const unsigned char* ws, unsigned stage) const {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int g = lane >> 2, t = lane & 3;
        const int wm = warp & 3, wg = warp >> 2;
        // Byte pairs 0-1 (even t) or 2-3 (odd t) of the low and the high word.
        const unsigned pick = (t & 1) ? 0x7632 : 0x5410;
        const unsigned xs = stage + Q8G_W_BYTES + wg * Q8W_N * Q8G_BK * 2;
#pragma unroll
        for (int ks = 0; ks < Q8G_BK / 16; ++ks) {
            unsigned a[Q8G_MI][4];
#pragma unroll
            for (int mi = 0; mi < Q8G_MI; ++mi) {
                const int r0 = q8g_t16(wm, mi) * 16 + g;
                const unsigned char* p0 = ws + q8g_w_off(r0, ks) + 4 * (t >> 1);
                const unsigned char* p1 = ws + q8g_w_off(r0 + 8, ks) + 4 * (t >> 1);
                const unsigned w0 = __byte_perm(*reinterpret_cast<const unsigned*>(p0),
                                                *reinterpret_cast<const unsigned*>(p0 + 8), pick);
                const unsigned w1 = __byte_perm(*reinterpret_cast<const unsigned*>(p1),
                                                *reinterpret_cast<const unsigned*>(p1 + 8), pick);
                q8g_afrag(a[mi], w0, w1);
            }
            q8w_fence();
            // 16 columns of 2 bytes further along the swizzled rows.
            const unsigned long long desc = q8w_desc(xs + ks * 32);
#pragma unroll
            for (int mi = 0; mi < Q8G_MI; ++mi) q8w_mma(acc + mi * Q8W_M / 2, a[mi], desc);
        }
        q8w_commit();
        // The stage is read before the next iteration refills it, and the A registers reused.
        q8w_wait_all();
        q8w_pin(acc);
    }
};

// lm_q8_gemm's contract, on wgmma; launched only on sm_90 (the host's Q8Gemm::wgmma).
extern "C" __global__ void __launch_bounds__(Q8G_WARPS * 32, 1)
    lm_q8_wgmma(const unsigned short* __restrict__ x, const unsigned char* __restrict__ w,
                const float* __restrict__ scale, T* __restrict__ out, float* __restrict__ work, int n, int k, int m,
                int epi) {
    pdl_enter();
    q8g_run(Q8wStage{}, x, w, scale, out, work, n, k, m, epi);
}
#else
extern "C" __global__ void lm_q8_wgmma(const unsigned short* x, const unsigned char* w, const float* scale, T* out,
                                       float* work, int n, int k, int m, int epi) {
    pdl_enter();
}
#endif
