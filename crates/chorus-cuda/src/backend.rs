//! The backend object: device, stream, kernels, cuBLAS, buffers, staging, and graph execution.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chorus_core::{BufRole, Precision, Result, StagingDims};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaGraph, CudaStream};

use crate::blas::Blas;
use crate::blas_lt::BlasLt;
use crate::error::{check, cuda_error, OrCuda};
use crate::kernels::{Kernel, Kernels, Launch};
use crate::memory::{lock, DevMem, Pinned, Registry};
use crate::mma_ops::{MMA_MAX_SMEM, MMA_MIN_MAJOR};

/// Default cuBLAS workspace: what NVIDIA recommends for Hopper.
pub const DEFAULT_CUBLAS_WORKSPACE: usize = 32 << 20;
/// Eager runs of a program before it is captured (loads modules, settles cuBLAS heuristics).
pub const DEFAULT_WARMUP_RUNS: usize = 2;
/// Threads per block of the element-wise kernels.
pub(crate) const BLOCK: u32 = 256;
/// Blocks per multiprocessor that a grid-stride launch asks for at most.
const BLOCKS_PER_SM: u32 = 32;
/// Alignment of sub-allocations inside the scratch buffer.
pub(crate) const SCRATCH_ALIGN: usize = 256;

/// How to open the backend.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Device ordinal.
    pub device: usize,
    /// Storage type of buffers; arithmetic accumulates in f32 either way.
    pub precision: Precision,
    /// Where compiled kernels are cached; `None` means `~/.cache/chorus/kernels`.
    pub kernel_cache_dir: Option<PathBuf>,
    /// Bytes of the cuBLAS workspace.
    pub cublas_workspace: usize,
    /// Eager runs of a program before its capture.
    pub warmup_runs: usize,
    /// Narrowing convolutions use the tap-split path (else im2col + GEMM).
    pub conv_tap_split: bool,
    /// bf16 convolutions and dense transposed convolutions run as tensor-core implicit GEMMs
    /// where their shape allows (sm_80+); off, they take the cuBLAS paths.
    pub conv_mma: bool,
    /// bf16 SEANet residual blocks whose weights fit in shared memory run as one tensor-core
    /// kernel (needs `conv_mma`); off, as their two convolutions. For A/B measurements.
    pub fuse_res_block: bool,
    /// bf16 convolutions of at least two taps whose outputs fill 128-wide tiles run on the wide
    /// tensor-core kernel (`kernels/conv_wide.cu`, needs `conv_mma`), and the decoder's dense
    /// upsampling runs as output phases of one such convolution. Off by default: correct, but
    /// slower than the default path at batch 1024 on the H200 (docs/PERFORMANCE.md).
    pub conv_wide: bool,
    /// The decoder's dense upsampling runs as output phases of one two-tap convolution (on
    /// cuBLAS through an im2col of two columns, with the bias in the product's epilogue) instead
    /// of a product into `kernel * c_out` columns and an overlap pass: 3.66 against 3.95 ms per
    /// step at batch 1024 on the H200 (docs/PERFORMANCE.md).
    pub phase_upsampling: bool,
    /// Convolutions with more outputs than this skip the tensor-core implicit GEMM (whose
    /// blocks each re-read the input per 64 outputs) for the cuBLAS paths.
    pub conv_mma_max_out: usize,
    /// Convolution products whose outputs take a bias or a residual add them in the product's
    /// epilogue (cuBLASLt) instead of a second pass over the output. For A/B measurements.
    pub gemm_epilogue: bool,
    /// bf16 attention with heads of 64 runs its scores and value sums on the tensor cores
    /// (`kernels/attention_mma.cu`, sm_80+); off, on the CUDA cores. For A/B measurements.
    pub attention_mma: bool,
    /// Kernels launch with programmatic dependent launch on sm_90+ (each one is scheduled while
    /// its predecessor drains). `CHORUS_PDL=0` turns the default off, for A/B measurements.
    pub programmatic_launch: bool,
    /// Products of at most two rows with rows of at least this many columns take the GEMV
    /// kernel (weight bandwidth bound); shorter ones take cuBLAS. For A/B measurements.
    pub gemv_min_k: usize,
    /// bf16 LM products ([`chorus_core::LmOps::fused_linear`]) of int8 weights and at most
    /// [`crate::SKINNY_MAX_ROWS`] rows run on the tensor-core skinny kernel
    /// (`kernels/lm_skinny.cu`, sm_80+: W8A16 with the weights dequantised in registers, the
    /// epilogue fused, one reduction order per output whatever the row count); off (or
    /// `CHORUS_SKINNY=0`), as separate ops on the GEMV kernel and cuBLAS. For A/B measurements.
    pub skinny_mma: bool,
    /// Dense bf16 LM products of at most [`crate::SKINNY_MAX_ROWS`] rows take the skinny kernel
    /// too (with their pre-norm fused), so that a row's bits do not depend on the other rows of
    /// the call, and decode attention splits at fixed positions; off, they take the GEMV kernel and
    /// cuBLAS, faster from 4 rows up (docs/PERFORMANCE.md). `CHORUS_BATCH_INVARIANT=1` turns the
    /// default on.
    pub batch_invariant: bool,
    /// The skinny kernel runs as a persistent grid of the blocks a device holds at once, each
    /// taking tiles in turn and loading its next tile's first weights during the current one's
    /// reduction and epilogue; off (the default until measured), one block a tile. The sums
    /// are the same either way. `CHORUS_SKINNY_PERSISTENT=1` turns it on; for A/B measurements.
    pub skinny_persistent: bool,
    /// Bytes of each LM product's weights (its first ones; for SwiGLU half from the gate rows,
    /// half from the up rows) that a small kernel before it prefetches into L2 while the kernels
    /// before it still run (`kernels/lm_prefetch.cu`; skinny, int8 GEMM and one- and two-row
    /// GEMV products). 0 turns it off; only with programmatic launch on sm_90+. Off by default:
    /// 1.05 ms slower at 8 int8 songs on an H100 (docs/PERFORMANCE.md); `CHORUS_L2_PREFETCH_MB=N`
    /// sets it in MiB.
    pub l2_prefetch_bytes: usize,
    /// Bytes of the next product's weights (in the order of [`chorus_core::LmOps::sequence_weights`])
    /// that a skinny product asks L2 for as each of its blocks issues its last weight loads, so
    /// that the next product's first reads, and the DRAM time of the small kernels between, are
    /// not spent waiting (`kernels/lm_skinny.cu`'s `SkNext`). 0 turns it off; sm_90+ only.
    /// `CHORUS_NEXT_PREFETCH_MB=N` sets it in MiB; for A/B measurements.
    pub next_prefetch_bytes: usize,
    /// With [`CudaOptions::next_prefetch_bytes`]: ask for the first weight group of every warp's
    /// k slice of the next product's rows (what each of its blocks reads first) rather than whole
    /// rows from its start. `CHORUS_NEXT_PREFETCH_FIRST=1` turns it on; for A/B measurements.
    pub next_prefetch_first_groups: bool,
    /// int8 products of at most 8 rows (k a multiple of 2,048 up to 4,096, groups of 256)
    /// rotate their input (and apply its RMSNorm) inside the skinny kernel, each warp its own k
    /// slice, instead of in a kernel before it; off by default (1.92 ms slower at one int8 song
    /// on an H100: every block repeats the rotation), the rotation kernel. Not in the batch-invariant mode. `CHORUS_Q8_FUSED_ROTATION=1` turns it on; for
    /// A/B measurements.
    pub q8_fused_rotation: bool,
    /// int8 products with a pre-norm take the norm and the input rotation in one kernel
    /// (`lm_norm_hadamard`); off (or `CHORUS_FUSED_NORM_ROTATION=0`), in two. For A/B
    /// measurements.
    pub fused_norm_rotation: bool,
    /// int8 products of [`crate::SKINNY_MAX_ROWS`] + 1 to [`crate::Q8_GEMM_MAX_ROWS`] rows take
    /// the tensor-core W8A16 GEMM (`kernels/lm_q8_gemm.cu`, with the skinny kernel); off (or
    /// `CHORUS_Q8_GEMM=0`), dequantization into scratch and cuBLAS. For A/B measurements.
    pub q8_gemm: bool,
    /// The int8 GEMM shares every tile's k iterations evenly among two blocks per multiprocessor
    /// (stream-K); off (or `CHORUS_Q8_GEMM_STREAM_K=0`), whole tiles, with k split only where
    /// tiles are fewer than multiprocessors. For A/B measurements.
    pub q8_gemm_stream_k: bool,
    /// On sm_90 the int8 GEMM issues its products as warpgroup wgmmas (`kernels/lm_q8_wgmma.cu`,
    /// A converted in registers, B read by the tensor cores from swizzled shared memory) instead
    /// of mma.sync (5% faster products at 128 rows on an H100, docs/PERFORMANCE.md); off (or
    /// `CHORUS_Q8_GEMM_WGMMA=0`), mma.sync. Other devices ignore it.
    pub q8_gemm_wgmma: bool,
    /// LM decode attention of head_dim 128 (GQA groups of 1, 2, 4 or 8) runs on the tensor cores
    /// (`kernels/lm_attention_mma.cu`, bf16 storage, sm_80+), over bf16 and 8-bit caches; off, on
    /// the plain decode kernel (`CHORUS_LM_ATTENTION_MMA=0`). On by default: measured on the H200
    /// at 64 and 128 songs it takes 10-17% off the frame (docs/PERFORMANCE.md).
    pub lm_attention_mma: bool,
    /// Products of at most two rows stream their weights with bulk copies into shared memory
    /// (`lm_gemv_tma`, sm_90+) instead of register loads (`lm_gemv`). Off by default until
    /// measured on the GPU; `CHORUS_GEMV_TMA=1` turns it on.
    pub gemv_tma: bool,
    /// A decode attention over several splits merges them in its last block to finish (ticket
    /// counters) instead of a combine kernel: one launch fewer per call. Off by default until
    /// measured on the GPU; `CHORUS_FUSED_COMBINE=1` turns it on.
    pub fused_combine: bool,
    /// The q/k norm and RoPE before an attention write the call's k and v to the cache in their
    /// kernel (`lm_qk_norm_rope_kv`, `LmOps::rope_paged_attention`): one launch fewer per call.
    /// Off by default until measured on the GPU; `CHORUS_FUSED_ROPE_KV=1` turns it on.
    pub fused_rope_kv: bool,
    /// Warm-up runs keep the buffers they must leave as they were on the host, not in device
    /// copies. The backend falls back to it by itself for a buffer whose copy does not fit (the
    /// GPU filled with slot state); on, it is taken for every buffer (its tests).
    pub host_snapshots: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            device: 0,
            precision: Precision::Bf16,
            kernel_cache_dir: None,
            cublas_workspace: DEFAULT_CUBLAS_WORKSPACE,
            warmup_runs: DEFAULT_WARMUP_RUNS,
            conv_tap_split: true,
            conv_mma: true,
            fuse_res_block: true,
            conv_wide: false,
            phase_upsampling: true,
            conv_mma_max_out: DEFAULT_CONV_MMA_MAX_OUT,
            gemm_epilogue: true,
            attention_mma: true,
            programmatic_launch: std::env::var(PDL_ENV).map_or(true, |v| v != "0"),
            gemv_min_k: crate::lm::gemv::GEMV_MIN_K,
            skinny_mma: std::env::var(SKINNY_ENV).map_or(true, |v| v != "0"),
            batch_invariant: std::env::var(BATCH_INVARIANT_ENV).is_ok_and(|v| v == "1"),
            skinny_persistent: std::env::var(SKINNY_PERSISTENT_ENV).is_ok_and(|v| v == "1"),
            l2_prefetch_bytes: std::env::var(L2_PREFETCH_ENV)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .map_or(0, |mb| mb << 20),
            next_prefetch_bytes: std::env::var(NEXT_PREFETCH_ENV)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .map_or(0, |mb| mb << 20),
            next_prefetch_first_groups: std::env::var(NEXT_PREFETCH_FIRST_ENV)
                .is_ok_and(|v| v == "1"),
            fused_norm_rotation: std::env::var(FUSED_NORM_ROTATION_ENV).map_or(true, |v| v != "0"),
            q8_fused_rotation: std::env::var(Q8_FUSED_ROTATION_ENV).is_ok_and(|v| v == "1"),
            q8_gemm: std::env::var(Q8_GEMM_ENV).map_or(true, |v| v != "0"),
            q8_gemm_stream_k: std::env::var(Q8_GEMM_STREAM_K_ENV).map_or(true, |v| v != "0"),
            q8_gemm_wgmma: std::env::var(Q8_GEMM_WGMMA_ENV).map_or(true, |v| v != "0"),
            lm_attention_mma: std::env::var(LM_ATTENTION_MMA_ENV).map_or(true, |v| v != "0"),
            gemv_tma: std::env::var(GEMV_TMA_ENV).is_ok_and(|v| v == "1"),
            fused_combine: std::env::var(FUSED_COMBINE_ENV).is_ok_and(|v| v == "1"),
            fused_rope_kv: std::env::var(FUSED_ROPE_KV_ENV).is_ok_and(|v| v == "1"),
            host_snapshots: false,
        }
    }
}

/// Default [`CudaOptions::conv_mma_max_out`]: the phase convolutions (256 to 4,096 outputs) take
/// cuBLAS, where the implicit GEMM's blocks would re-read their input 4 to 64 times.
pub const DEFAULT_CONV_MMA_MAX_OUT: usize = 128;
/// Environment switch of [`CudaOptions::batch_invariant`]'s default.
pub const BATCH_INVARIANT_ENV: &str = "CHORUS_BATCH_INVARIANT";
/// Environment switch of [`CudaOptions::lm_attention_mma`]'s default.
pub const LM_ATTENTION_MMA_ENV: &str = "CHORUS_LM_ATTENTION_MMA";
/// Environment switch of [`CudaOptions::fused_rope_kv`]'s default.
pub const FUSED_ROPE_KV_ENV: &str = "CHORUS_FUSED_ROPE_KV";
/// Environment switch of [`CudaOptions::fused_combine`]'s default.
pub const FUSED_COMBINE_ENV: &str = "CHORUS_FUSED_COMBINE";
/// Environment switch of [`CudaOptions::gemv_tma`]'s default.
pub const GEMV_TMA_ENV: &str = "CHORUS_GEMV_TMA";
/// Environment switch of [`CudaOptions::q8_fused_rotation`]'s default.
pub const Q8_FUSED_ROTATION_ENV: &str = "CHORUS_Q8_FUSED_ROTATION";
/// Environment switch of [`CudaOptions::fused_norm_rotation`]'s default.
pub const FUSED_NORM_ROTATION_ENV: &str = "CHORUS_FUSED_NORM_ROTATION";
/// Environment switch of [`CudaOptions::q8_gemm`]'s default.
pub const Q8_GEMM_ENV: &str = "CHORUS_Q8_GEMM";
/// Environment switch of [`CudaOptions::q8_gemm_stream_k`]'s default.
pub const Q8_GEMM_STREAM_K_ENV: &str = "CHORUS_Q8_GEMM_STREAM_K";
/// Environment switch of [`CudaOptions::q8_gemm_wgmma`]'s default.
pub const Q8_GEMM_WGMMA_ENV: &str = "CHORUS_Q8_GEMM_WGMMA";
/// Environment setting (MiB) of [`CudaOptions::next_prefetch_bytes`]'s default.
pub const NEXT_PREFETCH_ENV: &str = "CHORUS_NEXT_PREFETCH_MB";
/// Environment switch of [`CudaOptions::next_prefetch_first_groups`]'s default.
pub const NEXT_PREFETCH_FIRST_ENV: &str = "CHORUS_NEXT_PREFETCH_FIRST";
/// Environment setting (MiB) of [`CudaOptions::l2_prefetch_bytes`]'s default.
pub const L2_PREFETCH_ENV: &str = "CHORUS_L2_PREFETCH_MB";
/// Environment switch of [`CudaOptions::skinny_persistent`]'s default.
pub const SKINNY_PERSISTENT_ENV: &str = "CHORUS_SKINNY_PERSISTENT";
/// Environment switch of [`CudaOptions::skinny_mma`]'s default.
pub const SKINNY_ENV: &str = "CHORUS_SKINNY";
/// Environment switch of [`CudaOptions::programmatic_launch`]'s default.
pub const PDL_ENV: &str = "CHORUS_PDL";
/// E4M3 conversions (8-bit KV caches) need compute capability 8.9 or later.
const FP8_MIN_ARCH: (i32, i32) = (8, 9);
/// Programmatic dependent launch needs compute capability 9.0 (Hopper) or later.
const PDL_MIN_MAJOR: i32 = 9;

/// A float buffer on the device (f32 or bf16 by the backend's precision).
pub struct CudaBuf {
    pub(crate) mem: DevMem,
    pub(crate) len: usize,
    /// Stored as f32 whatever the precision ([`BufRole::Table`]).
    pub(crate) f32: bool,
    /// Stored as E4M3 bytes ([`BufRole::Pool8`]).
    pub(crate) fp8: bool,
}

impl CudaBuf {
    /// Elements held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An i32 buffer on the device.
pub struct CudaInts {
    pub(crate) mem: DevMem,
    pub(crate) len: usize,
}

impl CudaInts {
    /// Elements held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One bucket's pinned host I/O, plus the f32 device copies that bf16 mode converts through.
pub struct CudaStaging {
    pub(crate) dims: StagingDims,
    pub(crate) slots: Pinned,
    pub(crate) codes: Pinned,
    pub(crate) latents: Pinned,
    pub(crate) pcm: Pinned,
    pub(crate) dev_latents: Option<DevMem>,
    pub(crate) dev_pcm: Option<DevMem>,
}

/// Scratch memory shared by every op (they run in order on one stream). It only grows outside a
/// capture; a replaced buffer that a graph captured is kept alive, since the graph points into it.
#[derive(Default)]
pub(crate) struct Scratch {
    current: Option<DevMem>,
    /// A graph was captured while `current` was the region: it must outlive that graph.
    captured: bool,
    /// Regions replaced after a capture used them (graphs still read them).
    retired: Vec<DevMem>,
}

/// Device memory a warm-up snapshot leaves free for what the capture after it allocates
/// (the graph, its upload); copies past it go to the host.
const SNAPSHOT_HEADROOM: usize = 2 << 30;

/// One buffer's contents kept across warm-up runs ([`CudaBackend::capture`]).
enum Saved {
    Device(DevMem),
    /// Pageable host memory, for a copy that did not fit on the device.
    Host(Vec<u8>),
}

/// One captured bucket program.
pub(crate) struct Captured {
    pub graph: CudaGraph,
    pub nodes: usize,
}

/// The CUDA backend.
pub struct CudaBackend {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) precision: Precision,
    pub(crate) kernels: Kernels,
    pub(crate) blas: Blas,
    /// Products with a bias or residual epilogue; `None` when [`CudaOptions::gemm_epilogue`] is off.
    pub(crate) blas_lt: Option<BlasLt>,
    pub(crate) max_blocks: u32,
    pub(crate) sm_count: usize,
    /// Compute capability (major, minor).
    pub(crate) arch: (i32, i32),
    pub(crate) tap_split: bool,
    pub(crate) conv_mma: bool,
    pub(crate) fuse_res_block: bool,
    pub(crate) conv_wide: bool,
    /// See [`CudaOptions::phase_upsampling`].
    pub(crate) phase_upsampling: bool,
    /// See [`CudaOptions::conv_mma_max_out`].
    pub(crate) conv_mma_max_out: usize,
    /// See [`CudaOptions::attention_mma`] (false below sm_80).
    pub(crate) attention_mma: bool,
    /// See [`CudaOptions::gemv_min_k`].
    pub(crate) gemv_min_k: usize,
    /// See [`CudaOptions::skinny_mma`] (false below sm_80).
    pub(crate) skinny_mma: bool,
    /// See [`CudaOptions::skinny_persistent`].
    pub(crate) skinny_persistent: bool,
    /// See [`CudaOptions::l2_prefetch_bytes`]: 0 where it is off or cannot act.
    pub(crate) l2_prefetch_bytes: usize,
    /// Prefetch kernels enqueued so far.
    pub(crate) l2_prefetch_launches: AtomicUsize,
    /// See [`CudaOptions::next_prefetch_bytes`]: 0 where it is off or cannot act.
    pub(crate) next_prefetch_bytes: usize,
    /// See [`CudaOptions::next_prefetch_first_groups`].
    pub(crate) next_prefetch_first_groups: bool,
    /// Each sequenced weight's successor, by the weight's device address
    /// ([`chorus_core::LmOps::sequence_weights`]).
    pub(crate) successors: crate::memory::Successors,
    /// Skinny launches that asked L2 for their successor's weights.
    pub(crate) next_prefetch_launches: AtomicUsize,
    /// Skinny-kernel launches enqueued so far (as `mma_launches`).
    pub(crate) skinny_launches: AtomicUsize,
    /// Skinny launches whose persistent grid is smaller than their tile count.
    pub(crate) skinny_persistent_launches: AtomicUsize,
    /// See [`CudaOptions::batch_invariant`].
    pub(crate) batch_invariant: bool,
    /// See [`CudaOptions::fused_norm_rotation`].
    pub(crate) fused_norm_rotation: bool,
    /// See [`CudaOptions::q8_fused_rotation`].
    pub(crate) q8_fused_rotation: bool,
    /// int8 products that rotated their input inside the skinny kernel so far.
    pub(crate) q8_fused_rotation_launches: AtomicUsize,
    /// The int8 GEMM's schedule ([`CudaOptions::q8_gemm`]); `None` when it is off.
    pub(crate) q8_gemm: Option<crate::lm::q8_gemm::Q8Gemm>,
    /// int8 GEMM launches enqueued so far.
    pub(crate) q8_gemm_launches: AtomicUsize,
    /// See [`CudaOptions::lm_attention_mma`] (false without tensor cores or in f32 storage).
    pub(crate) lm_attention_mma: bool,
    /// The tensor-core decode may take 8-bit caches too (sm_90's shared memory per block; false
    /// on sm_89): it runs when [`Self::lm_attention_mma`] does.
    pub(crate) lm_attention_mma8: bool,
    /// LM decode attentions enqueued on the tensor-core kernel so far.
    pub(crate) lm_attention_mma_launches: AtomicUsize,
    /// Blocks of the bulk-copy GEMV ([`CudaOptions::gemv_tma`]): as many as the device holds at
    /// once; 0 when it is off.
    pub(crate) gemv_tma_grid: u32,
    /// Bulk-copy GEMV launches enqueued so far.
    pub(crate) gemv_tma_launches: AtomicUsize,
    /// See [`CudaOptions::fused_combine`]; `None` when off.
    pub(crate) fused_combine: Option<crate::lm::attention::FusedCombine>,
    /// Decode attentions enqueued with the fused combine so far.
    pub(crate) fused_combine_launches: AtomicUsize,
    /// See [`CudaOptions::fused_rope_kv`].
    pub(crate) fused_rope_kv: bool,
    /// Rotations enqueued with the KV write in their kernel so far.
    pub(crate) fused_rope_kv_launches: AtomicUsize,
    /// Dynamic shared memory the tensor-core convolutions may take on this device.
    pub(crate) mma_smem_limit: usize,
    /// Tensor-core convolutions enqueued so far (eager runs and captures; replays do not count).
    pub(crate) mma_launches: AtomicUsize,
    /// Fused residual blocks enqueued so far (as `mma_launches`).
    pub(crate) res_block_launches: AtomicUsize,
    /// One-output convolutions enqueued so far (as `mma_launches`).
    pub(crate) out1_launches: AtomicUsize,
    /// Wide tensor-core convolutions enqueued so far (as `mma_launches`).
    pub(crate) wide_launches: AtomicUsize,
    /// Products with a bias or residual epilogue enqueued so far (as `mma_launches`).
    pub(crate) epilogue_launches: AtomicUsize,
    /// Tensor-core attention calls enqueued so far (as `mma_launches`).
    pub(crate) attention_mma_launches: AtomicUsize,
    pub(crate) scratch: Mutex<Scratch>,
    pub(crate) graphs: Mutex<HashMap<usize, Captured>>,
    pub(crate) capturing: AtomicBool,
    pub(crate) registry: Registry,
    pub(crate) profiling: AtomicBool,
    pub(crate) profile: Mutex<Vec<(&'static str, CudaEvent, CudaEvent)>>,
    warmup_runs: usize,
    /// See [`CudaOptions::host_snapshots`].
    host_snapshots: bool,
    description: String,
}

// SAFETY: every CUDA handle here is usable from any thread once the context is bound, which each
// public entry point does first; the mutable parts sit behind mutexes.
unsafe impl Send for CudaBackend {}

impl CudaBackend {
    /// Opens device `options.device`: loads the libraries, compiles (or reads cached) kernels for
    /// its architecture, creates the stream and the cuBLAS handle.
    pub fn new(options: CudaOptions) -> Result<Self> {
        const OP: &str = "CudaBackend::new";
        crate::loader::check_libraries()?;
        cudarc::driver::result::init().or_cuda("cuInit")?;
        let count = CudaContext::device_count().or_cuda("cuDeviceGetCount")?;
        if options.device >= count.max(0) as usize {
            return Err(cuda_error(
                OP,
                format!(
                    "device {} requested but {count} CUDA device(s) found",
                    options.device
                ),
            ));
        }
        let ctx = CudaContext::new(options.device).or_cuda("cuCtxCreate")?;
        // SAFETY: called before any allocation; every op runs on the one stream below, so the
        // per-buffer events cudarc would record are not needed (and could not be captured).
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().or_cuda("cuStreamCreate")?;
        let arch = ctx.compute_capability().or_cuda("cuDeviceGetAttribute")?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .or_cuda("cuDeviceGetAttribute")?;
        let mut kernels =
            Kernels::load(options.precision, arch, options.kernel_cache_dir.as_deref())?;
        kernels.set_programmatic(options.programmatic_launch && arch.0 >= PDL_MIN_MAJOR);
        let conv_mma = options.conv_mma && arch.0 >= MMA_MIN_MAJOR;
        let optin = ctx
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .or_cuda("cuDeviceGetAttribute")?;
        let mma_smem_limit = MMA_MAX_SMEM.min(usize::try_from(optin).unwrap_or(0));
        if conv_mma {
            for k in [
                Kernel::ConvMmaN8,
                Kernel::ConvMmaN16,
                Kernel::ConvMmaN32,
                Kernel::ConvMmaN64,
                Kernel::ResBlockC64,
                Kernel::ResBlockC128,
                Kernel::ConvWide,
            ] {
                kernels.allow_dynamic_smem(k, mma_smem_limit)?;
            }
        }
        let rotation_smem = if options.skinny_mma && arch.0 >= MMA_MIN_MAJOR {
            crate::lm::skinny::allow_smem(&kernels, mma_smem_limit)?
        } else {
            false
        };
        let q8_gemm = if options.q8_gemm
            && options.skinny_mma
            && arch.0 >= MMA_MIN_MAJOR
            && mma_smem_limit >= crate::lm::q8_gemm::SMEM
        {
            kernels.allow_dynamic_smem(Kernel::LmQ8Gemm, crate::lm::q8_gemm::SMEM)?;
            let wgmma = options.q8_gemm_wgmma && arch == crate::kernels::WGMMA_ARCH;
            if wgmma {
                kernels.allow_dynamic_smem(Kernel::LmQ8Wgmma, crate::lm::q8_gemm::SMEM)?;
            }
            Some(crate::lm::q8_gemm::Q8Gemm {
                stream_k: options.q8_gemm_stream_k,
                wgmma,
            })
        } else {
            None
        };
        // The 8-bit tensor-core decode's stages need more shared memory than sm_89 lets a block
        // have: there, 8-bit caches take the plain decode kernel.
        let lm_attention_mma8 = options.lm_attention_mma
            && arch >= FP8_MIN_ARCH
            && usize::try_from(optin).is_ok_and(|b| b >= crate::lm::attention::MMA8_SMEM);
        if lm_attention_mma8 {
            kernels.allow_dynamic_smem(
                Kernel::LmPagedAttentionMma8,
                crate::lm::attention::MMA8_SMEM,
            )?;
        }
        let fused_combine = if options.fused_combine {
            Some(crate::lm::attention::FusedCombine::new(&ctx)?)
        } else {
            None
        };
        let gemv_tma_grid = if options.gemv_tma && arch.0 >= crate::lm::gemv::GEMV_TMA_MIN_MAJOR {
            crate::lm::gemv::tma_grid(&kernels, sms.max(1) as usize)?
        } else {
            0
        };
        let blas = Blas::new(
            &ctx,
            stream.cu_stream(),
            options.precision,
            options.cublas_workspace,
        )?;
        let blas_lt = if options.gemm_epilogue {
            let (ws, ws_bytes) = blas.workspace();
            Some(BlasLt::new(
                stream.cu_stream(),
                options.precision,
                ws,
                ws_bytes,
            )?)
        } else {
            None
        };
        let name = ctx.name().unwrap_or_else(|_| "unknown".into());
        let mem = ctx.total_mem().unwrap_or(0) >> 20;
        let description = format!(
            "{name} (sm_{}{}, {sms} SMs, {mem} MiB), {}",
            arch.0,
            arch.1,
            options.precision.name()
        );
        let be = Self {
            ctx,
            stream,
            precision: options.precision,
            kernels,
            blas,
            blas_lt,
            max_blocks: (sms.max(1) as u32) * BLOCKS_PER_SM,
            sm_count: sms.max(1) as usize,
            arch,
            tap_split: options.conv_tap_split,
            conv_mma,
            fuse_res_block: options.fuse_res_block,
            conv_wide: options.conv_wide,
            phase_upsampling: options.phase_upsampling,
            conv_mma_max_out: options.conv_mma_max_out,
            attention_mma: options.attention_mma && arch.0 >= MMA_MIN_MAJOR,
            gemv_min_k: options.gemv_min_k,
            skinny_mma: options.skinny_mma && arch.0 >= MMA_MIN_MAJOR,
            skinny_persistent: options.skinny_persistent,
            // Without programmatic launch the kernel would sit between two products.
            l2_prefetch_bytes: if options.programmatic_launch && arch.0 >= PDL_MIN_MAJOR {
                options.l2_prefetch_bytes
            } else {
                0
            },
            l2_prefetch_launches: AtomicUsize::new(0),
            // The bulk L2 prefetch is an sm_90 instruction.
            next_prefetch_bytes: if arch.0 >= PDL_MIN_MAJOR {
                options.next_prefetch_bytes
            } else {
                0
            },
            next_prefetch_first_groups: options.next_prefetch_first_groups,
            successors: Default::default(),
            next_prefetch_launches: AtomicUsize::new(0),
            skinny_launches: AtomicUsize::new(0),
            skinny_persistent_launches: AtomicUsize::new(0),
            batch_invariant: options.batch_invariant,
            fused_norm_rotation: options.fused_norm_rotation,
            q8_fused_rotation: options.q8_fused_rotation && rotation_smem,
            q8_fused_rotation_launches: AtomicUsize::new(0),
            q8_gemm,
            q8_gemm_launches: AtomicUsize::new(0),
            lm_attention_mma: options.lm_attention_mma
                && options.precision == Precision::Bf16
                && arch.0 >= MMA_MIN_MAJOR,
            lm_attention_mma8,
            lm_attention_mma_launches: AtomicUsize::new(0),
            gemv_tma_grid,
            gemv_tma_launches: AtomicUsize::new(0),
            fused_combine,
            fused_combine_launches: AtomicUsize::new(0),
            fused_rope_kv: options.fused_rope_kv,
            fused_rope_kv_launches: AtomicUsize::new(0),
            mma_smem_limit,
            mma_launches: AtomicUsize::new(0),
            res_block_launches: AtomicUsize::new(0),
            out1_launches: AtomicUsize::new(0),
            wide_launches: AtomicUsize::new(0),
            attention_mma_launches: AtomicUsize::new(0),
            epilogue_launches: AtomicUsize::new(0),
            scratch: Mutex::new(Scratch::default()),
            graphs: Mutex::new(HashMap::new()),
            capturing: AtomicBool::new(false),
            registry: Registry::default(),
            profiling: AtomicBool::new(false),
            profile: Mutex::new(Vec::new()),
            warmup_runs: options.warmup_runs,
            host_snapshots: options.host_snapshots,
            description,
        };
        if let Some(fc) = &be.fused_combine {
            fc.zero(&be)?;
        }
        Ok(be)
    }

    /// Convolutions enqueued on the tensor-core path so far (a graph replay adds none): tells
    /// which path a shape took.
    pub fn tensor_core_convs(&self) -> usize {
        self.mma_launches.load(Ordering::Relaxed)
    }

    /// Residual blocks enqueued as one fused kernel so far (a graph replay adds none).
    pub fn fused_res_blocks(&self) -> usize {
        self.res_block_launches.load(Ordering::Relaxed)
    }

    /// Rotations enqueued with the attention's KV write in their kernel so far (a graph replay
    /// adds none).
    pub fn fused_rope_kv_writes(&self) -> usize {
        self.fused_rope_kv_launches.load(Ordering::Relaxed)
    }

    /// Decode attentions enqueued with the fused combine so far (a graph replay adds none).
    pub fn fused_combines(&self) -> usize {
        self.fused_combine_launches.load(Ordering::Relaxed)
    }

    /// The device's compute capability (major, minor).
    pub fn arch(&self) -> (i32, i32) {
        self.arch
    }

    /// Products enqueued on the bulk-copy GEMV so far (a graph replay adds none).
    pub fn bulk_copy_gemvs(&self) -> usize {
        self.gemv_tma_launches.load(Ordering::Relaxed)
    }

    /// Convolutions enqueued on the one-output kernel so far (a graph replay adds none).
    pub fn one_output_convs(&self) -> usize {
        self.out1_launches.load(Ordering::Relaxed)
    }

    /// Convolutions enqueued on the wide tensor-core kernel so far (a graph replay adds none).
    pub fn wide_convs(&self) -> usize {
        self.wide_launches.load(Ordering::Relaxed)
    }

    /// Convolution products enqueued with a bias or residual epilogue so far (a graph replay
    /// adds none).
    pub fn epilogue_gemms(&self) -> usize {
        self.epilogue_launches.load(Ordering::Relaxed)
    }

    /// Attention calls enqueued on the tensor-core kernel so far (a graph replay adds none).
    pub fn tensor_core_attentions(&self) -> usize {
        self.attention_mma_launches.load(Ordering::Relaxed)
    }

    /// LM decode attentions enqueued on the tensor-core kernel so far (a graph replay adds none).
    pub fn lm_tensor_core_attentions(&self) -> usize {
        self.lm_attention_mma_launches.load(Ordering::Relaxed)
    }

    /// LM products enqueued on the tensor-core skinny kernel so far (a graph replay adds none).
    pub fn skinny_products(&self) -> usize {
        self.skinny_launches.load(Ordering::Relaxed)
    }

    /// int8 products enqueued with their input rotation inside the skinny kernel
    /// ([`CudaOptions::q8_fused_rotation`]) so far.
    pub fn q8_fused_rotations(&self) -> usize {
        self.q8_fused_rotation_launches.load(Ordering::Relaxed)
    }

    /// L2 prefetches of a product's first weights enqueued so far
    /// ([`CudaOptions::l2_prefetch_bytes`]; a graph replay adds none).
    pub fn l2_prefetches(&self) -> usize {
        self.l2_prefetch_launches.load(Ordering::Relaxed)
    }

    /// Skinny products enqueued that asked L2 for their successor's weights
    /// ([`CudaOptions::next_prefetch_bytes`]; a graph replay adds none).
    pub fn next_prefetches(&self) -> usize {
        self.next_prefetch_launches.load(Ordering::Relaxed)
    }

    /// Weights with a successor ([`chorus_core::LmOps::sequence_weights`]; a freed weight leaves).
    pub fn sequenced_weights(&self) -> usize {
        lock(&self.successors).len()
    }

    /// Skinny products enqueued as a persistent grid of fewer blocks than tiles
    /// ([`CudaOptions::skinny_persistent`]) so far.
    pub fn skinny_persistent_products(&self) -> usize {
        self.skinny_persistent_launches.load(Ordering::Relaxed)
    }

    /// int8 products enqueued on the tensor-core GEMM so far (a graph replay adds none).
    pub fn q8_gemm_products(&self) -> usize {
        self.q8_gemm_launches.load(Ordering::Relaxed)
    }

    /// Bytes each LM product prefetches into L2 ahead of itself: [`CudaOptions::l2_prefetch_bytes`],
    /// or 0 where it cannot act (no programmatic launch).
    pub fn l2_prefetch_bytes(&self) -> usize {
        self.l2_prefetch_bytes
    }

    /// True when the int8 GEMM issues warpgroup wgmmas ([`CudaOptions::q8_gemm_wgmma`] on an
    /// sm_90 device).
    pub fn q8_gemm_wgmma(&self) -> bool {
        self.q8_gemm.as_ref().is_some_and(|g| g.wgmma)
    }

    pub(crate) fn describe(&self) -> &str {
        &self.description
    }

    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().or_cuda("cuCtxSetCurrent")
    }

    pub(crate) fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    pub(crate) fn sync(&self) -> Result<()> {
        self.stream.synchronize().or_cuda("cuStreamSynchronize")
    }

    /// Bytes per stored float element.
    pub(crate) fn esize(&self) -> usize {
        match self.precision {
            Precision::F32 => 4,
            Precision::Bf16 => 2,
        }
    }

    /// A grid-stride launch over `n` items; kernels index in 32 bits, so `n` must stay below 2^31.
    pub(crate) fn grid_for(&self, n: usize) -> Result<Launch> {
        if n > i32::MAX as usize {
            return Err(cuda_error(
                "launch",
                format!("{n} work items exceed the 32-bit index space of the kernels: use smaller buckets"),
            ));
        }
        let blocks = n.div_ceil(BLOCK as usize).min(self.max_blocks as usize) as u32;
        Ok(Launch {
            grid: blocks.max(1),
            block: BLOCK,
            smem: 0,
        })
    }

    pub(crate) fn launch(
        &self,
        kernel: Kernel,
        cfg: Launch,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        self.kernels.launch(kernel, cfg, self.cu_stream(), args)
    }

    /// A device region of at least `bytes`, valid until the next op.
    pub(crate) fn scratch(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        let mut s = lock(&self.scratch);
        if let Some(cur) = &s.current {
            if cur.bytes() >= bytes {
                return Ok(cur.ptr());
            }
        }
        if self.capturing.load(Ordering::Relaxed) {
            return Err(cuda_error(
                "scratch",
                format!("{bytes} bytes of scratch needed during capture but the warm-up runs did not size it"),
            ));
        }
        // A region no graph captured is freed (after the launches queued on it), not kept: a
        // warm-up that grows it op by op, bucket by bucket, would hold every size it passed.
        if !s.captured && s.current.is_some() {
            self.sync()?;
            s.current = None;
        }
        let fresh = DevMem::new(&self.ctx, bytes, None)?;
        let ptr = fresh.ptr();
        if let Some(old) = s.current.replace(fresh) {
            s.retired.push(old);
        }
        s.captured = false;
        Ok(ptr)
    }

    /// Allocates a buffer of `bytes`, registering it when a warm-up must preserve its contents.
    pub(crate) fn alloc(&self, bytes: usize, preserve: bool) -> Result<DevMem> {
        self.bind()?;
        Ok(
            DevMem::new(&self.ctx, bytes, preserve.then_some(&self.registry))?
                .leaving(&self.successors),
        )
    }

    /// Asynchronous byte memset on the stream.
    pub(crate) fn memset(&self, ptr: sys::CUdeviceptr, bytes: usize) -> Result<()> {
        // SAFETY: the caller passes a range inside a live allocation.
        check(
            unsafe { sys::cuMemsetD8Async(ptr, 0, bytes, self.cu_stream()) },
            "cuMemsetD8Async",
        )
    }

    /// Asynchronous 32-bit memset on the stream.
    pub(crate) fn memset32(&self, ptr: sys::CUdeviceptr, value: i32, count: usize) -> Result<()> {
        // SAFETY: the caller passes a range inside a live allocation.
        check(
            unsafe { sys::cuMemsetD32Async(ptr, value as u32, count, self.cu_stream()) },
            "cuMemsetD32Async",
        )
    }

    /// Asynchronous device-to-device copy on the stream.
    pub(crate) fn copy_dtod(
        &self,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the caller passes ranges inside live allocations.
        check(
            unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.cu_stream()) },
            "cuMemcpyDtoDAsync",
        )
    }

    /// Asynchronous host-to-device copy on the stream (`src` pinned, or synchronised by the caller).
    pub(crate) fn copy_htod(
        &self,
        dst: sys::CUdeviceptr,
        src: *const u8,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: `src` holds `bytes` bytes and stays alive until the stream passes this copy.
        check(
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst,
                    src as *const std::ffi::c_void,
                    bytes,
                    self.cu_stream(),
                )
            },
            "cuMemcpyHtoDAsync",
        )
    }

    /// Asynchronous device-to-host copy on the stream.
    pub(crate) fn copy_dtoh(
        &self,
        dst: *mut u8,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: `dst` holds `bytes` bytes and stays alive until the stream passes this copy.
        check(
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    dst as *mut std::ffi::c_void,
                    src,
                    bytes,
                    self.cu_stream(),
                )
            },
            "cuMemcpyDtoHAsync",
        )
    }

    /// Copies every registered buffer aside before warm-up runs: device to device, or to the
    /// host for a buffer whose copy no longer fits on the device (slot state sized to fill the
    /// GPU: thousands of streams' rings beside their codec state).
    fn snapshot(&self) -> Result<Vec<(sys::CUdeviceptr, Saved)>> {
        let entries: Vec<(sys::CUdeviceptr, usize)> =
            lock(&self.registry).iter().map(|(&p, &b)| (p, b)).collect();
        let mut saved = Vec::with_capacity(entries.len());
        for (ptr, bytes) in entries {
            let fits = !self.host_snapshots && self.free_bytes()? >= bytes + SNAPSHOT_HEADROOM;
            let on_device = fits
                .then(|| DevMem::new(&self.ctx, bytes, None).ok())
                .flatten();
            let copy = match on_device {
                Some(copy) => {
                    self.copy_dtod(copy.ptr(), ptr, bytes)?;
                    Saved::Device(copy)
                }
                None => {
                    let mut host = vec![0u8; bytes];
                    self.copy_dtoh(host.as_mut_ptr(), ptr, bytes)?;
                    // Pageable memory: the copy must be done before `host` may move.
                    self.sync()?;
                    Saved::Host(host)
                }
            };
            saved.push((ptr, copy));
        }
        Ok(saved)
    }

    /// Device memory not allocated yet.
    fn free_bytes(&self) -> Result<usize> {
        self.bind()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid out-pointers; the context is bound.
        check(
            unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
            "cuMemGetInfo",
        )?;
        Ok(free)
    }

    /// Writes a snapshot back, so that warm-up runs leave no trace in slot state.
    fn restore(&self, saved: Vec<(sys::CUdeviceptr, Saved)>) -> Result<()> {
        for (ptr, copy) in &saved {
            match copy {
                Saved::Device(copy) => self.copy_dtod(*ptr, copy.ptr(), copy.bytes())?,
                Saved::Host(host) => self.copy_htod(*ptr, host.as_ptr(), host.len())?,
            }
        }
        // Host copies are read until the stream passes them: `saved` lives past the sync.
        self.sync()
    }

    /// Warm-up runs, capture and first replay of a new program.
    pub(crate) fn capture(
        &self,
        key: usize,
        program: &mut dyn FnMut(&Self) -> Result<()>,
    ) -> Result<()> {
        let saved = self.snapshot()?;
        let mut warm = Ok(());
        for _ in 0..self.warmup_runs {
            warm = program(self);
            if warm.is_err() {
                break;
            }
        }
        // Roll back even after a failed warm-up, so that an error leaves slot state untouched.
        let synced = self.sync();
        self.restore(saved)?;
        warm?;
        synced?;
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .or_cuda("cuStreamBeginCapture")?;
        self.capturing.store(true, Ordering::Relaxed);
        lock(&self.scratch).captured = true;
        let ran = program(self);
        self.capturing.store(false, Ordering::Relaxed);
        // The capture must end even when the program failed, or the stream stays unusable.
        let finished = crate::graph::finish_capture(&self.stream);
        ran?;
        let (graph, nodes) = finished?;
        graph.upload().or_cuda("cuGraphUpload")?;
        graph.launch().or_cuda("cuGraphLaunch")?;
        self.sync()?;
        lock(&self.graphs).insert(key, Captured { graph, nodes });
        Ok(())
    }

    /// Queues a replay of the graph of `key`, if captured, without waiting; `false` when there is none.
    pub(crate) fn replay_async(&self, key: usize) -> Result<bool> {
        let graphs = lock(&self.graphs);
        let Some(c) = graphs.get(&key) else {
            return Ok(false);
        };
        c.graph.launch().or_cuda("cuGraphLaunch")?;
        Ok(true)
    }

    /// Replays the graph of `key`, if captured, and waits for it; `false` when there is none.
    pub(crate) fn replay(&self, key: usize) -> Result<bool> {
        let graphs = lock(&self.graphs);
        let Some(c) = graphs.get(&key) else {
            return Ok(false);
        };
        c.graph.launch().or_cuda("cuGraphLaunch")?;
        drop(graphs);
        self.sync()?;
        Ok(true)
    }

    /// Replays the already captured program of `key` `iters` times back to back and returns each
    /// replay's device time in milliseconds (CUDA events). Slot state advances as in real steps.
    pub fn time_replay(&self, key: usize, iters: usize) -> Result<Vec<f32>> {
        self.bind()?;
        let graphs = lock(&self.graphs);
        let c = graphs
            .get(&key)
            .ok_or_else(|| cuda_error("time_replay", format!("no graph captured for key {key}")))?;
        crate::graph::time_replays(&c.graph, &self.stream, iters)
    }

    /// Nodes of the captured graph of `key`, if any (kernels, copies and memsets).
    pub fn graph_nodes(&self, key: usize) -> Option<usize> {
        lock(&self.graphs).get(&key).map(|c| c.nodes)
    }

    /// Bytes of device memory in use by the scratch buffers.
    pub fn scratch_bytes(&self) -> usize {
        let s = lock(&self.scratch);
        s.current.as_ref().map_or(0, DevMem::bytes)
            + s.retired.iter().map(DevMem::bytes).sum::<usize>()
    }

    /// Scratch regions held: the current one and those replaced while a graph still used them.
    pub fn scratch_regions(&self) -> usize {
        let s = lock(&self.scratch);
        usize::from(s.current.is_some()) + s.retired.len()
    }

    /// Allocates a staging area.
    pub(crate) fn new_staging(&self, dims: StagingDims) -> Result<CudaStaging> {
        self.bind()?;
        let i32s = std::mem::size_of::<i32>();
        let f32s = std::mem::size_of::<f32>();
        let latent_bytes = dims.rows * dims.latent_dim * f32s;
        let pcm_bytes = dims.rows * dims.samples * f32s;
        let convert = self.precision == Precision::Bf16;
        Ok(CudaStaging {
            dims,
            slots: Pinned::new(&self.ctx, dims.rows * i32s)?,
            codes: Pinned::new(&self.ctx, dims.rows * dims.codebooks * i32s)?,
            latents: Pinned::new(&self.ctx, latent_bytes)?,
            pcm: Pinned::new(&self.ctx, pcm_bytes)?,
            dev_latents: if convert {
                Some(DevMem::new(&self.ctx, latent_bytes, None)?)
            } else {
                None
            },
            dev_pcm: if convert {
                Some(DevMem::new(&self.ctx, pcm_bytes, None)?)
            } else {
                None
            },
        })
    }

    /// Storage size of a role: f32 tables, the precision's type for everything else.
    pub(crate) fn role_bytes(&self, role: BufRole) -> usize {
        match role {
            BufRole::Table => 4,
            BufRole::Pool8 => 1,
            _ => self.esize(),
        }
    }

    /// True when the device converts to and from E4M3 (sm_89 and later).
    pub(crate) fn has_fp8(&self) -> bool {
        self.arch >= FP8_MIN_ARCH
    }
}
