//! Skinny LM products on the tensor cores (kernels/lm_skinny.cu): [`LmOps::fused_linear`] for at
//! most [`SKINNY_MAX_ROWS`] rows in bf16, dense or int8 weights, the input's RMSNorm in the
//! product's prologue and the residual add or SwiGLU in its epilogue. int8 products take it by
//! default, dense ones in the batch-invariant mode, which also takes more rows in groups of
//! [`SKINNY_MAX_ROWS`]; the rest (dense by default, more rows, f32 storage, `k` not a multiple of
//! its chunks) run the ops apart ([`fused_linear_apart`]).
//!
//! Every output is summed in one order fixed by `k` alone, so a row's bits do not depend on the
//! other rows of the call (the batch invariance of `docs/protocol.md`).
//!
//! [`LmOps::fused_linear`]: chorus_core::LmOps::fused_linear

use std::sync::atomic::Ordering;

use chorus_core::lm_ops::{
    fused_linear_apart, Epilogue, FusedLinearArgs, HadamardArgs, LinearWeight,
};
use chorus_core::{Precision, Result};

use super::next::SkNext;
use super::rows::rms_norm_rows;
use super::{check_len, t_ptr};
use crate::backend::{CudaBackend, CudaBuf};
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};

/// Most activation rows the skinny kernel takes (eight tiles of eight).
pub const SKINNY_MAX_ROWS: usize = 64;
/// Warps per block: each sums one eighth of `k` (mirrors `SK_WARPS`).
const SKINNY_WARPS: usize = 8;
/// Columns per 64-byte weight chunk: bf16 and int8.
const CHUNK_DENSE: usize = 32;
const CHUNK_Q8: usize = 64;
/// Most rows, largest k slice of a warp and the group of the skinny kernel's own input rotation
/// (`SK_ROT_ROWS`, `SK_ROT_MAX_SLICE`, `SK_ROT_GROUP`).
const ROT_ROWS: usize = 8;
const ROT_MAX_SLICE: usize = 512;
const ROT_GROUP: usize = 256;
/// `epi` codes of the kernel (`SK_STORE`, `SK_ACC`, `SK_SWIGLU`).
pub(super) fn epi_code(e: Epilogue) -> i32 {
    match e {
        Epilogue::Store => 0,
        Epilogue::Accumulate => 1,
        Epilogue::Swiglu => 2,
    }
}

/// The entry point of `q8` weights, `tiles` activation tiles and `mt` weight tiles per block
/// (64 rows take two); `rot`: an int8 one that rotates its input itself (one activation tile).
fn kernel(q8: bool, tiles: usize, mt: usize, rot: bool) -> Kernel {
    if rot {
        return if mt == 1 {
            Kernel::LmSkinnyQ8RN8
        } else {
            Kernel::LmSkinnyQ8RN8M2
        };
    }
    match (q8, tiles, mt) {
        (false, 1, 1) => Kernel::LmSkinnyN8,
        (false, 2, 1) => Kernel::LmSkinnyN16,
        (false, 4, 1) => Kernel::LmSkinnyN32,
        (false, 1, _) => Kernel::LmSkinnyN8M2,
        (false, 2, _) => Kernel::LmSkinnyN16M2,
        (false, 4, _) => Kernel::LmSkinnyN32M2,
        (false, _, _) => Kernel::LmSkinnyN64M2,
        (true, 1, 1) => Kernel::LmSkinnyQ8N8,
        (true, 2, 1) => Kernel::LmSkinnyQ8N16,
        (true, 4, 1) => Kernel::LmSkinnyQ8N32,
        (true, 1, _) => Kernel::LmSkinnyQ8N8M2,
        (true, 2, _) => Kernel::LmSkinnyQ8N16M2,
        (true, 4, _) => Kernel::LmSkinnyQ8N32M2,
        (true, _, _) => Kernel::LmSkinnyQ8N64M2,
    }
}

impl CudaBackend {
    /// True when the skinny kernel takes this product.
    fn skinny_fits(&self, a: &FusedLinearArgs<'_, Self>) -> bool {
        let q8 = matches!(a.w, LinearWeight::Q8 { .. });
        let chunk = if q8 { CHUNK_Q8 } else { CHUNK_DENSE };
        self.skinny_mma
            && self.precision == Precision::Bf16
            && ((1..=SKINNY_MAX_ROWS).contains(&a.n) || (self.batch_invariant && a.n > 0))
            && a.k.is_multiple_of(SKINNY_WARPS * chunk)
            && a.m >= 1
            && (a.epilogue != Epilogue::Swiglu || a.m.is_multiple_of(2))
            && a.m * a.k <= i32::MAX as usize
            // Dense bf16 products keep the GEMV kernel and cuBLAS unless every row must be
            // summed in one order: those are faster from 4 rows up (docs/PERFORMANCE.md).
            && (q8 || self.batch_invariant)
    }
}

pub(super) fn fused_linear(be: &CudaBackend, a: FusedLinearArgs<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "fused_linear";
    let (n, k, m) = (a.n, a.k, a.m);
    check_len(OP, "x", a.x.len, n * k)?;
    let out_cols = if a.epilogue == Epilogue::Swiglu {
        m / 2
    } else {
        m
    };
    check_len(OP, "out", a.out.len, n * out_cols)?;
    if let Some(norm) = &a.norm {
        check_len(OP, "norm.weight", norm.weight.len, k)?;
    }
    if n == 0 || m == 0 {
        return Ok(());
    }
    if be.gemv_tma_fused_fits(&a) {
        return be.gemv_tma_fused(a);
    }
    let gemm = matches!(a.w, LinearWeight::Q8 { .. })
        && be.precision == Precision::Bf16
        && super::q8_gemm::fits(be, n, k, m, a.epilogue);
    let skinny = gemm || be.skinny_fits(&a);
    // The products on this backend's own kernels (their predecessors let them launch early).
    let (w_ptr, row_bytes) = match &a.w {
        LinearWeight::Dense(w) => (w.mem.ptr(), k * be.esize()),
        LinearWeight::Q8 { weight, .. } => (weight.q.ptr(), k),
    };
    let dense_gemv = matches!(a.w, LinearWeight::Dense(_))
        && (1..=super::gemv::GEMV_MAX_ROWS).contains(&n)
        && k >= be.gemv_min_k;
    if skinny || dense_gemv {
        be.prefetch_weights(w_ptr, m, row_bytes, a.epilogue == Epilogue::Swiglu)?;
    }
    if !skinny {
        return apart(be, a);
    }
    let _timer = be.op_timer(OP);
    // The int8 GEMM takes no successor prefetch.
    let next = if gemm {
        SkNext::NONE
    } else {
        be.next_of(w_ptr, n)
    };
    let FusedLinearArgs {
        x,
        norm,
        w,
        out,
        scratch,
        epilogue,
        ..
    } = a;
    let out = t_ptr(be, OP, "out", out)?;
    let shape = (n, k, m, epilogue);
    // The norm for the kernels that apply it themselves (0: none).
    let gamma = norm
        .as_ref()
        .map(|nm| t_ptr(be, OP, "norm.weight", nm.weight))
        .transpose()?
        .unwrap_or(0);
    let eps = norm.as_ref().map_or(0.0, |nm| nm.eps);
    match w {
        LinearWeight::Dense(w) => {
            check_len(OP, "w", w.len, m * k)?;
            let p = Skinny {
                x: t_ptr(be, OP, "x", x)?,
                w: t_ptr(be, OP, "w", w)?,
                scale: 0,
                gamma,
                out,
                eps,
                q8: false,
                rot: false,
                next,
            };
            launch(be, p, shape)
        }
        LinearWeight::Q8 { weight, group } => {
            if weight.rows != m || weight.cols != k {
                return Err(cuda_error(
                    OP,
                    format!(
                        "`w` is [{}, {}] but the product needs [{m}, {k}]",
                        weight.rows, weight.cols
                    ),
                ));
            }
            if !gemm && rot_fits(be, n, k, group) {
                let p = Skinny {
                    x: t_ptr(be, OP, "x", x)?,
                    w: weight.q.ptr(),
                    scale: weight.scales.ptr(),
                    gamma,
                    out,
                    eps,
                    q8: true,
                    rot: true,
                    next,
                };
                be.q8_fused_rotation_launches
                    .fetch_add(1, Ordering::Relaxed);
                return launch(be, p, shape);
            }
            // The int8 input is normed and rotated by one kernel (or two, for A/B) before the
            // product, which takes its epilogue; the rotation stores f16 for the f16 MMA.
            let input: &CudaBuf = match &norm {
                Some(nm) if !be.fused_norm_rotation => {
                    rms_norm_rows(be, x, nm.weight, nm.eps, scratch.normed, (n, k))?;
                    scratch.normed
                }
                _ => x,
            };
            let rot = HadamardArgs {
                x: input,
                out: &mut *scratch.rot,
                n,
                dim: k,
                group,
            };
            match norm {
                Some(nm) if be.fused_norm_rotation => {
                    super::q8::norm_hadamard_f16(be, rot, nm.weight, nm.eps)?
                }
                _ => super::q8::hadamard_f16(be, rot)?,
            }
            let rotated = t_ptr(be, OP, "scratch.rot", scratch.rot)?;
            if gemm {
                return super::q8_gemm::launch(
                    be,
                    super::q8_gemm::Q8GemmArgs {
                        x: rotated,
                        w: weight.q.ptr(),
                        scale: weight.scales.ptr(),
                        out,
                        n,
                        k,
                        m,
                        epilogue,
                    },
                );
            }
            let p = Skinny {
                x: rotated,
                w: weight.q.ptr(),
                scale: weight.scales.ptr(),
                gamma: 0,
                out,
                eps: 0.0,
                q8: true,
                rot: false,
                next,
            };
            launch(be, p, shape)
        }
    }
}

/// Device pointers of one launch (0: absent).
#[derive(Clone, Copy)]
struct Skinny {
    x: u64,
    w: u64,
    scale: u64,
    gamma: u64,
    out: u64,
    eps: f32,
    q8: bool,
    /// The kernel rotates (and norms) the raw input itself ([`rot_fits`]).
    rot: bool,
    /// The next product's weights to ask L2 for ([`CudaBackend::next_of`]).
    next: SkNext,
}

/// Launches the product in groups of at most [`SKINNY_MAX_ROWS`] rows (more than one group only
/// in the batch-invariant mode): a row's sums are fixed by `k` alone, whatever group holds it.
fn launch(
    be: &CudaBackend,
    p: Skinny,
    (n, k, m, epilogue): (usize, usize, usize, Epilogue),
) -> Result<()> {
    let cols = if epilogue == Epilogue::Swiglu {
        m / 2
    } else {
        m
    };
    let esize = be.esize() as u64;
    for r0 in (0..n).step_by(SKINNY_MAX_ROWS) {
        let rows = (n - r0).min(SKINNY_MAX_ROWS);
        // Only the last group's blocks end the product.
        let last = r0 + SKINNY_MAX_ROWS >= n;
        let group = Skinny {
            x: p.x + (r0 * k) as u64 * esize,
            out: p.out + (r0 * cols) as u64 * esize,
            next: if last { p.next } else { SkNext::NONE },
            ..p
        };
        launch_rows(be, group, (rows, k, m, epilogue))?;
    }
    Ok(())
}

fn launch_rows(
    be: &CudaBackend,
    p: Skinny,
    (n, k, m, epilogue): (usize, usize, usize, Epilogue),
) -> Result<()> {
    let tiles = n.div_ceil(8).next_power_of_two();
    let swiglu = epilogue == Epilogue::Swiglu;
    let cols = if swiglu { m / 2 } else { m };
    let per_tile = if swiglu { 8 } else { 16 };
    let mt = weight_tiles(tiles, cols.div_ceil(2 * per_tile), be.sm_count);
    let kernel = kernel(p.q8, tiles, mt, p.rot);
    let weight_tiles = cols.div_ceil(per_tile * mt);
    let smem = smem_bytes(tiles, mt) + if p.rot { rot_smem_bytes(k) } else { 0 };
    let mut cfg = Launch {
        grid: weight_tiles as u32,
        block: (32 * SKINNY_WARPS) as u32,
        smem: smem as u32,
    };
    if be.skinny_persistent {
        // Blocks past the resident ones would only wait for a slot: they take tiles in turn.
        let resident = be.kernels.resident_blocks(kernel, &cfg)? * be.sm_count;
        if resident < weight_tiles {
            cfg.grid = resident as u32;
            be.skinny_persistent_launches
                .fetch_add(1, Ordering::Relaxed);
        }
    }
    let (n32, k32, m32) = (n as i32, k as i32, cols as i32);
    let epi = epi_code(epilogue);
    let (x, w, scale, gamma, out, eps, next) = (p.x, p.w, p.scale, p.gamma, p.out, p.eps, p.next);
    be.skinny_launches.fetch_add(1, Ordering::Relaxed);
    be.launch(
        kernel,
        cfg,
        &mut kargs![&x, &w, &scale, &gamma, &out, &n32, &k32, &m32, &eps, &epi, &next],
    )
}

/// Weight chunks each warp of a skinny launch of `n` rows over a weight of `rows` rows (both
/// halves with `swiglu`) loads per group (`sk_body`'s `U`): what its first reads cover.
pub(super) fn chunks_per_group(be: &CudaBackend, n: usize, rows: usize, swiglu: bool) -> usize {
    let tiles = n.clamp(1, SKINNY_MAX_ROWS).div_ceil(8).next_power_of_two();
    let (cols, per_tile) = if swiglu { (rows / 2, 8) } else { (rows, 16) };
    let mt = weight_tiles(tiles, cols.div_ceil(2 * per_tile), be.sm_count);
    (if tiles >= 4 { 2 } else { 4 }) / mt
}

/// Shared memory of a block with `tiles` activation and `mt` weight tiles: each warp's partial
/// sums (rows padded against bank conflicts, `SK_PITCH`) and its rows' sums of squares.
fn smem_bytes(tiles: usize, mt: usize) -> usize {
    let pitch = tiles * 8 + 1;
    SKINNY_WARPS * (mt * 16 * pitch + tiles * 8) * std::mem::size_of::<f32>()
}

/// Shared memory the input rotation adds for a `k`-wide input (kernels/lm_skinny.cu's
/// `sk_rot_prologue` layout): the rows' inverse RMS, one f32 group per warp, and each warp's
/// rotated f16 rows, padded by 8 halves.
fn rot_smem_bytes(k: usize) -> usize {
    let slice = k / SKINNY_WARPS;
    (ROT_ROWS + SKINNY_WARPS * ROT_GROUP) * std::mem::size_of::<f32>()
        + SKINNY_WARPS * ROT_ROWS * (slice + 8) * 2
}

/// True when an int8 product of `n` rows rotates its input inside the skinny kernel: the option
/// on, one activation tile, and every warp's k slice whole groups within its shared memory. Not
/// in the batch-invariant mode: its norm sums in another order than the norm kernel's, so a row
/// would change bits between 8 rows and 9.
fn rot_fits(be: &CudaBackend, n: usize, k: usize, group: usize) -> bool {
    let slice = k / SKINNY_WARPS;
    be.q8_fused_rotation
        && !be.batch_invariant
        && (1..=ROT_ROWS).contains(&n)
        && group == ROT_GROUP
        && k.is_multiple_of(SKINNY_WARPS * ROT_GROUP)
        && slice <= ROT_MAX_SLICE
}

/// Lets the entry points whose partial sums pass the default 48 KiB take them (at start-up);
/// `true` when the device also lets the input-rotation entries have theirs ([`rot_fits`] takes
/// them only then).
pub(crate) fn allow_smem(kernels: &crate::kernels::Kernels, limit: usize) -> Result<bool> {
    let rot_need = smem_bytes(1, 2) + rot_smem_bytes(SKINNY_WARPS * ROT_MAX_SLICE);
    let rot = rot_need <= limit;
    if rot {
        for mt in [1, 2] {
            kernels.allow_dynamic_smem(kernel(true, 1, mt, true), rot_need)?;
        }
    }
    let tiles = SKINNY_MAX_ROWS / 8;
    let need = smem_bytes(tiles, 2);
    if need > limit {
        return Err(cuda_error(
            "fused_linear",
            format!(
                "the skinny kernel needs {need} bytes of shared memory, the device allows {limit}"
            ),
        ));
    }
    for q8 in [false, true] {
        kernels.allow_dynamic_smem(kernel(q8, tiles, 2, false), need)?;
    }
    Ok(rot)
}

/// Weight tiles per block: two (half the activations' L2 traffic) at 64 rows, and below wherever
/// the grid of `blocks_at_two` blocks still gives every multiprocessor [`MIN_BLOCKS_PER_SM`].
/// The choice changes no output's summation order.
fn weight_tiles(tiles: usize, blocks_at_two: usize, sm_count: usize) -> usize {
    if tiles >= 8 || blocks_at_two >= MIN_BLOCKS_PER_SM * sm_count {
        2
    } else {
        1
    }
}

/// Resident blocks per multiprocessor the skinny kernel is built for up to 32 rows
/// (`SK_MIN_BLOCKS`).
const MIN_BLOCKS_PER_SM: usize = 2;

/// The ops apart, each on its own kernel (or cuBLAS).
fn apart(be: &CudaBackend, a: FusedLinearArgs<'_, CudaBackend>) -> Result<()> {
    let (n, k) = (a.n, a.k);
    fused_linear_apart(be, a, |x, weight, eps, out| {
        rms_norm_rows(be, x, weight, eps, out, (n, k))
    })
}
