//! Kernel sources, their NVRTC compilation (cached on disk), the loaded module, and the one
//! launch helper every kernel goes through.

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};

use chorus_core::{Precision, Result};
use cudarc::driver::sys;
use cudarc::nvrtc::sys as nvrtc;

use crate::error::{check, cuda_error, OrCuda};

/// The translation unit, in order: shared definitions first.
const SOURCES: &[(&str, &str)] = &[
    ("prelude.cuh", include_str!("../kernels/prelude.cuh")),
    ("elementwise.cu", include_str!("../kernels/elementwise.cu")),
    ("conv.cu", include_str!("../kernels/conv.cu")),
    ("convtr.cu", include_str!("../kernels/convtr.cu")),
    ("conv_mma.cu", include_str!("../kernels/conv_mma.cu")),
    ("conv_wide.cu", include_str!("../kernels/conv_wide.cu")),
    ("res_block.cu", include_str!("../kernels/res_block.cu")),
    ("conv_out1.cu", include_str!("../kernels/conv_out1.cu")),
    ("attention.cu", include_str!("../kernels/attention.cu")),
    (
        "attention_mma.cu",
        include_str!("../kernels/attention_mma.cu"),
    ),
    ("encode.cu", include_str!("../kernels/encode.cu")),
    ("lm_rows.cu", include_str!("../kernels/lm_rows.cu")),
    (
        "lm_attention.cu",
        include_str!("../kernels/lm_attention.cu"),
    ),
    (
        "lm_attention_mma.cu",
        include_str!("../kernels/lm_attention_mma.cu"),
    ),
    ("lm_draw.cu", include_str!("../kernels/lm_draw.cu")),
    ("lm_gemv.cu", include_str!("../kernels/lm_gemv.cu")),
    ("lm_q8.cu", include_str!("../kernels/lm_q8.cu")),
    ("lm_skinny.cu", include_str!("../kernels/lm_skinny.cu")),
    ("lm_q8_gemm.cu", include_str!("../kernels/lm_q8_gemm.cu")),
    ("lm_q8_wgmma.cu", include_str!("../kernels/lm_q8_wgmma.cu")),
    ("lm_prefetch.cu", include_str!("../kernels/lm_prefetch.cu")),
];

/// Environment variable naming an extra include folder for NVRTC (CUDA headers).
pub const INCLUDE_ENV: &str = "CHORUS_CUDA_INCLUDE";
/// Include folder used when the variable is unset and the folder exists.
const DEFAULT_INCLUDE: &str = "/usr/local/cuda/include";

/// Declares every kernel once: the enum, the load order and the symbol come from one table, so
/// they cannot drift apart.
macro_rules! kernel_table {
    ($($variant:ident => $symbol:literal,)*) => {
        /// Every kernel of the module.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Kernel {
            $($variant,)*
        }

        impl Kernel {
            /// Every kernel, in declaration order (the index of a variant is its position).
            const ALL: &'static [Kernel] = &[$(Kernel::$variant,)*];

            fn symbol(self) -> &'static str {
                match self {
                    $(Kernel::$variant => $symbol,)*
                }
            }
        }
    };
}

kernel_table! {
    CastF32ToT => "cast_f32_to_t",
    CastTToF32 => "cast_t_to_f32",
    Gelu => "gelu",
    Elu => "elu",
    BiasResidual => "bias_residual",
    AdvanceTokens => "advance_tokens",
    ResetRows => "reset_rows",
    ResetInts => "reset_ints",
    EmbedCodes => "embed_codes",
    LayerNorm => "layer_norm",
    ConvGather => "conv_gather",
    ConvState => "conv_state",
    ConvDirect => "conv_direct",
    ConvOut1 => "conv_out1",
    ConvTrOverlap => "convtr_overlap",
    AttentionD16 => "attention_d16",
    AttentionD32 => "attention_d32",
    AttentionD64 => "attention_d64",
    AttentionD128 => "attention_d128",
    AttentionMmaD64 => "attention_mma_d64",
    ConvConcat => "conv_concat",
    ConvShiftAdd => "conv_shift_add",
    // Tensor-core convolution (kernels/conv_mma.cu).
    ConvMmaN8 => "conv_mma_n8",
    ConvMmaN16 => "conv_mma_n16",
    ConvMmaN32 => "conv_mma_n32",
    ConvMmaN64 => "conv_mma_n64",
    ConvWide => "conv_wide",
    // SEANet residual block (kernels/res_block.cu).
    ResBlockC64 => "res_block_c64",
    ResBlockC128 => "res_block_c128",
    // Encoder ops (kernels/encode.cu).
    ReplicateHistory => "replicate_history",
    RvqEncode => "rvq_encode",
    RvqPrepare => "rvq_prepare",
    RvqSearch => "rvq_search",
    RvqPick => "rvq_pick",
    // Language-model ops (kernels/lm_rows.cu).
    LmGatherRows => "lm_gather_rows",
    LmScatterRows => "lm_scatter_rows",
    LmCopyRows => "lm_copy_rows",
    LmFeedbackEmbed => "lm_feedback_embed",
    LmEmbedSum => "lm_embed_sum",
    LmRmsNorm => "lm_rms_norm",
    LmAddRow => "lm_add_row",
    LmSwiglu => "lm_swiglu",
    LmQkNormRope => "lm_qk_norm_rope",
    // Paged attention (kernels/lm_attention.cu).
    LmPagedKvWrite => "lm_paged_kv_write",
    LmPagedKvWrite8 => "lm_paged_kv_write8",
    LmQkNormRopeKv => "lm_qk_norm_rope_kv",
    LmQkNormRopeKv8 => "lm_qk_norm_rope_kv8",
    LmPagedAttention => "lm_paged_attention",
    LmPagedAttention8 => "lm_paged_attention8",
    LmPagedAttentionMma => "lm_paged_attention_mma",
    LmPagedAttentionMma8 => "lm_paged_attention_mma8",
    LmPagedCombine => "lm_paged_combine",
    LmPagedPrefill => "lm_paged_prefill",
    LmPagedPrefill8 => "lm_paged_prefill8",
    // CFG, top-k and the draw (kernels/lm_draw.cu).
    LmCfgDraw => "lm_cfg_draw",
    // Skinny products (kernels/lm_gemv.cu).
    LmGemv => "lm_gemv",
    LmGemvTma => "lm_gemv_tma",
    GemvNorm => "gemv_norm",
    // int8 ConvRot weights (kernels/lm_q8.cu).
    LmGemvQ8 => "lm_gemv_q8",
    LmDequantQ8 => "lm_dequant_q8",
    LmHadamard => "lm_hadamard",
    LmNormHadamard => "lm_norm_hadamard",
    // Tensor-core skinny products (kernels/lm_skinny.cu), by activation tiles.
    LmSkinnyN8 => "lm_skinny_n8",
    LmSkinnyN16 => "lm_skinny_n16",
    LmSkinnyN32 => "lm_skinny_n32",
    LmSkinnyN8M2 => "lm_skinny_n8_m2",
    LmSkinnyN16M2 => "lm_skinny_n16_m2",
    LmSkinnyN32M2 => "lm_skinny_n32_m2",
    LmSkinnyN64M2 => "lm_skinny_n64_m2",
    LmSkinnyQ8N8 => "lm_skinny_q8_n8",
    LmSkinnyQ8N16 => "lm_skinny_q8_n16",
    LmSkinnyQ8N32 => "lm_skinny_q8_n32",
    LmSkinnyQ8N8M2 => "lm_skinny_q8_n8_m2",
    LmSkinnyQ8N16M2 => "lm_skinny_q8_n16_m2",
    LmSkinnyQ8N32M2 => "lm_skinny_q8_n32_m2",
    LmSkinnyQ8N64M2 => "lm_skinny_q8_n64_m2",
    LmSkinnyQ8RN8 => "lm_skinny_q8r_n8",
    LmSkinnyQ8RN8M2 => "lm_skinny_q8r_n8_m2",
    // int8 products of 65 to 256 rows (kernels/lm_q8_gemm.cu).
    LmQ8Gemm => "lm_q8_gemm",
    LmQ8GemmSum => "lm_q8_gemm_sum",
    // The same on sm_90a's warpgroup tensor cores (kernels/lm_q8_wgmma.cu).
    LmQ8Wgmma => "lm_q8_wgmma",
    // A product's first weights into L2 during the kernels before it (kernels/lm_prefetch.cu).
    LmL2Prefetch => "lm_l2_prefetch",
}

/// Grid and block of one launch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Launch {
    pub grid: u32,
    pub block: u32,
    /// Dynamic shared memory in bytes.
    pub smem: u32,
}

/// The whole kernel source, as one translation unit.
pub fn kernel_source() -> String {
    SOURCES
        .iter()
        .map(|(_, s)| *s)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The include folder handed to NVRTC, if any.
fn include_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(INCLUDE_ENV) {
        return Some(PathBuf::from(dir));
    }
    let default = Path::new(DEFAULT_INCLUDE);
    default.is_dir().then(|| default.to_path_buf())
}

/// The architecture compiled for: sm_90 as sm_90a, whose arch-specific instructions (wgmma) the
/// int8 GEMM's Hopper variant uses; its CUBIN runs on sm_90 devices only, which is all it is
/// loaded on.
fn arch_name(arch: (i32, i32)) -> String {
    let specific = if arch == WGMMA_ARCH { "a" } else { "" };
    format!("sm_{}{}{specific}", arch.0, arch.1)
}

/// The one architecture with wgmma (Hopper, sm_90a).
pub(crate) const WGMMA_ARCH: (i32, i32) = (9, 0);

fn options(precision: Precision, arch: (i32, i32)) -> Vec<String> {
    let mut opts = vec![
        format!("--gpu-architecture={}", arch_name(arch)),
        "--std=c++17".to_string(),
        format!("-DCHORUS_BF16={}", i32::from(precision == Precision::Bf16)),
    ];
    if let Some(dir) = include_dir() {
        opts.push(format!("-I{}", dir.display()));
    }
    opts
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both out-pointers are valid.
    unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .or_cuda("nvrtcVersion")?;
    Ok((major, minor))
}

/// Compiles the kernels for `sm_{arch}` and returns the CUBIN image.
pub fn compile(precision: Precision, arch: (i32, i32)) -> Result<Vec<u8>> {
    const OP: &str = "nvrtc compile";
    let source = CString::new(kernel_source()).map_err(|e| cuda_error(OP, e.to_string()))?;
    let name = c"chorus_kernels.cu";
    let prog = cudarc::nvrtc::result::create_program(&source, Some(name)).or_cuda(OP)?;
    let opts = options(precision, arch);
    // SAFETY: `prog` was just created and is destroyed once below.
    let compiled = unsafe { cudarc::nvrtc::result::compile_program(prog, &opts) };
    let result = match compiled {
        Ok(()) => cubin(prog),
        Err(e) => {
            // SAFETY: `prog` is alive.
            let log = unsafe { cudarc::nvrtc::result::get_program_log(prog) }
                .map(|l| {
                    l.iter()
                        .take_while(|&&c| c != 0)
                        .map(|&c| c as u8 as char)
                        .collect::<String>()
                })
                .unwrap_or_default();
            Err(cuda_error(
                OP,
                format!("{e:?} for {} with {opts:?}:\n{log}", arch_name(arch)),
            ))
        }
    };
    // SAFETY: `prog` is alive and destroyed once.
    let _ = unsafe { cudarc::nvrtc::result::destroy_program(prog) };
    result
}

fn cubin(prog: nvrtc::nvrtcProgram) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: `prog` is a compiled program; the out-pointer is valid.
    unsafe { nvrtc::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .or_cuda("nvrtcGetCUBINSize")?;
    let mut image = vec![0u8; size];
    // SAFETY: `image` holds `size` bytes as NVRTC asked.
    unsafe { nvrtc::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut std::ffi::c_char) }
        .result()
        .or_cuda("nvrtcGetCUBIN")?;
    Ok(image)
}

/// 64-bit FNV-1a: a stable hash for cache file names.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
        h ^= 0xff;
        h = h.wrapping_mul(PRIME);
    }
    h
}

/// Default cache folder: `$HOME/.cache/chorus/kernels`.
fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/chorus/kernels"))
}

/// Returns the CUBIN for this precision and architecture, from the cache when it holds one for the
/// same source, options and NVRTC version, else compiling it and storing it.
fn cached_cubin(
    precision: Precision,
    arch: (i32, i32),
    cache_dir: Option<&Path>,
) -> Result<Vec<u8>> {
    let (major, minor) = nvrtc_version()?;
    let opts = options(precision, arch).join(" ");
    let source = kernel_source();
    let version = format!("nvrtc {major}.{minor}");
    let key = fnv1a(&[source.as_bytes(), opts.as_bytes(), version.as_bytes()]);
    let dir = cache_dir.map(Path::to_path_buf).or_else(default_cache_dir);
    let file = dir.as_ref().map(|d| {
        d.join(format!(
            "chorus-sm{}{}-{}-{key:016x}.cubin",
            arch.0,
            arch.1,
            precision.name()
        ))
    });
    if let Some(f) = &file {
        if let Ok(bytes) = std::fs::read(f) {
            if !bytes.is_empty() {
                return Ok(bytes);
            }
        }
    }
    let image = compile(precision, arch)?;
    if let (Some(d), Some(f)) = (&dir, &file) {
        // The cache only saves start-up time: a folder that cannot be written is not an error.
        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::create_dir_all(d).is_ok() && std::fs::write(&tmp, &image).is_ok() {
            let _ = std::fs::rename(&tmp, f);
        }
    }
    Ok(image)
}

/// Compiles every kernel in both precisions for `sm_{arch}` (a check that needs NVRTC but no device).
pub fn compile_check(arch: (i32, i32)) -> Result<usize> {
    let mut bytes = 0;
    for precision in [Precision::F32, Precision::Bf16] {
        bytes += compile(precision, arch)?.len();
    }
    Ok(bytes)
}

/// The loaded module and its functions.
pub(crate) struct Kernels {
    module: sys::CUmodule,
    functions: Vec<sys::CUfunction>,
    /// Launch with programmatic stream serialization (every kernel calls `pdl_enter` first).
    programmatic: bool,
}

impl Kernels {
    /// Compiles (or reads from the cache) and loads the module in the current context.
    pub(crate) fn load(
        precision: Precision,
        arch: (i32, i32),
        cache_dir: Option<&Path>,
    ) -> Result<Self> {
        let image = cached_cubin(precision, arch, cache_dir)?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is a CUBIN produced by NVRTC for this device's architecture.
        check(
            unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr() as *const c_void) },
            "cuModuleLoadData",
        )?;
        let mut functions = Vec::with_capacity(Kernel::ALL.len());
        for k in Kernel::ALL {
            let name = CString::new(k.symbol())
                .map_err(|e| cuda_error("cuModuleGetFunction", e.to_string()))?;
            let mut f: sys::CUfunction = std::ptr::null_mut();
            // SAFETY: `module` is loaded; `name` is NUL-terminated.
            check(
                unsafe { sys::cuModuleGetFunction(&mut f, module, name.as_ptr()) },
                "cuModuleGetFunction",
            )
            .map_err(|e| cuda_error("cuModuleGetFunction", format!("`{}`: {e}", k.symbol())))?;
            functions.push(f);
        }
        Ok(Self {
            module,
            functions,
            programmatic: false,
        })
    }

    /// Lets `kernel` take up to `bytes` of dynamic shared memory (past the default 48 KB).
    pub(crate) fn allow_dynamic_smem(&self, kernel: Kernel, bytes: usize) -> Result<()> {
        let bytes = i32::try_from(bytes)
            .map_err(|_| cuda_error("cuFuncSetAttribute", format!("{bytes} bytes")))?;
        // SAFETY: the function belongs to the loaded module; the attribute takes a byte count.
        check(
            unsafe {
                sys::cuFuncSetAttribute(
                    self.functions[kernel as usize],
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes,
                )
            },
            "cuFuncSetAttribute",
        )
        .map_err(|e| cuda_error("cuFuncSetAttribute", format!("`{}`: {e}", kernel.symbol())))
    }

    /// Blocks of `kernel` that one multiprocessor holds at once with `launch`'s block and
    /// shared memory (registers included), at least 1: a persistent grid is sized by it, since
    /// blocks past what is resident run as a second wave.
    pub(crate) fn resident_blocks(&self, kernel: Kernel, launch: &Launch) -> Result<usize> {
        let mut n: std::ffi::c_int = 0;
        let block = std::ffi::c_int::try_from(launch.block)
            .map_err(|_| cuda_error("cuOccupancyMaxActiveBlocksPerMultiprocessor", "block size"))?;
        // SAFETY: the function belongs to the loaded module and `n` outlives the call.
        check(
            unsafe {
                sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                    &mut n,
                    self.functions[kernel as usize],
                    block,
                    launch.smem as usize,
                )
            },
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
        .map_err(|e| {
            cuda_error(
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                format!("`{}`: {e}", kernel.symbol()),
            )
        })?;
        Ok(usize::try_from(n).unwrap_or(0).max(1))
    }

    /// Launches `kernel` on `stream`. `args` points at each kernel parameter, in order, each of
    /// exactly the kernel's parameter type.
    pub(crate) fn launch(
        &self,
        kernel: Kernel,
        cfg: Launch,
        stream: sys::CUstream,
        args: &mut [*mut c_void],
    ) -> Result<()> {
        // `functions` follows `Kernel::ALL`, which the table builds in declaration order.
        let f = self.functions[kernel as usize];
        // SAFETY: a plain C union of attribute values; all-zero is a valid value of each member.
        let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid.max(1),
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: cfg.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: cfg.smem,
            hStream: stream,
            attrs: &mut attr,
            numAttrs: u32::from(self.programmatic),
        };
        // SAFETY: `f` belongs to the loaded module; the caller passes one pointer per parameter of
        // the matching type, alive for the duration of this call (the driver copies the values);
        // `config` and `attr` outlive the call. Every kernel begins with `pdl_enter`, which makes
        // the programmatic launch wait for its predecessor's writes.
        let code =
            unsafe { sys::cuLaunchKernelEx(&config, f, args.as_mut_ptr(), std::ptr::null_mut()) };
        check(code, kernel.symbol())
    }

    /// Turns programmatic dependent launch on or off for every later launch.
    pub(crate) fn set_programmatic(&mut self, on: bool) {
        self.programmatic = on;
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: the module was loaded once and is unloaded once.
        let _ = unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// Builds the argument array of a launch from references to the parameter values.
macro_rules! kargs {
    ($($a:expr),* $(,)?) => {
        [$(($a) as *const _ as *mut ::std::ffi::c_void),*]
    };
}
pub(crate) use kargs;
