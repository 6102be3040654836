//! Host side of the tensor-core convolution (`kernels/conv_mma.cu`): when a convolution runs as
//! one implicit GEMM on the tensor cores, its plan, and the launch.

use std::sync::atomic::Ordering;

use chorus_core::{Conv1dGeom, Precision, Result};

use crate::backend::CudaBackend;
use crate::conv_ops::i32_of;
use crate::kernels::{kargs, Kernel, Launch};

/// Output times per block tile and threads per block (as `MMA_BM` and `MMA_WARPS` in conv_mma.cu).
pub(crate) const MMA_BM: usize = 64;
pub(crate) const MMA_THREADS: u32 = 128;
/// bf16 elements of padding per shared-memory row (`MMA_PAD`).
pub(crate) const MMA_PAD: usize = 8;
/// Input channels must fill whole 16-wide k-steps (so a step never straddles two taps).
pub(crate) const MMA_C_ALIGN: usize = 16;
/// Rows shorter than this leave most of a 64-time tile idle: the other paths serve them better.
pub(crate) const MMA_MIN_TIME: usize = 32;
/// Tiles a step needs before the tensor-core path pays (about one per multiprocessor).
pub(crate) const MMA_MIN_TILES: usize = 128;
/// Dynamic shared memory the kernels may use (opted in at load, capped by the device).
pub(crate) const MMA_MAX_SMEM: usize = 200 * 1024;
/// A plan takes at most this much per block, so that three blocks stay resident per SM (with one
/// or two, a block's tile-by-tile latency is not hidden and the cuBLAS paths are faster).
const MMA_SMEM_PER_BLOCK: usize = 72 * 1024;
/// The kernels by outputs per block.
const MMA_KERNELS: [(Kernel, usize); 4] = [
    (Kernel::ConvMmaN8, 8),
    (Kernel::ConvMmaN16, 16),
    (Kernel::ConvMmaN32, 32),
    (Kernel::ConvMmaN64, 64),
];
/// Tensor cores with bf16 mma.m16n8k16 need compute capability 8.0.
pub(crate) const MMA_MIN_MAJOR: i32 = 8;

/// Mirrors `MmaConvDims` in `conv_mma.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct MmaConvDims {
    pub rows: i32,
    pub time: i32,
    pub c_in: i32,
    pub n_out: i32,
    pub taps: i32,
    pub dilation: i32,
    pub history: i32,
    pub elu: i32,
    pub tiles: i32,
    pub n_blocks: i32,
    pub w_sn: i64,
    pub w_sj: i64,
    pub w_sc: i64,
}

/// The shape of one implicit GEMM: `n_out` outputs per time from `taps` taps over `c_in` channels.
#[derive(Clone, Copy, Debug)]
struct MmaShape {
    rows: usize,
    time: usize,
    c_in: usize,
    n_out: usize,
    taps: usize,
    history: usize,
}

/// Which kernel (outputs per block) and how it is launched.
#[derive(Clone, Copy, Debug)]
struct MmaPlan {
    kernel: Kernel,
    n_blocks: usize,
    tiles: usize,
    launch: Launch,
}

impl CudaBackend {
    /// The tensor-core plan for `s`, or `None` when another path must run it.
    fn mma_plan(&self, s: MmaShape) -> Option<MmaPlan> {
        if !self.conv_mma
            || self.precision != Precision::Bf16
            || !s.c_in.is_multiple_of(MMA_C_ALIGN)
            || s.time < MMA_MIN_TIME
            || s.n_out == 0
            || s.n_out > self.conv_mma_max_out
        {
            return None;
        }
        // The widest block that covers n_out (fewest re-reads of the input) whose shared memory
        // leaves room for three resident blocks.
        let widest = match s.n_out {
            0..=8 => 0,
            9..=16 => 1,
            17..=32 => 2,
            _ => 3,
        };
        let window = (MMA_BM + s.history) * (s.c_in + MMA_PAD);
        let (kernel, bn, smem) =
            MMA_KERNELS[..=widest]
                .iter()
                .rev()
                .find_map(|&(kernel, bn)| {
                    // bf16 weights [bn][k + pad], then two input windows (one loads while the other computes).
                    let smem = 2 * (bn * (s.taps * s.c_in + MMA_PAD) + 2 * window);
                    (smem <= self.mma_smem_limit.min(MMA_SMEM_PER_BLOCK))
                        .then_some((kernel, bn, smem))
                })?;
        let n_blocks = s.n_out.div_ceil(bn);
        let tiles = s.time.div_ceil(MMA_BM);
        // Few tiles (small batches) leave most of the GPU idle while each block stages its
        // weights: the cuBLAS paths are faster there.
        if s.rows * tiles < MMA_MIN_TILES {
            return None;
        }
        let mut launch = Launch {
            grid: 0,
            block: MMA_THREADS,
            smem: u32::try_from(smem).ok()?,
        };
        // A failed query leaves the shape to the cuBLAS paths.
        let per_sm = self.kernels.resident_blocks(kernel, &launch).ok()?;
        let groups = (self.sm_count * per_sm / n_blocks).clamp(1, s.rows * tiles);
        launch.grid = u32::try_from(groups * n_blocks).ok()?;
        Some(MmaPlan {
            kernel,
            n_blocks,
            tiles,
            launch,
        })
    }

    fn mma_dims(&self, s: MmaShape, plan: &MmaPlan, op: &'static str) -> Result<MmaConvDims> {
        Ok(MmaConvDims {
            rows: i32_of(s.rows, op)?,
            time: i32_of(s.time, op)?,
            c_in: i32_of(s.c_in, op)?,
            n_out: i32_of(s.n_out, op)?,
            taps: i32_of(s.taps, op)?,
            dilation: 1,
            history: i32_of(s.history, op)?,
            elu: 0,
            tiles: i32_of(plan.tiles, op)?,
            n_blocks: i32_of(plan.n_blocks, op)?,
            w_sn: 0,
            w_sj: 0,
            w_sc: 0,
        })
    }

    /// Runs `conv1d` on the tensor cores if it can (its state update is left to the caller):
    /// `Ok(false)` means another path must run it. Pointers: x, state, slots, w, bias, residual, out.
    pub(crate) fn conv1d_mma(&self, g: Conv1dGeom, ptrs: [u64; 7]) -> Result<bool> {
        const OP: &str = "conv1d (tensor cores)";
        let s = MmaShape {
            rows: g.rows,
            time: g.time,
            c_in: g.c_in,
            n_out: g.c_out,
            taps: g.kernel,
            history: g.history(),
        };
        // A pointwise convolution is one plain GEMM, which cuBLAS runs faster.
        if g.kernel < 2 {
            return Ok(false);
        }
        let Some(plan) = self.mma_plan(s) else {
            return Ok(false);
        };
        let k_total = g.kernel * g.c_in;
        let d = MmaConvDims {
            dilation: i32_of(g.dilation, OP)?,
            elu: i32::from(g.elu_input),
            w_sn: k_total as i64,
            w_sj: g.c_in as i64,
            w_sc: 1,
            ..self.mma_dims(s, &plan, OP)?
        };
        let [x, state, slots, w, bias, residual, out] = ptrs;
        self.launch(
            plan.kernel,
            plan.launch,
            &mut kargs![&x, &state, &slots, &w, &bias, &residual, &out, &d],
        )?;
        self.mma_launches.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}
