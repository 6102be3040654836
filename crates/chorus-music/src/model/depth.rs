//! One position of the RVQ depth decoder (`MUSIC_SEMANTIC.md` §4): `projection(input) +
//! pos_embedding[p]`, pre-norm blocks with causal attention (no RoPE, no q/k norm, scale
//! `1/sqrt(head_dim)`) over a per-row cache of the frame's earlier positions, then `norm`.
//!
//! The cache is the paged attention op's layout with one block of `max_position_embeddings`
//! entries per row (block table = row index), rewritten from position 0 every frame; positions
//! past `p` are never read, so no mask and no clearing is needed. Linears are dense or int8
//! ConvRot (`linear.rs`).

use chorus_core::lm_ops::{
    AddRowArgs, Epilogue, HeadGeom, LinearScratch, PagedAttentionArgs, RmsNormArgs, RowNorm,
};
use chorus_core::{LmOps, Result};

use crate::config::{DepthConfig, DEPTH_RMS_EPS};
use crate::device::DeviceWeights;
use crate::model::block::{mlp_half, ActDims, Acts, Mlp};
use crate::model::linear::{linear, LinearIo};
use crate::model::qwen3::LayerCache;

/// Activation buffers of the depth decoder.
pub type DepthActs<B> = Acts<B>;

/// Activation buffers for up to `rows` rows; `q8`: some linear is int8.
pub fn depth_acts<B: LmOps>(
    be: &B,
    c: &DepthConfig,
    rows: usize,
    q8: bool,
) -> Result<DepthActs<B>> {
    let h = c.hidden_size;
    let dims = ActDims {
        hidden: h,
        qkv: 3 * h,
        attn: h,
        inter: c.intermediate_size,
        q8,
    };
    Acts::new(be, rows, dims)
}

/// Per-layer caches `[rows, max_position_embeddings, hidden]` for up to `rows` rows.
pub fn depth_caches<B: LmOps>(be: &B, c: &DepthConfig, rows: usize) -> Result<Vec<LayerCache<B>>> {
    let len = rows * c.max_position_embeddings * c.hidden_size;
    (0..c.num_layers)
        .map(|_| {
            Ok(LayerCache {
                k: be.zeros(len, chorus_core::BufRole::Pool)?,
                v: be.zeros(len, chorus_core::BufRole::Pool)?,
            })
        })
        .collect()
}

/// What one depth position reads and writes besides the weights.
pub struct DepthCall<'a, B: LmOps> {
    pub caches: &'a mut [LayerCache<B>],
    pub acts: &'a mut DepthActs<B>,
    /// `[rows, hidden]`: the position's input before `projection`.
    pub input: &'a B::Buf,
    /// `[rows]`, every entry `pos`.
    pub start: &'a B::Ints,
    /// `[rows]`: row `r` uses cache block `r`.
    pub table: &'a B::Ints,
    /// `[rows, hidden]`: the normed output of this position.
    pub out: &'a mut B::Buf,
    pub pos: usize,
    pub rows: usize,
}

/// Runs one position for `call.rows` rows.
pub fn depth_forward<B: LmOps>(
    be: &B,
    c: &DepthConfig,
    w: &DeviceWeights<B>,
    call: DepthCall<'_, B>,
) -> Result<()> {
    let DepthCall {
        caches,
        acts,
        input,
        start,
        table,
        out,
        pos,
        rows,
    } = call;
    let (h, inter) = (c.hidden_size, c.intermediate_size);
    let geom = HeadGeom {
        rows,
        time: 1,
        q_heads: c.num_attention_heads,
        kv_heads: c.num_attention_heads,
        head_dim: c.head_dim(),
    };
    linear(
        be,
        &w.projection,
        LinearIo {
            x: input,
            norm: None,
            out: &mut acts.residual,
            scratch: LinearScratch {
                normed: &mut acts.normed,
                rot: &mut acts.rot,
                product: &mut acts.gate_up,
            },
            n: rows,
            k: h,
            m: h,
            epilogue: Epilogue::Store,
        },
    )?;
    be.add_row(AddRowArgs {
        x: &mut acts.residual,
        table: &w.pos_embedding,
        row: pos,
        n: rows,
        dim: h,
    })?;
    for (l, cache) in w.depth_layers.iter().zip(caches.iter_mut()) {
        linear(
            be,
            &l.qkv,
            LinearIo {
                x: &acts.residual,
                norm: Some(RowNorm {
                    weight: &l.input_layernorm,
                    eps: DEPTH_RMS_EPS,
                }),
                out: &mut acts.qkv,
                scratch: LinearScratch {
                    normed: &mut acts.normed,
                    rot: &mut acts.rot,
                    product: &mut acts.gate_up,
                },
                n: rows,
                k: h,
                m: 3 * h,
                epilogue: Epilogue::Store,
            },
        )?;
        be.paged_attention(PagedAttentionArgs {
            qkv: &acts.qkv,
            k_cache: &mut cache.k,
            v_cache: &mut cache.v,
            block_tables: table,
            start,
            out: &mut acts.attn,
            geom,
            block_size: c.max_position_embeddings,
            max_blocks: 1,
        })?;
        linear(
            be,
            &l.to_out,
            LinearIo {
                x: &acts.attn,
                norm: None,
                out: &mut acts.residual,
                scratch: LinearScratch {
                    normed: &mut acts.normed,
                    rot: &mut acts.rot,
                    product: &mut acts.gate_up,
                },
                n: rows,
                k: h,
                m: h,
                epilogue: Epilogue::Accumulate,
            },
        )?;
        let mlp = Mlp {
            norm: &l.post_attention_layernorm,
            gate_up: &l.gate_up,
            down: &l.down,
            eps: DEPTH_RMS_EPS,
        };
        mlp_half(be, acts, mlp, (rows, h, inter))?;
    }
    be.rms_norm(RmsNormArgs {
        residual: &mut acts.residual,
        delta: None,
        weight: &w.depth_norm,
        out,
        n: rows,
        dim: h,
        eps: DEPTH_RMS_EPS,
    })
}
