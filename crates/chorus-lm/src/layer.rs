//! One pre-norm decoder layer's device weights, the shape every model family's transformer layers
//! share (Qwen3's LM, MiniMax's depth decoder, Llama-style models): a model crate maps its own
//! tensor names and fusions onto these fields at upload.

use chorus_core::lm_ops::SequencedWeight;
use chorus_core::{LmOps, Result};

use crate::linear::Linear;

/// Per-head RMSNorm weights `[head_dim]` of q and k, applied before RoPE (Qwen3).
pub struct QkNorm<B: LmOps> {
    pub q: B::Buf,
    pub k: B::Buf,
}

/// One decoder layer on the device.
pub struct DecoderLayer<B: LmOps> {
    pub input_layernorm: B::Buf,
    /// Fused q/k/v `[(q_heads + 2 * kv_heads) * head_dim, hidden]`.
    pub qkv: Linear<B>,
    /// `None` for a model without q/k norms.
    pub qk_norm: Option<QkNorm<B>>,
    pub o_proj: Linear<B>,
    pub post_attention_layernorm: B::Buf,
    /// Fused gate/up `[2 * inter, hidden]`.
    pub gate_up: Linear<B>,
    pub down: Linear<B>,
}

impl<B: LmOps> DecoderLayer<B> {
    /// True when a linear of the layer is int8 (its activations then need a rotation scratch).
    pub fn is_q8(&self) -> bool {
        [&self.qkv, &self.o_proj, &self.gate_up, &self.down]
            .iter()
            .any(|x| x.is_q8())
    }
}

fn step<B: LmOps>(lin: &Linear<B>, k: usize, swiglu: bool) -> SequencedWeight<'_, B> {
    SequencedWeight {
        w: lin.weight(),
        k,
        swiglu,
    }
}

/// Tells `be` the order in which a step's products read `layers`' weights
/// ([`LmOps::sequence_weights`]): q/k/v, o, gate/up and down of each layer in turn, then `then`'s
/// q/k/v (the stack a step runs next, or the first layer again for a stack run once per level).
/// `q_width`: o_proj's input, q heads times head_dim.
pub fn sequence_layers<B: LmOps>(
    be: &B,
    layers: &[DecoderLayer<B>],
    (hidden, q_width, inter): (usize, usize, usize),
    then: Option<&DecoderLayer<B>>,
) -> Result<()> {
    let mut seq = Vec::with_capacity(4 * layers.len() + 1);
    for l in layers {
        seq.push(step(&l.qkv, hidden, false));
        seq.push(step(&l.o_proj, q_width, false));
        seq.push(step(&l.gate_up, hidden, true));
        seq.push(step(&l.down, inter, false));
    }
    if let Some(t) = then {
        seq.push(step(&t.qkv, hidden, false));
    }
    be.sequence_weights(&seq)
}
