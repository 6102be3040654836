//! The activation buffers of one decoder stack: allocated once for the most tokens a call may
//! run, so a step allocates nothing and a backend can capture it as a graph.

use chorus_core::lm_ops::LinearScratch;
use chorus_core::{BufRole, LmOps, Result};

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
    pub qkv: B::Buf,
    pub attn: B::Buf,
    pub act: B::Buf,
    /// The products' scratch; after a decoder stack, `scratch.normed` holds its final-normed
    /// output.
    pub scratch: Scratch<B>,
}

/// Intermediates of a backend that runs a product apart from its fusions ([`LinearScratch`]),
/// shared by every product of a network.
pub struct Scratch<B: LmOps> {
    /// `[tokens, hidden]`: the pre-norm's output.
    pub normed: B::Buf,
    /// `[tokens, widest input]`: the rotated input of an int8 product (one element when every
    /// linear is dense).
    pub rot: B::Buf,
    /// `[tokens, 2 * inter]`: the product before its epilogue.
    pub product: B::Buf,
}

impl<B: LmOps> Scratch<B> {
    /// The scratch as one product borrows it.
    pub fn view(&mut self) -> LinearScratch<'_, B> {
        LinearScratch {
            normed: &mut self.normed,
            rot: &mut self.rot,
            product: &mut self.product,
        }
    }
}

impl<B: LmOps> Acts<B> {
    /// Buffers for up to `tokens` tokens of widths `d`.
    pub fn new(be: &B, tokens: usize, d: ActDims) -> Result<Self> {
        let z = |len: usize| be.zeros(len, BufRole::Activation);
        let widest = d.hidden.max(d.attn).max(d.inter);
        Ok(Self {
            scratch: Scratch {
                rot: z(if d.q8 { tokens * widest } else { 1 })?,
                normed: z(tokens * d.hidden)?,
                product: z(tokens * 2 * d.inter)?,
            },
            residual: z(tokens * d.hidden)?,
            qkv: z(tokens * d.qkv)?,
            attn: z(tokens * d.attn)?,
            act: z(tokens * d.inter)?,
        })
    }
}
