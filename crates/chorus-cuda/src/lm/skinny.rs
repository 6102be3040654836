//! Skinny LM products on the tensor cores (kernels/lm_skinny.cu): [`LmOps::fused_linear`] for at
//! most [`SKINNY_MAX_ROWS`] rows in bf16, dense or int8 weights, the input's RMSNorm in the
//! product's prologue and the residual add or SwiGLU in its epilogue. Shapes the kernel does not
//! take (more rows, f32 storage, `k` not a multiple of its chunks) run the ops apart
//! ([`fused_linear_apart`]).
//!
//! Every output is summed in one order fixed by `k` alone, so a row's bits do not depend on the
//! other rows of the call (the batch invariance of `docs/protocol.md`).
//!
//! [`LmOps::fused_linear`]: chorus_core::LmOps::fused_linear

use std::sync::atomic::Ordering;

use chorus_core::lm_ops::{
    fused_linear_apart, Epilogue, FusedLinearArgs, HadamardArgs, LinearWeight,
};
use chorus_core::{LmOps, Precision, Result};

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
/// Weight tiles times activation tiles a block may hold (the kernel's register budget).
const MAX_TILE_PRODUCT: usize = 8;
/// A block takes more weight tiles only while the grid keeps at least this many blocks per SM.
const MIN_BLOCKS_PER_SM: usize = 2;
/// `epi` codes of the kernel (`SK_STORE`, `SK_ACC`, `SK_SWIGLU`).
fn epi_code(e: Epilogue) -> i32 {
    match e {
        Epilogue::Store => 0,
        Epilogue::Accumulate => 1,
        Epilogue::Swiglu => 2,
    }
}

/// The kernel of `q8` weights and `tiles` activation tiles.
fn kernel(q8: bool, tiles: usize) -> Kernel {
    match (q8, tiles) {
        (false, 1) => Kernel::LmSkinnyN8,
        (false, 2) => Kernel::LmSkinnyN16,
        (false, 4) => Kernel::LmSkinnyN32,
        (false, _) => Kernel::LmSkinnyN64,
        (true, 1) => Kernel::LmSkinnyQ8N8,
        (true, 2) => Kernel::LmSkinnyQ8N16,
        (true, 4) => Kernel::LmSkinnyQ8N32,
        (true, _) => Kernel::LmSkinnyQ8N64,
    }
}

impl CudaBackend {
    /// True when the skinny kernel takes this product.
    fn skinny_fits(&self, a: &FusedLinearArgs<'_, Self>) -> bool {
        let q8 = matches!(a.w, LinearWeight::Q8 { .. });
        let chunk = if q8 { CHUNK_Q8 } else { CHUNK_DENSE };
        self.skinny_mma
            && self.precision == Precision::Bf16
            && (1..=SKINNY_MAX_ROWS).contains(&a.n)
            && a.k.is_multiple_of(SKINNY_WARPS * chunk)
            && a.m >= 1
            && (a.epilogue != Epilogue::Swiglu || a.m.is_multiple_of(2))
            && a.m * a.k <= i32::MAX as usize
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
    if !be.skinny_fits(&a) {
        return apart(be, a);
    }
    let _timer = be.op_timer(OP);
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
    match w {
        LinearWeight::Dense(w) => {
            check_len(OP, "w", w.len, m * k)?;
            let p = Skinny {
                x: t_ptr(be, OP, "x", x)?,
                w: t_ptr(be, OP, "w", w)?,
                scale: 0,
                gamma: norm
                    .as_ref()
                    .map(|nm| t_ptr(be, OP, "norm.weight", nm.weight))
                    .transpose()?
                    .unwrap_or(0),
                out,
                eps: norm.as_ref().map_or(0.0, |nm| nm.eps),
                q8: false,
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
            // The int8 input is normed, then rotated, by their own kernels; the product and its
            // epilogue are one.
            let input: &CudaBuf = match norm {
                Some(nm) => {
                    rms_norm_rows(be, x, nm.weight, nm.eps, scratch.normed, (n, k))?;
                    scratch.normed
                }
                None => x,
            };
            be.hadamard(HadamardArgs {
                x: input,
                out: &mut *scratch.rot,
                n,
                dim: k,
                group,
            })?;
            let p = Skinny {
                x: t_ptr(be, OP, "scratch.rot", scratch.rot)?,
                w: weight.q.ptr(),
                scale: weight.scales.ptr(),
                gamma: 0,
                out,
                eps: 0.0,
                q8: true,
            };
            launch(be, p, shape)
        }
    }
}

/// Device pointers of one launch (0: absent).
struct Skinny {
    x: u64,
    w: u64,
    scale: u64,
    gamma: u64,
    out: u64,
    eps: f32,
    q8: bool,
}

fn launch(
    be: &CudaBackend,
    p: Skinny,
    (n, k, m, epilogue): (usize, usize, usize, Epilogue),
) -> Result<()> {
    let tiles = n.div_ceil(8).next_power_of_two();
    let swiglu = epilogue == Epilogue::Swiglu;
    let cols = if swiglu { m / 2 } else { m };
    let per_tile = if swiglu { 8 } else { 16 };
    // More weight tiles per block re-read the activations less, while the grid stays full.
    let mut mt = 1;
    for cand in [4usize, 2] {
        let blocks = cols.div_ceil(per_tile * cand);
        if cand * tiles <= MAX_TILE_PRODUCT && blocks >= MIN_BLOCKS_PER_SM * be.sm_count {
            mt = cand;
            break;
        }
    }
    let pitch = tiles * 8 + 1;
    let smem = (SKINNY_WARPS * (mt * 16 * pitch + tiles * 8)) * std::mem::size_of::<f32>();
    let cfg = Launch {
        grid: cols.div_ceil(per_tile * mt) as u32,
        block: (32 * SKINNY_WARPS) as u32,
        smem: smem as u32,
    };
    let (n32, k32, m32) = (n as i32, k as i32, cols as i32);
    let (epi, mt32) = (epi_code(epilogue), mt as i32);
    let (x, w, scale, gamma, out, eps) = (p.x, p.w, p.scale, p.gamma, p.out, p.eps);
    be.skinny_launches.fetch_add(1, Ordering::Relaxed);
    be.launch(
        kernel(p.q8, tiles),
        cfg,
        &mut kargs![&x, &w, &scale, &gamma, &out, &n32, &k32, &m32, &eps, &epi, &mt32],
    )
}

/// The ops apart, each on its own kernel (or cuBLAS).
fn apart(be: &CudaBackend, a: FusedLinearArgs<'_, CudaBackend>) -> Result<()> {
    let (n, k) = (a.n, a.k);
    fused_linear_apart(be, a, |x, weight, eps, out| {
        rms_norm_rows(be, x, weight, eps, out, (n, k))
    })
}
