//! What both networks' pre-norm blocks share: their activation buffers, and the MLP half (the
//! norm, fused gate/up and SwiGLU as one product, down with the residual add as another).

use chorus_core::lm_ops::{Epilogue, LinearScratch, RowNorm};
use chorus_core::{BufRole, LmOps, Result};

use crate::model::linear::{linear, Linear, LinearIo};

/// Widths of one block's activations, per token.
#[derive(Clone, Copy, Debug)]
pub struct ActDims {
    pub hidden: usize,
    /// Fused q/k/v output.
    pub qkv: usize,
    /// Attention output (q heads x head dim).
    pub attn: usize,
    pub inter: usize,
    /// Some linear is int8: the rotation scratch is as wide as the widest input.
    pub q8: bool,
}

/// Activation buffers of one network for up to `tokens` tokens.
pub struct Acts<B: LmOps> {
    /// `[tokens, hidden]`: the input, then the residual stream.
    pub residual: B::Buf,
    /// `[tokens, hidden]`: scratch of the pre-norms; after a call, the final-normed output.
    pub normed: B::Buf,
    pub qkv: B::Buf,
    pub attn: B::Buf,
    /// `[tokens, 2 * inter]`: scratch of products run apart from their epilogue.
    pub gate_up: B::Buf,
    pub act: B::Buf,
    /// `[tokens, widest input]`: the rotated input of an int8 product (one element when every
    /// linear is dense).
    pub rot: B::Buf,
}

impl<B: LmOps> Acts<B> {
    /// Buffers for up to `tokens` tokens of widths `d`.
    pub fn new(be: &B, tokens: usize, d: ActDims) -> Result<Self> {
        let z = |len: usize| be.zeros(len, BufRole::Activation);
        let widest = d.hidden.max(d.attn).max(d.inter);
        Ok(Self {
            rot: z(if d.q8 { tokens * widest } else { 1 })?,
            residual: z(tokens * d.hidden)?,
            normed: z(tokens * d.hidden)?,
            qkv: z(tokens * d.qkv)?,
            attn: z(tokens * d.attn)?,
            gate_up: z(tokens * 2 * d.inter)?,
            act: z(tokens * d.inter)?,
        })
    }
}

/// The MLP half's weights.
pub struct Mlp<'a, B: LmOps> {
    /// The post-attention norm.
    pub norm: &'a B::Buf,
    pub gate_up: &'a Linear<B>,
    pub down: &'a Linear<B>,
    pub eps: f32,
}

/// `residual += down(silu(gate(u)) * up(u))` with `u = norm(residual)`, for `n` tokens: two
/// fused products (the norm and SwiGLU in the first, the residual add in the second).
pub fn mlp_half<B: LmOps>(
    be: &B,
    acts: &mut Acts<B>,
    w: Mlp<'_, B>,
    (n, hidden, inter): (usize, usize, usize),
) -> Result<()> {
    let Acts {
        residual,
        normed,
        gate_up,
        act,
        rot,
        ..
    } = acts;
    let io = LinearIo {
        x: residual,
        norm: Some(RowNorm {
            weight: w.norm,
            eps: w.eps,
        }),
        out: act,
        scratch: LinearScratch {
            normed,
            rot,
            product: gate_up,
        },
        n,
        k: hidden,
        m: 2 * inter,
        epilogue: Epilogue::Swiglu,
    };
    linear(be, w.gate_up, io)?;
    let io = LinearIo {
        x: act,
        norm: None,
        out: residual,
        scratch: LinearScratch {
            normed,
            rot,
            product: gate_up,
        },
        n,
        k: inter,
        m: hidden,
        epilogue: Epilogue::Accumulate,
    };
    linear(be, w.down, io)
}
