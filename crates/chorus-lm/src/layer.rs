//! One pre-norm decoder layer's device weights, the shape every model family's transformer layers
//! share (Qwen3's LM, MiniMax's depth decoder, Llama-style models): a model crate maps its own
//! tensor names and fusions onto these fields at upload.

use chorus_core::LmOps;

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
