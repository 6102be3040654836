//! Host side of the wide tensor-core convolution (`kernels/conv_wide.cu`): the plan that decides
//! when a convolution takes it, and the launch.

use std::sync::atomic::Ordering;

use chorus_core::{Conv1dGeom, Precision, Result};

use crate::backend::CudaBackend;
use crate::conv_ops::i32_of;
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};
use crate::mma_ops::MMA_PAD;

/// Flattened output times and outputs per block tile, k per pipeline slice, pipeline depth and
/// threads (as `WIDE_BM`, `WIDE_BN`, `WIDE_BK`, `WIDE_STAGES` and `WIDE_WARPS` in conv_wide.cu).
pub(crate) const WIDE_BM: usize = 128;
pub(crate) const WIDE_BN: usize = 128;
pub(crate) const WIDE_BK: usize = 64;
const WIDE_STAGES: usize = 3;
const WIDE_THREADS: u32 = 256;
/// Dynamic shared memory per block: each stage holds a bf16 slice of A and of B, rows padded.
pub(crate) const WIDE_SMEM: usize = WIDE_STAGES * (WIDE_BM + WIDE_BN) * (WIDE_BK + MMA_PAD) * 2;
/// Outputs of a whole step below which the launch of 128 x 128 tiles leaves the GPU mostly idle
/// (fewer tiles than two per multiprocessor): the other paths serve small batches.
const WIDE_MIN_TILES: usize = 264;

/// Mirrors `WideConvDims` in `conv_wide.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct WideConvDims {
    rows: i32,
    time: i32,
    c_in: i32,
    n_out: i32,
    taps: i32,
    dilation: i32,
    history: i32,
    elu: i32,
    m_total: i32,
    n_blocks: i32,
}

impl CudaBackend {
    /// Whether `g` runs on the wide kernel: bf16 on sm_80+ with the option on, at least two taps
    /// (a pointwise layer is one plain GEMM, which cuBLAS runs), whole tiles of outputs, and k
    /// slices that never straddle two taps.
    pub(crate) fn wide_applies(&self, g: Conv1dGeom) -> bool {
        let tiles = (g.rows * g.time).div_ceil(WIDE_BM) * (g.c_out / WIDE_BN);
        self.conv_wide
            && self.conv_mma
            && self.precision == Precision::Bf16
            && g.kernel >= 2
            && g.c_out.is_multiple_of(WIDE_BN)
            && g.c_in.is_multiple_of(WIDE_BK)
            && WIDE_SMEM <= self.mma_smem_limit
            && tiles >= WIDE_MIN_TILES
    }

    /// Runs `conv1d` on the wide kernel if it applies (its state update is left to the caller):
    /// `Ok(false)` means another path must run it. Pointers: x, state, slots, w, bias, residual,
    /// out.
    pub(crate) fn conv1d_wide(&self, g: Conv1dGeom, ptrs: [u64; 7]) -> Result<bool> {
        const OP: &str = "conv1d (wide tensor cores)";
        if !self.wide_applies(g) {
            return Ok(false);
        }
        let m_total = g.rows * g.time;
        let n_blocks = g.c_out / WIDE_BN;
        let blocks = m_total.div_ceil(WIDE_BM) * n_blocks;
        let d = WideConvDims {
            rows: i32_of(g.rows, OP)?,
            time: i32_of(g.time, OP)?,
            c_in: i32_of(g.c_in, OP)?,
            n_out: i32_of(g.c_out, OP)?,
            taps: i32_of(g.kernel, OP)?,
            dilation: i32_of(g.dilation, OP)?,
            history: i32_of(g.history(), OP)?,
            elu: i32::from(g.elu_input),
            m_total: i32_of(m_total, OP)?,
            n_blocks: i32_of(n_blocks, OP)?,
        };
        let launch = Launch {
            grid: u32::try_from(blocks).map_err(|_| cuda_error(OP, "too many blocks"))?,
            block: WIDE_THREADS,
            smem: WIDE_SMEM as u32,
        };
        let [x, state, slots, w, bias, residual, out] = ptrs;
        self.launch(
            Kernel::ConvWide,
            launch,
            &mut kargs![&x, &state, &slots, &w, &bias, &residual, &out, &d],
        )?;
        self.wide_launches.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}
