// Encoder-only kernels: replicate-padded conv history and residual vector quantisation.

// For each row whose slot is fresh (tokens == 0), every history column becomes x[r, 0, :].
extern "C" __global__ void replicate_history(const T* __restrict__ x, T* __restrict__ state, const int* __restrict__ tokens,
                                             const int* __restrict__ slots, int rows, int time, int channels, int history) {
    pdl_enter();
    const int per = history * channels;
    GRID_LOOP(i, (long long)rows * per) {
        int r = (int)(i / (unsigned)per);
        int j = (int)(i % (unsigned)per);
        int slot = slots[r];
        if (tokens[slot] != 0) continue;
        state[(long long)slot * per + j] = x[(long long)r * time * channels + j % channels];
    }
}

// Rows per block (they share each codebook read) and codewords per thread per pass.
#define RVQ_ROWS 8
#define RVQ_CW 8
#define RVQ_THREADS 256
#define RVQ_WARPS (RVQ_THREADS / 32)
#define RVQ_NO_CODE (-1)

// (d, i) is better than (bd, bi): smaller distance, the lower index on ties (torch argmin).
__device__ __forceinline__ bool rvq_better(float d, int i, float bd, int bi) { return d < bd || (d == bd && i < bi); }

// Split RVQ (transformers MimiSplitResidualVectorQuantizer.encode), all in f32: each half projects
// the latent with its input_proj, then per level takes the codeword minimising |e|^2 - 2 r.e and
// subtracts it. A row quantises its leading levels that are not RVQ_NO_CODE on entry.
// Dynamic shared memory: RVQ_ROWS * (dim + cbd) floats.
extern "C" __global__ void __launch_bounds__(RVQ_THREADS)
    rvq_encode(const T* __restrict__ x, const float* __restrict__ proj, const float* __restrict__ cbT, const float* __restrict__ norms,
               int* __restrict__ codes, int rows, int dim, int cbd, int card, int books, int semantic) {
    pdl_enter();
    extern __shared__ float rvq_smem[];
    float* xs = rvq_smem;
    float* res = xs + RVQ_ROWS * dim;
    __shared__ float red_d[RVQ_ROWS][RVQ_WARPS];
    __shared__ int red_i[RVQ_ROWS][RVQ_WARPS];
    __shared__ int best[RVQ_ROWS];
    __shared__ int nq[RVQ_ROWS];
    __shared__ int max_nq;
    const int r0 = blockIdx.x * RVQ_ROWS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int i = tid; i < RVQ_ROWS * dim; i += RVQ_THREADS) {
        int r = i / dim, d = i % dim;
        xs[i] = (r0 + r < rows) ? ld(x + (long long)(r0 + r) * dim + d) : 0.f;
    }
    if (tid < RVQ_ROWS) {
        int n = 0;
        if (r0 + tid < rows) {
            const int* row = codes + (long long)(r0 + tid) * books;
            while (n < books && row[n] != RVQ_NO_CODE) ++n;
        }
        nq[tid] = n;
    }
    __syncthreads();
    if (tid == 0) {
        int m = 0;
        for (int r = 0; r < RVQ_ROWS; ++r) m = max(m, nq[r]);
        max_nq = m;
    }
    __syncthreads();
    const int levels = max_nq;
    for (int level = 0; level < levels; ++level) {
        if (level == 0 || level == semantic) {
            // Each half quantises its own projection of the latent: a warp per output, lanes over dim.
            const int half = (level == semantic && semantic > 0) ? 1 : 0;
            for (int o = warp; o < cbd; o += RVQ_WARPS) {
                const float* p = proj + ((long long)half * cbd + o) * dim;
                float acc[RVQ_ROWS];
#pragma unroll
                for (int r = 0; r < RVQ_ROWS; ++r) acc[r] = 0.f;
                for (int d = lane; d < dim; d += 32) {
                    float pv = p[d];
#pragma unroll
                    for (int r = 0; r < RVQ_ROWS; ++r) acc[r] += pv * xs[r * dim + d];
                }
#pragma unroll
                for (int r = 0; r < RVQ_ROWS; ++r) {
                    float v = acc[r];
                    for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
                    if (lane == 0) res[r * cbd + o] = v;
                }
            }
            __syncthreads();
        }
        const float* book = cbT + (long long)level * cbd * card;
        const float* nrm = norms + (long long)level * card;
        float bd[RVQ_ROWS];
        int bi[RVQ_ROWS];
#pragma unroll
        for (int r = 0; r < RVQ_ROWS; ++r) {
            bd[r] = __int_as_float(0x7f800000);
            bi[r] = 0;
        }
        for (int c0 = 0; c0 < card; c0 += RVQ_THREADS * RVQ_CW) {
            float acc[RVQ_CW][RVQ_ROWS];
#pragma unroll
            for (int k = 0; k < RVQ_CW; ++k)
#pragma unroll
                for (int r = 0; r < RVQ_ROWS; ++r) acc[k][r] = 0.f;
            for (int d = 0; d < cbd; ++d) {
                const float* brow = book + (long long)d * card + c0 + tid;
                float cv[RVQ_CW];
#pragma unroll
                for (int k = 0; k < RVQ_CW; ++k) cv[k] = (c0 + tid + k * RVQ_THREADS < card) ? brow[k * RVQ_THREADS] : 0.f;
#pragma unroll
                for (int r = 0; r < RVQ_ROWS; ++r) {
                    float rv = res[r * cbd + d];
#pragma unroll
                    for (int k = 0; k < RVQ_CW; ++k) acc[k][r] += cv[k] * rv;
                }
            }
#pragma unroll
            for (int k = 0; k < RVQ_CW; ++k) {
                int c = c0 + tid + k * RVQ_THREADS;
                if (c < card) {
                    float n = nrm[c];
#pragma unroll
                    for (int r = 0; r < RVQ_ROWS; ++r) {
                        float dist = n - 2.f * acc[k][r];
                        // NaN never wins, as on the CPU (its `<` is false for NaN).
                        if (!(dist == dist)) dist = __int_as_float(0x7f800000);
                        if (rvq_better(dist, c, bd[r], bi[r])) {
                            bd[r] = dist;
                            bi[r] = c;
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RVQ_ROWS; ++r) {
            float d = bd[r];
            int i = bi[r];
            for (int off = 16; off; off >>= 1) {
                float od = __shfl_xor_sync(0xffffffffu, d, off);
                int oi = __shfl_xor_sync(0xffffffffu, i, off);
                if (rvq_better(od, oi, d, i)) {
                    d = od;
                    i = oi;
                }
            }
            if (lane == 0) {
                red_d[r][warp] = d;
                red_i[r][warp] = i;
            }
        }
        __syncthreads();
        if (tid < RVQ_ROWS) {
            float d = red_d[tid][0];
            int i = red_i[tid][0];
            for (int w = 1; w < RVQ_WARPS; ++w) {
                if (rvq_better(red_d[tid][w], red_i[tid][w], d, i)) {
                    d = red_d[tid][w];
                    i = red_i[tid][w];
                }
            }
            best[tid] = i;
            if (level < nq[tid]) codes[(long long)(r0 + tid) * books + level] = i;
        }
        __syncthreads();
        for (int i = tid; i < RVQ_ROWS * cbd; i += RVQ_THREADS) {
            int r = i / cbd, d = i % cbd;
            res[i] -= book[(long long)d * card + best[r]];
        }
        __syncthreads();
    }
}

// Split RVQ for few rows, one level at a time so that a level's search spreads over many blocks.
// rvq_prepare: per row (one block each), both halves' projections into res[row][2][cbd] and the
// row's n_q (leading entries of codes that are not RVQ_NO_CODE) into nq[row].
extern "C" __global__ void __launch_bounds__(RVQ_THREADS)
    rvq_prepare(const T* __restrict__ x, const float* __restrict__ proj, const int* __restrict__ codes, float* __restrict__ res,
                int* __restrict__ nq, int rows, int dim, int cbd, int books) {
    pdl_enter();
    extern __shared__ float rvq_smem[];
    const int row = blockIdx.x;
    if (row >= rows) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int d = tid; d < dim; d += RVQ_THREADS) rvq_smem[d] = ld(x + (long long)row * dim + d);
    if (tid == 0) {
        const int* c = codes + (long long)row * books;
        int n = 0;
        while (n < books && c[n] != RVQ_NO_CODE) ++n;
        nq[row] = n;
    }
    __syncthreads();
    for (int o = warp; o < 2 * cbd; o += RVQ_WARPS) {
        const float* p = proj + (long long)o * dim;
        float acc = 0.f;
        for (int d = lane; d < dim; d += 32) acc += p[d] * rvq_smem[d];
        for (int off = 16; off; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0) res[(long long)row * 2 * cbd + o] = acc;
    }
}

// rvq_search: block tile * chunks + chunk finds, for RVQ_ROWS rows, the best codeword of level `level`
// among codewords [chunk * RVQ_THREADS, (chunk + 1) * RVQ_THREADS): one per thread.
// Dynamic shared memory: RVQ_ROWS * cbd floats.
extern "C" __global__ void __launch_bounds__(RVQ_THREADS)
    rvq_search(const float* __restrict__ res, const float* __restrict__ cbT, const float* __restrict__ norms, const int* __restrict__ nq,
               float* __restrict__ part_d, int* __restrict__ part_i, int rows, int cbd, int card, int level, int semantic,
               int chunks) {
    pdl_enter();
    extern __shared__ float rvq_smem[];
    __shared__ float red_d[RVQ_ROWS][RVQ_WARPS];
    __shared__ int red_i[RVQ_ROWS][RVQ_WARPS];
    const int r0 = (blockIdx.x / chunks) * RVQ_ROWS, chunk = blockIdx.x % chunks;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int need = 0;
#pragma unroll
    for (int r = 0; r < RVQ_ROWS; ++r) need |= (r0 + r < rows && level < nq[r0 + r]);
    if (!need) return;
    const int half = level < semantic ? 0 : 1;
    for (int i = tid; i < RVQ_ROWS * cbd; i += RVQ_THREADS) {
        int r = i / cbd, d = i % cbd;
        rvq_smem[i] = (r0 + r < rows) ? res[((long long)(r0 + r) * 2 + half) * cbd + d] : 0.f;
    }
    __syncthreads();
    const int c = chunk * RVQ_THREADS + tid;
    const float* book = cbT + (long long)level * cbd * card;
    float acc[RVQ_ROWS];
#pragma unroll
    for (int r = 0; r < RVQ_ROWS; ++r) acc[r] = 0.f;
    if (c < card) {
        for (int d = 0; d < cbd; ++d) {
            float cv = book[(long long)d * card + c];
#pragma unroll
            for (int r = 0; r < RVQ_ROWS; ++r) acc[r] += cv * rvq_smem[r * cbd + d];
        }
    }
    const float n = c < card ? norms[(long long)level * card + c] : 0.f;
#pragma unroll
    for (int r = 0; r < RVQ_ROWS; ++r) {
        float d = c < card ? n - 2.f * acc[r] : __int_as_float(0x7f800000);
        // NaN never wins, as on the CPU (its `<` is false for NaN).
        if (!(d == d)) d = __int_as_float(0x7f800000);
        int i = c < card ? c : 0x7fffffff;
        for (int off = 16; off; off >>= 1) {
            float od = __shfl_xor_sync(0xffffffffu, d, off);
            int oi = __shfl_xor_sync(0xffffffffu, i, off);
            if (rvq_better(od, oi, d, i)) {
                d = od;
                i = oi;
            }
        }
        if (lane == 0) {
            red_d[r][warp] = d;
            red_i[r][warp] = i;
        }
    }
    __syncthreads();
    if (tid < RVQ_ROWS && r0 + tid < rows) {
        float d = red_d[tid][0];
        int i = red_i[tid][0];
        for (int w = 1; w < RVQ_WARPS; ++w) {
            if (rvq_better(red_d[tid][w], red_i[tid][w], d, i)) {
                d = red_d[tid][w];
                i = red_i[tid][w];
            }
        }
        part_d[(long long)(r0 + tid) * chunks + chunk] = d;
        part_i[(long long)(r0 + tid) * chunks + chunk] = i;
    }
}

// rvq_pick: per row (one block each), the best of the chunks' candidates becomes the level's
// code, and its codeword is subtracted from the row's residual of that half.
extern "C" __global__ void rvq_pick(float* __restrict__ res, const float* __restrict__ cbT, const float* __restrict__ part_d,
                                    const int* __restrict__ part_i, const int* __restrict__ nq, int* __restrict__ codes, int rows, int cbd,
                                    int card, int level, int semantic, int chunks, int books) {
    pdl_enter();
    __shared__ int best;
    const int row = blockIdx.x;
    if (row >= rows || level >= nq[row]) return;
    if (threadIdx.x == 0) {
        float d = part_d[(long long)row * chunks];
        int i = part_i[(long long)row * chunks];
        for (int k = 1; k < chunks; ++k) {
            if (rvq_better(part_d[(long long)row * chunks + k], part_i[(long long)row * chunks + k], d, i)) {
                d = part_d[(long long)row * chunks + k];
                i = part_i[(long long)row * chunks + k];
            }
        }
        // No candidate at all (an index past the book): code 0, as the CPU would choose.
        best = (i >= 0 && i < card) ? i : 0;
        codes[(long long)row * books + level] = best;
    }
    __syncthreads();
    const int half = level < semantic ? 0 : 1;
    const float* book = cbT + (long long)level * cbd * card;
    for (int d = threadIdx.x; d < cbd; d += blockDim.x) res[((long long)row * 2 + half) * cbd + d] -= book[(long long)d * card + best];
}
