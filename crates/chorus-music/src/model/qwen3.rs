//! The Qwen3 forward pass over a paged KV cache (`MUSIC_SEMANTIC.md` §1.3), one function for
//! prefill (`time` = prompt length) and decode (`time` = 1).
//!
//! The residual stream stays in `residual`. A layer is four fused products around the attention:
//! norm + fused q/k/v -> q/k norm + RoPE -> paged attention -> o_proj + residual add -> norm +
//! fused gate/up + SwiGLU -> down + residual add; `model.norm` then gives the final-normed hidden
//! `last_hidden`. Each linear is dense or int8 ConvRot (`linear.rs`).

use chorus_core::lm_ops::{
    Epilogue, HeadGeom, LinearScratch, PagedAttentionArgs, QkNormRopeArgs, RmsNormArgs, RowNorm,
};
use chorus_core::{LmOps, Result};

use crate::config::Qwen3Config;
use crate::device::DeviceWeights;
use crate::model::block::{mlp_half, ActDims, Acts, Mlp};
use crate::model::linear::{linear, LinearIo};

/// Activation buffers of one LM call.
pub type LmActs<B> = Acts<B>;

/// Activation buffers for up to `tokens` tokens; `q8`: some linear is int8.
pub fn lm_acts<B: LmOps>(be: &B, c: &Qwen3Config, tokens: usize, q8: bool) -> Result<LmActs<B>> {
    let dims = ActDims {
        hidden: c.hidden_size,
        qkv: c.qkv_width(),
        attn: c.num_attention_heads * c.head_dim,
        inter: c.intermediate_size,
        q8,
    };
    Acts::new(be, tokens, dims)
}

/// One layer's paged caches.
pub struct LayerCache<B: LmOps> {
    /// `[num_blocks, block_size, kv_heads * head_dim]`.
    pub k: B::Buf,
    pub v: B::Buf,
}

/// What one LM call reads and writes besides the weights.
pub struct LmCall<'a, B: LmOps> {
    pub caches: &'a mut [LayerCache<B>],
    pub acts: &'a mut LmActs<B>,
    /// `[rows]`: position of each row's first new token.
    pub start: &'a B::Ints,
    /// `[rows, max_blocks]`.
    pub block_tables: &'a B::Ints,
    pub shape: LmShape,
}

/// Shape of one LM call.
#[derive(Clone, Copy, Debug)]
pub struct LmShape {
    pub rows: usize,
    pub time: usize,
    pub block_size: usize,
    pub max_blocks: usize,
}

/// Runs every layer on `acts.residual` (the input embeddings, `[rows * time, hidden]`) and leaves
/// the final-normed hidden of every token in `acts.normed`.
pub fn lm_forward<B: LmOps>(
    be: &B,
    c: &Qwen3Config,
    w: &DeviceWeights<B>,
    call: LmCall<'_, B>,
) -> Result<()> {
    let LmCall {
        caches,
        acts,
        start,
        block_tables,
        shape,
    } = call;
    let h = c.hidden_size;
    let eps = c.rms_norm_eps as f32;
    let geom = HeadGeom {
        rows: shape.rows,
        time: shape.time,
        q_heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
    };
    let n = geom.tokens();
    let q_width = c.num_attention_heads * c.head_dim;
    let inter = c.intermediate_size;
    let layers = w.lm_layers.iter().zip(caches.iter_mut());
    for (l, cache) in layers {
        // 1-2. input_layernorm and q, k, v in one product.
        linear(
            be,
            &l.qkv,
            LinearIo {
                x: &acts.residual,
                norm: Some(RowNorm {
                    weight: &l.input_layernorm,
                    eps,
                }),
                out: &mut acts.qkv,
                scratch: LinearScratch {
                    normed: &mut acts.normed,
                    rot: &mut acts.rot,
                    product: &mut acts.gate_up,
                },
                n,
                k: h,
                m: geom.qkv_width(),
                epilogue: Epilogue::Store,
            },
        )?;
        // 3-4. per-head q/k RMSNorm, then rotate-half RoPE at each token's position.
        be.qk_norm_rope(QkNormRopeArgs {
            qkv: &mut acts.qkv,
            q_norm: &l.q_norm,
            k_norm: &l.k_norm,
            rope: &w.rope,
            start,
            geom,
            eps,
        })?;
        // 5. causal GQA attention over the paged cache (writes this call's k/v first).
        be.paged_attention(PagedAttentionArgs {
            qkv: &acts.qkv,
            k_cache: &mut cache.k,
            v_cache: &mut cache.v,
            block_tables,
            start,
            out: &mut acts.attn,
            geom,
            block_size: shape.block_size,
            max_blocks: shape.max_blocks,
        })?;
        // 6. o_proj, added to the residual stream in the product.
        linear(
            be,
            &l.o_proj,
            LinearIo {
                x: &acts.attn,
                norm: None,
                out: &mut acts.residual,
                scratch: LinearScratch {
                    normed: &mut acts.normed,
                    rot: &mut acts.rot,
                    product: &mut acts.gate_up,
                },
                n,
                k: q_width,
                m: h,
                epilogue: Epilogue::Accumulate,
            },
        )?;
        // 7. post_attention_layernorm, SwiGLU MLP, its residual add.
        let mlp = Mlp {
            norm: &l.post_attention_layernorm,
            gate_up: &l.gate_up,
            down: &l.down,
            eps,
        };
        mlp_half(be, acts, mlp, (n, h, inter))?;
    }
    // 8. model.norm: `last_hidden` of every token.
    be.rms_norm(RmsNormArgs {
        residual: &mut acts.residual,
        delta: None,
        weight: &w.norm,
        out: &mut acts.normed,
        n,
        dim: h,
        eps,
    })
}
