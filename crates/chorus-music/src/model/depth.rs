//! One position of the RVQ depth decoder (`MUSIC_SEMANTIC.md` §4): `projection(input) +
//! pos_embedding[p]`, pre-norm blocks with causal attention (no RoPE, no q/k norm, scale
//! `1/sqrt(head_dim)`) over a per-row cache of the frame's earlier positions, then `norm`.
//!
//! The cache is the paged attention op's layout with one block of `max_position_embeddings`
//! entries per row (block table = row index), rewritten from position 0 every frame; positions
//! past `p` are never read, so no mask and no clearing is needed. The blocks are chorus-lm's
//! decoder stack without q/k norm or RoPE; linears are dense or int8 ConvRot.

use chorus_core::lm_ops::{AddRowArgs, Epilogue};
use chorus_core::{LmOps, Result};
use chorus_lm::{
    decoder_stack, layer_caches, linear, ActDims, Acts, DecoderCall, DecoderStack, LayerCache,
    LinearIo, PagedShape,
};

use crate::config::{DepthConfig, DEPTH_RMS_EPS};
use crate::device::DeviceWeights;

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

/// Per-layer caches `[rows, max_position_embeddings, hidden]` for up to `rows` rows (one block
/// per row).
pub fn depth_caches<B: LmOps>(be: &B, c: &DepthConfig, rows: usize) -> Result<Vec<LayerCache<B>>> {
    let (layers, positions) = (c.num_layers, c.max_position_embeddings);
    layer_caches(be, layers, rows, positions, c.hidden_size)
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
    let io = LinearIo::new(
        input,
        &mut acts.residual,
        acts.scratch.view(),
        [rows, h, h],
        Epilogue::Store,
    );
    linear(be, &w.projection, io)?;
    be.add_row(AddRowArgs {
        x: &mut acts.residual,
        table: &w.pos_embedding,
        row: pos,
        n: rows,
        dim: h,
    })?;
    let stack = DecoderStack {
        layers: &w.depth_layers,
        norm: &w.depth_norm,
        rope: None,
        hidden: h,
        inter,
        q_heads: c.num_attention_heads,
        kv_heads: c.num_attention_heads,
        head_dim: c.head_dim(),
        eps: DEPTH_RMS_EPS,
        window: None,
    };
    let call = DecoderCall {
        caches,
        acts,
        start,
        block_tables: table,
        shape: PagedShape {
            rows,
            time: 1,
            block_size: c.max_position_embeddings,
            max_blocks: 1,
        },
        out: Some(out),
        chunk: None,
    };
    decoder_stack(be, &stack, call)
}
