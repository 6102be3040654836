//! Host side of the streaming attention kernels (`kernels/attention.cu`, and its tensor-core form
//! `kernels/attention_mma.cu` for bf16 heads of 64): geometry checks and the launch (one warp per
//! row and head, or a block per row and head when that leaves the GPU idle).

use std::sync::atomic::Ordering;

use chorus_core::{AttentionArgs, Precision, Result};

use crate::backend::CudaBackend;
use crate::conv_ops::i32_of;
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};

/// Warps per block (`ATTN_WARPS` in attention.cu).
const ATTN_WARPS: usize = 4;
/// Queries per tile and per-warp partial softmax size (`ATTN_MAX_TIME`: m, l and acc per query).
const ATTN_MAX_TIME: usize = 4;
/// Query tokens whose rotated queries a group keeps in shared memory at once (`ATTN_Q_SPAN`): a
/// longer step goes span by span, so shared memory does not bound the frames per step.
const ATTN_Q_SPAN: usize = 64;
/// The same for the tensor-core kernel (`ATTN_MMA_TILE`).
const ATTN_MMA_TILE: usize = 8;
/// The head dimension the tensor-core kernel takes (Mimi's).
const ATTN_MMA_HEAD_DIM: usize = 64;
/// 32-bit words of one lane's query fragments in the tensor-core kernel (`ATTN_MMA_QWORDS`).
const ATTN_MMA_QWORDS: usize = 16;
/// Below this many (row, head) pairs per multiprocessor, the block's warps split each pair's
/// keys (and merge their softmaxes) instead of taking one pair each: small batches would leave
/// most of the GPU idle, each warp walking its whole window alone.
const ATTN_SPLIT_BELOW_PER_SM: usize = 8;
/// Shared memory a block may take without opting in.
const ATTN_MAX_SMEM: usize = 48 * 1024;
/// The head dimensions compiled (one kernel each).
const ATTN_KERNELS: [(usize, Kernel); 4] = [
    (16, Kernel::AttentionD16),
    (32, Kernel::AttentionD32),
    (64, Kernel::AttentionD64),
    (128, Kernel::AttentionD128),
];

/// Mirrors `AttnDims` in `prelude.cuh`.
#[repr(C)]
#[derive(Clone, Copy)]
struct AttnDims {
    rows: i32,
    time: i32,
    heads: i32,
    head_dim: i32,
    ring: i32,
    window: i32,
    rope_theta: f32,
}

impl CudaBackend {
    pub(crate) fn op_attention(&self, a: AttentionArgs<'_, Self>) -> Result<()> {
        const OP: &str = "attention";
        let g = a.geom;
        let kernel = ATTN_KERNELS
            .iter()
            .find(|(dim, _)| *dim == g.head_dim)
            .map(|&(_, k)| k);
        let geometry_ok =
            g.time > 0 && g.window > 0 && g.window + g.time - 1 <= g.ring && g.heads > 0;
        let (Some(kernel), true) = (kernel, geometry_ok) else {
            return Err(cuda_error(
                OP,
                format!(
                    "unsupported geometry {g:?}: time >= 1, window >= 1, head_dim one of 16, 32, \
                     64, 128, window + time - 1 <= ring"
                ),
            ));
        };
        let mma = self.attention_mma
            && self.precision == Precision::Bf16
            && g.head_dim == ATTN_MMA_HEAD_DIM;
        let (kernel, tile) = if mma {
            (Kernel::AttentionMmaD64, ATTN_MMA_TILE)
        } else {
            (kernel, ATTN_MAX_TIME)
        };
        let pairs = g.rows * g.heads;
        // Each group's rotated queries of one span [min(time, span), head_dim], then with a
        // split each warp's partial softmax (m, l and acc for a tile of queries), 32-bit words.
        let smem_of = |split: usize| {
            let partials = if split > 1 {
                ATTN_WARPS * tile * (g.head_dim + 2)
            } else {
                0
            };
            // The tensor-core kernel keeps each warp's query fragments there too.
            let fragments = if mma {
                ATTN_WARPS * ATTN_MMA_QWORDS * 32
            } else {
                0
            };
            (ATTN_WARPS / split * g.time.min(ATTN_Q_SPAN) * g.head_dim + fragments + partials)
                * std::mem::size_of::<f32>()
        };
        // One warp per (row, head) for large batches; below that, a block's warps split each
        // pair's keys. Long steps (many frames at once) keep one group's queries per block
        // whatever the batch. (Eight warps per pair at one row measured 6.9 against 6.2 us per
        // call on the H200: the fixed RoPE and merge phases dominate there.)
        let split = if pairs < self.sm_count * ATTN_SPLIT_BELOW_PER_SM || smem_of(1) > ATTN_MAX_SMEM
        {
            ATTN_WARPS
        } else {
            1
        };
        let groups = ATTN_WARPS / split;
        let smem = smem_of(split);
        if smem > ATTN_MAX_SMEM {
            return Err(cuda_error(
                OP,
                format!(
                    "geometry {g:?} needs {smem} bytes of shared memory (at most {ATTN_MAX_SMEM})"
                ),
            ));
        }
        let d = AttnDims {
            rows: i32_of(g.rows, OP)?,
            time: i32_of(g.time, OP)?,
            heads: i32_of(g.heads, OP)?,
            head_dim: i32_of(g.head_dim, OP)?,
            ring: i32_of(g.ring, OP)?,
            window: i32_of(g.window, OP)?,
            rope_theta: g.rope_theta,
        };
        let blocks =
            u32::try_from(pairs.div_ceil(groups)).map_err(|_| cuda_error(OP, "too many blocks"))?;
        let (qkv, kv, tokens) = (a.qkv.mem.ptr(), a.kv.mem.ptr(), a.tokens.mem.ptr());
        let (slots, out) = (a.slots.mem.ptr(), a.out.mem.ptr());
        let split = split as i32;
        if mma {
            self.attention_mma_launches.fetch_add(1, Ordering::Relaxed);
        }
        self.launch(
            kernel,
            Launch {
                grid: blocks,
                block: (ATTN_WARPS * 32) as u32,
                smem: smem as u32,
            },
            &mut kargs![&qkv, &kv, &tokens, &slots, &out, &d, &split],
        )
    }
}
