//! What both networks' pre-norm blocks share: their activation buffers, and the MLP half
//! (`residual += delta` fused with the norm, fused gate/up, SwiGLU, down into `delta`).

use chorus_core::lm_ops::{RmsNormArgs, SwigluArgs};
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
    /// `[tokens, hidden]`: the normed stream; after a call, the final-normed output.
    pub normed: B::Buf,
    pub qkv: B::Buf,
    pub attn: B::Buf,
    /// `[tokens, hidden]`: the attention output projection or the MLP's down output.
    pub delta: B::Buf,
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
            delta: z(tokens * d.hidden)?,
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

/// `normed = norm(residual += delta)`, then `delta = down(silu(gate(normed)) * up(normed))` for
/// `n` tokens; the residual add of `delta` is left to the next norm.
pub fn mlp_half<B: LmOps>(
    be: &B,
    acts: &mut Acts<B>,
    w: Mlp<'_, B>,
    (n, hidden, inter): (usize, usize, usize),
) -> Result<()> {
    be.rms_norm(RmsNormArgs {
        residual: &mut acts.residual,
        delta: Some(&acts.delta),
        weight: w.norm,
        out: &mut acts.normed,
        n,
        dim: hidden,
        eps: w.eps,
    })?;
    let io = LinearIo {
        x: &acts.normed,
        rot: &mut acts.rot,
        out: &mut acts.gate_up,
        n,
        k: hidden,
        m: 2 * inter,
    };
    linear(be, w.gate_up, io)?;
    be.swiglu(SwigluArgs {
        x: &acts.gate_up,
        out: &mut acts.act,
        n,
        inter,
    })?;
    let io = LinearIo {
        x: &acts.act,
        rot: &mut acts.rot,
        out: &mut acts.delta,
        n,
        k: inter,
        m: hidden,
    };
    linear(be, w.down, io)
}
