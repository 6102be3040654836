//! Skinny products (kernels/lm_gemv.cu): `out = x w^T` for at most [`GEMV_MAX_ROWS`] rows, one warp
//! per weight row streaming it at the memory's speed, where cuBLAS's tiles (built for large
//! products) leave most of the bandwidth unused.

use chorus_core::lm_ops::{Epilogue, FusedLinearArgs, LinearWeight};
use chorus_core::{LinearArgs, NormLinearArgs, Result};

use std::sync::atomic::Ordering;

use super::{check_len, t_ptr};
use crate::backend::CudaBackend;
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Kernels, Launch};

/// Most activation rows the GEMV kernel takes (one song: measured on the H200, it streams bf16
/// weights at 3.6 TB/s for 2 rows, 2.9 at 4, 2.1 at 8, while cuBLAS reaches 3.5 TB/s from 32 rows).
pub(crate) const GEMV_MAX_ROWS: usize = 2;
/// Shortest rows the GEMV kernel takes by default ([`crate::CudaOptions::gemv_min_k`]): the LM's
/// products and the codec's 2-row products (k 512 and 2048). Measured on the H200, the Mimi step
/// at batch 1 took 0.474 ms with its products on cuBLAS and 0.396 ms on this kernel.
pub const GEMV_MIN_K: usize = 512;
/// Longest rows the fused norm + GEMV kernel takes: it holds the normalised rows in shared memory
/// (`GEMV_MAX_ROWS * k` floats, 32 KiB at most, below the 48 KiB a block may take unasked).
const GEMV_NORM_MAX_K: usize = 4096;
/// Warps per block of the GEMV kernel.
const GEMV_WARPS: u32 = 8;
/// Bytes of one vector access.
const VEC_BYTES: usize = 16;
/// The bulk-copy GEMV's geometry (mirrors `GEMV_TMA_WARPS`, `GEMV_TMA_STAGES`, `GEMV_TMA_SEG`):
/// each warp's ring of segments is its shared memory.
const GEMV_TMA_WARPS: u32 = 8;
const GEMV_TMA_STAGES: usize = 3;
const GEMV_TMA_SEG: usize = 4096;
/// Bulk copies and mbarriers with transaction counts need sm_90.
pub(crate) const GEMV_TMA_MIN_MAJOR: i32 = 9;

/// `epi` codes of the bulk-copy GEMV (`GEMV_STORE`, `GEMV_ACC`, `GEMV_SWIGLU`).
const TMA_STORE: i32 = 0;
const TMA_ACC: i32 = 1;
const TMA_SWIGLU: i32 = 2;

/// Device pointers of one bulk-copy GEMV (`gamma` 0: no norm) and the norm's epsilon.
#[derive(Clone, Copy)]
struct TmaCall {
    x: u64,
    w: u64,
    gamma: u64,
    out: u64,
    eps: f32,
}

/// The bulk-copy GEMV's launch shape but its grid.
fn tma_launch(grid: u32) -> Launch {
    Launch {
        grid,
        block: 32 * GEMV_TMA_WARPS,
        smem: (GEMV_TMA_WARPS as usize * GEMV_TMA_STAGES * GEMV_TMA_SEG) as u32,
    }
}

/// Lets the bulk-copy GEMV take its shared memory and returns its grid: every block the device
/// holds at once (the rows go to its warps grid-stride, so there is no second wave).
pub(crate) fn tma_grid(kernels: &Kernels, sm_count: usize) -> Result<u32> {
    let launch = tma_launch(1);
    kernels.allow_dynamic_smem(Kernel::LmGemvTma, launch.smem as usize)?;
    let per_sm = kernels.resident_blocks(Kernel::LmGemvTma, &launch)?;
    Ok(u32::try_from(per_sm * sm_count).unwrap_or(u32::MAX))
}

impl CudaBackend {
    /// True when `linear` should take the GEMV kernel for this shape.
    pub(crate) fn gemv_fits(&self, a: &LinearArgs<'_, Self>) -> bool {
        a.n >= 1
            && a.n <= GEMV_MAX_ROWS
            && a.k >= self.gemv_min_k
            && a.k.is_multiple_of(VEC_BYTES / self.esize())
            && a.m <= i32::MAX as usize
    }

    /// `out[n, m] = x[n, k] . w[m, k]^T` with the GEMV kernel (the caller checked
    /// [`Self::gemv_fits`]), or `out += ...` with `accumulate`.
    pub(crate) fn gemv(&self, a: LinearArgs<'_, Self>, accumulate: bool) -> Result<()> {
        let tile: i32 = match a.n {
            0..=2 => 2,
            3..=4 => 4,
            5..=8 => 8,
            _ => 16,
        };
        let (x, w, out) = (a.x.mem.ptr(), a.w.mem.ptr(), a.out.mem.ptr());
        let (n, k, m) = (a.n as i32, a.k as i32, a.m as i32);
        let acc = i32::from(accumulate);
        if self.gemv_tma_grid > 0 && w.is_multiple_of(VEC_BYTES as u64) {
            let epi = if accumulate { TMA_ACC } else { TMA_STORE };
            return self.gemv_tma(
                TmaCall {
                    x,
                    w,
                    gamma: 0,
                    out,
                    eps: 0.0,
                },
                (n, k, m),
                epi,
            );
        }
        let cfg = Launch {
            grid: (a.m as u32).div_ceil(GEMV_WARPS),
            block: 32 * GEMV_WARPS,
            smem: 0,
        };
        self.launch(
            Kernel::LmGemv,
            cfg,
            &mut kargs![&x, &w, &out, &n, &k, &m, &tile, &acc],
        )
    }

    /// Launches the bulk-copy GEMV over `(n, k, m)` (checked by the caller).
    fn gemv_tma(&self, c: TmaCall, (n, k, m): (i32, i32, i32), epi: i32) -> Result<()> {
        self.gemv_tma_launches.fetch_add(1, Ordering::Relaxed);
        let TmaCall {
            x,
            w,
            gamma,
            out,
            eps,
        } = c;
        self.launch(
            Kernel::LmGemvTma,
            tma_launch(self.gemv_tma_grid),
            &mut kargs![&x, &w, &gamma, &out, &eps, &n, &k, &m, &epi],
        )
    }

    /// True when `fused_linear` should take the bulk-copy GEMV with its norm and epilogue: dense
    /// weights, at most [`GEMV_MAX_ROWS`] rows, outside the batch-invariant mode (whose rows
    /// keep the skinny kernel's one order at every row count).
    pub(crate) fn gemv_tma_fused_fits(&self, a: &FusedLinearArgs<'_, Self>) -> bool {
        self.gemv_tma_grid > 0
            && !self.batch_invariant
            // Bulk copies read from 16-byte aligned addresses.
            && matches!(a.w, LinearWeight::Dense(w) if w.mem.ptr().is_multiple_of(VEC_BYTES as u64))
            && (1..=GEMV_MAX_ROWS).contains(&a.n)
            && a.k >= self.gemv_min_k
            && a.k.is_multiple_of(VEC_BYTES / self.esize())
            && (a.epilogue != Epilogue::Swiglu || a.m.is_multiple_of(2))
            && a.m <= i32::MAX as usize
            && a.k <= i32::MAX as usize
    }

    /// `fused_linear` on the bulk-copy GEMV (the caller checked [`Self::gemv_tma_fused_fits`]
    /// and the buffers' lengths); the scratch buffers are not written.
    pub(crate) fn gemv_tma_fused(&self, a: FusedLinearArgs<'_, Self>) -> Result<()> {
        const OP: &str = "fused_linear";
        let LinearWeight::Dense(w) = a.w else {
            return Err(cuda_error(OP, "the bulk-copy GEMV takes dense weights"));
        };
        check_len(OP, "w", w.len, a.m * a.k)?;
        let call = TmaCall {
            x: t_ptr(self, OP, "x", a.x)?,
            w: t_ptr(self, OP, "w", w)?,
            gamma: a
                .norm
                .as_ref()
                .map(|nm| t_ptr(self, OP, "norm.weight", nm.weight))
                .transpose()?
                .unwrap_or(0),
            out: t_ptr(self, OP, "out", a.out)?,
            eps: a.norm.as_ref().map_or(0.0, |nm| nm.eps),
        };
        let epi = match a.epilogue {
            Epilogue::Store => TMA_STORE,
            Epilogue::Accumulate => TMA_ACC,
            Epilogue::Swiglu => TMA_SWIGLU,
        };
        let _timer = self.op_timer(OP);
        self.gemv_tma(call, (a.n as i32, a.k as i32, a.m as i32), epi)
    }

    /// True when `layer_norm_linear` should take the fused norm + GEMV kernel for this shape.
    pub(crate) fn gemv_norm_fits(&self, n: usize, k: usize, m: usize) -> bool {
        (1..=GEMV_MAX_ROWS).contains(&n)
            && (self.gemv_min_k..=GEMV_NORM_MAX_K).contains(&k)
            && k.is_multiple_of(VEC_BYTES / self.esize())
            && m <= i32::MAX as usize
    }

    /// `out = act(LayerNorm(x) . w^T)` in one kernel (the caller checked [`Self::gemv_norm_fits`]);
    /// `a.norm.out` is not written.
    pub(crate) fn gemv_norm(&self, a: NormLinearArgs<'_, Self>) -> Result<()> {
        let norm = &a.norm;
        let (x, gamma, beta) = (norm.x.mem.ptr(), norm.gamma.mem.ptr(), norm.beta.mem.ptr());
        let (w, out) = (a.w.mem.ptr(), a.out.mem.ptr());
        let (n, k, m) = (norm.n as i32, norm.dim as i32, a.m as i32);
        let (eps, gelu) = (norm.eps, i32::from(a.gelu));
        let cfg = Launch {
            grid: (a.m as u32).div_ceil(GEMV_WARPS),
            block: 32 * GEMV_WARPS,
            smem: (norm.n * norm.dim * std::mem::size_of::<f32>()) as u32,
        };
        self.launch(
            Kernel::GemvNorm,
            cfg,
            &mut kargs![&x, &gamma, &beta, &eps, &w, &out, &n, &k, &m, &gelu],
        )
    }
}
