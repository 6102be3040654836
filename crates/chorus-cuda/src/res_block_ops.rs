//! Host side of the fused SEANet residual block (`kernels/res_block.cu`): when a block runs as one
//! tensor-core kernel, its plan and launch; otherwise its two convolutions.

use std::sync::atomic::Ordering;

use chorus_core::{Conv1dArgs, Conv1dGeom, Precision, ResBlockArgs, ResBlockGeom, Result};

use crate::backend::CudaBackend;
use crate::conv_ops::{history_ptr, i32_of, ConvDims};
use crate::kernels::{kargs, Kernel, Launch};
use crate::mma_ops::{MmaConvDims, MMA_BM, MMA_MIN_TILES, MMA_MIN_TIME, MMA_PAD, MMA_THREADS};

/// The fused kernels by `(channels, hidden channels)`: Mimi's last two decoder stages and first
/// two encoder stages (wider blocks' weights do not fit in shared memory).
const RES_BLOCK_KERNELS: [(Kernel, usize, usize); 2] = [
    (Kernel::ResBlockC64, 64, 32),
    (Kernel::ResBlockC128, 128, 64),
];

impl CudaBackend {
    pub(crate) fn op_res_block(&self, a: ResBlockArgs<'_, Self>) -> Result<()> {
        const OP: &str = "res_block";
        let g = a.geom;
        let Some((kernel, launch)) = self.res_block_plan(g) else {
            return self.res_block_apart(a);
        };
        let first = g.first();
        let history = first.history();
        let x = a.x.mem.ptr();
        let state = history_ptr(a.state.as_deref(), history, OP)?;
        let slots = a.slots.mem.ptr();
        let (w1, w2) = (a.w1.mem.ptr(), a.w2.mem.ptr());
        let b1 = a.b1.map_or(0u64, |b| b.mem.ptr());
        let b2 = a.b2.map_or(0u64, |b| b.mem.ptr());
        let out = a.out.mem.ptr();
        let d = MmaConvDims {
            rows: i32_of(g.rows, OP)?,
            time: i32_of(g.time, OP)?,
            c_in: i32_of(g.c, OP)?,
            n_out: i32_of(g.hidden, OP)?,
            taps: i32_of(g.kernel, OP)?,
            dilation: i32_of(g.dilation, OP)?,
            history: i32_of(history, OP)?,
            elu: 1,
            tiles: i32_of(g.time.div_ceil(MMA_BM), OP)?,
            n_blocks: 1,
            w_sn: (g.kernel * g.c) as i64,
            w_sj: g.c as i64,
            w_sc: 1,
        };
        self.launch(
            kernel,
            launch,
            &mut kargs![&x, &state, &slots, &w1, &b1, &w2, &b2, &out, &d],
        )?;
        self.res_block_launches.fetch_add(1, Ordering::Relaxed);
        self.conv_history_update(&ConvDims::of(first, OP)?, x, state, slots)
    }

    /// The block as its two convolutions, the first writing its hidden activation ELU'd (so the
    /// pointwise one reads it as is, with no ELU pass of its own: the hidden buffer is this
    /// backend's scratch).
    fn res_block_apart(&self, a: ResBlockArgs<'_, Self>) -> Result<()> {
        let g = a.geom;
        self.conv1d_then_elu(
            Conv1dArgs {
                x: a.x,
                w: a.w1,
                bias: a.b1,
                state: a.state,
                slots: a.slots,
                residual: None,
                out: &mut *a.hidden,
                geom: g.first(),
            },
            true,
        )?;
        self.op_conv1d(Conv1dArgs {
            x: a.hidden,
            w: a.w2,
            bias: a.b2,
            state: None,
            slots: a.slots,
            residual: Some(a.x),
            out: a.out,
            geom: Conv1dGeom {
                elu_input: false,
                ..g.second()
            },
        })
    }

    /// The fused kernel and its launch for `g`, or `None` when the two convolutions must run
    /// apart (f32, a width without a kernel, weights past the shared memory, too few tiles).
    fn res_block_plan(&self, g: ResBlockGeom) -> Option<(Kernel, Launch)> {
        if !(self.fuse_res_block && self.conv_mma && self.precision == Precision::Bf16)
            || g.time < MMA_MIN_TIME
            || g.kernel == 0
        {
            return None;
        }
        let &(kernel, c, hidden) = RES_BLOCK_KERNELS
            .iter()
            .find(|&&(_, c, h)| c == g.c && h == g.hidden)?;
        let history = (g.kernel - 1) * g.dilation;
        // bf16 weights of both convolutions, then two input windows (one loads while the other
        // computes), each row padded as in conv_mma.cu.
        let window = (MMA_BM + history) * (c + MMA_PAD);
        let elems = hidden * (g.kernel * c + MMA_PAD) + c * (hidden + MMA_PAD) + 2 * window;
        let smem = 2 * elems;
        if smem > self.mma_smem_limit {
            return None;
        }
        let tiles = g.rows * g.time.div_ceil(MMA_BM);
        if tiles < MMA_MIN_TILES {
            return None;
        }
        let mut launch = Launch {
            grid: 0,
            block: MMA_THREADS,
            smem: u32::try_from(smem).ok()?,
        };
        // A failed query leaves the shape to the unfused path.
        let per_sm = self.kernels.resident_blocks(kernel, &launch).ok()?;
        launch.grid = u32::try_from((self.sm_count * per_sm).min(tiles)).ok()?;
        Some((kernel, launch))
    }
}
