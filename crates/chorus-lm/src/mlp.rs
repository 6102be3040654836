//! The MLP half of a pre-norm block: the norm, fused gate/up and SwiGLU as one product, down
//! with the residual add as another.

use chorus_core::lm_ops::Epilogue;
use chorus_core::{LmOps, Result};

use crate::acts::Acts;
use crate::linear::{linear, Linear, LinearIo};

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
        act,
        scratch,
        ..
    } = acts;
    let io = LinearIo::new(
        residual,
        act,
        scratch.view(),
        [n, hidden, 2 * inter],
        Epilogue::Swiglu,
    );
    linear(be, w.gate_up, io.normed(w.norm, w.eps))?;
    let io = LinearIo::new(
        act,
        residual,
        scratch.view(),
        [n, inter, hidden],
        Epilogue::Accumulate,
    );
    linear(be, w.down, io)
}
