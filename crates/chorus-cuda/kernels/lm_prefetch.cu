// A product's first weights into L2 while the kernels before it still run (sm_90+). Weights are
// never written during a step, so nothing orders these reads: the kernel lets its successor
// launch first, issues bulk L2 prefetches of up to two ranges, and only then waits for its
// predecessor (prelude.cuh's pdl_launch_dependents and pdl_wait). Its successor waits for it, so
// the chain of writes stays ordered while DRAM streams the next weights during the previous
// kernel's tail.
#define PF_PIECE 16384

__device__ __forceinline__ void pf_range(const unsigned char* p, unsigned long long bytes) {
    const unsigned long long threads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long off = first * PF_PIECE; off < bytes; off += threads * PF_PIECE) {
        // Sizes stay multiples of 16 (the host rounds `bytes` down): the bulk prefetch's rule.
        l2_prefetch_bulk(p + off, (unsigned)min((unsigned long long)PF_PIECE, bytes - off));
    }
}

extern "C" __global__ void lm_l2_prefetch(const unsigned char* a, unsigned long long a_bytes, const unsigned char* b,
                                          unsigned long long b_bytes) {
    pdl_launch_dependents();
    pf_range(a, a_bytes);
    pf_range(b, b_bytes);
    pdl_wait();
}
