//! The Qwen3 forward pass over a paged KV cache (`MUSIC_SEMANTIC.md` §1.3), one function for
//! prefill (`time` = prompt length) and decode (`time` = 1): chorus-lm's decoder stack with
//! Qwen3's q/k norms and RoPE, then `model.norm` (`last_hidden`).

use chorus_core::{LmOps, Result};
use chorus_lm::{decoder_stack, ActDims, Acts, DecoderCall, DecoderStack};

use crate::config::Qwen3Config;
use crate::device::DeviceWeights;

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

/// Runs every layer on `call.acts.residual` (the input embeddings, `[rows * time, hidden]`) and
/// leaves the final-normed hidden of every token in `call.out` (`acts.scratch.normed` by
/// default).
pub fn lm_forward<B: LmOps>(
    be: &B,
    c: &Qwen3Config,
    w: &DeviceWeights<B>,
    call: DecoderCall<'_, B>,
) -> Result<()> {
    let stack = DecoderStack {
        layers: &w.lm_layers,
        norm: &w.norm,
        rope: Some(&w.rope),
        hidden: c.hidden_size,
        inter: c.intermediate_size,
        q_heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
        eps: c.rms_norm_eps as f32,
        window: None,
    };
    decoder_stack(be, &stack, call)
}
