//! Weights on the device, uploaded once from the fused host weights, and the RoPE table.

use chorus_core::{Backend, BufRole, Result};

use crate::config::{Qwen3Config, ROPE_POSITIONS};
use crate::load::MusicModel;
use crate::weights::{DepthLayer, LmLayer};

/// One LM layer on the device.
pub struct LmLayerBufs<B: Backend> {
    pub input_layernorm: B::Buf,
    pub qkv: B::Buf,
    pub q_norm: B::Buf,
    pub k_norm: B::Buf,
    pub o_proj: B::Buf,
    pub post_attention_layernorm: B::Buf,
    pub gate_up: B::Buf,
    pub down: B::Buf,
}

/// One depth-decoder layer on the device.
pub struct DepthLayerBufs<B: Backend> {
    pub input_layernorm: B::Buf,
    pub qkv: B::Buf,
    pub to_out: B::Buf,
    pub post_attention_layernorm: B::Buf,
    pub gate_up: B::Buf,
    pub down: B::Buf,
}

/// Both models on the device.
pub struct DeviceWeights<B: Backend> {
    pub embed_tokens: B::Buf,
    pub lm_layers: Vec<LmLayerBufs<B>>,
    pub norm: B::Buf,
    pub audio_head: B::Buf,
    /// `[ROPE_POSITIONS, 2, head_dim / 2]`: cos, then sin.
    pub rope: B::Buf,
    pub audio_embeddings: B::Buf,
    pub projection: B::Buf,
    pub pos_embedding: B::Buf,
    pub depth_layers: Vec<DepthLayerBufs<B>>,
    pub depth_norm: B::Buf,
    pub audio_heads: Vec<B::Buf>,
}

impl<B: Backend> DeviceWeights<B> {
    /// Uploads `m` (host weights stay with the caller, who may drop them).
    pub fn upload(be: &B, m: &MusicModel) -> Result<Self> {
        let w = |t: &chorus_core::HostTensor| be.upload(&t.data, BufRole::Weight);
        let lm_layer = |l: &LmLayer| -> Result<LmLayerBufs<B>> {
            Ok(LmLayerBufs {
                input_layernorm: w(&l.input_layernorm)?,
                qkv: w(&l.qkv)?,
                q_norm: w(&l.q_norm)?,
                k_norm: w(&l.k_norm)?,
                o_proj: w(&l.o_proj)?,
                post_attention_layernorm: w(&l.post_attention_layernorm)?,
                gate_up: w(&l.gate_up)?,
                down: w(&l.down)?,
            })
        };
        let depth_layer = |l: &DepthLayer| -> Result<DepthLayerBufs<B>> {
            Ok(DepthLayerBufs {
                input_layernorm: w(&l.input_layernorm)?,
                qkv: w(&l.qkv)?,
                to_out: w(&l.to_out)?,
                post_attention_layernorm: w(&l.post_attention_layernorm)?,
                gate_up: w(&l.gate_up)?,
                down: w(&l.down)?,
            })
        };
        Ok(Self {
            embed_tokens: w(&m.lm.embed_tokens)?,
            lm_layers: m.lm.layers.iter().map(lm_layer).collect::<Result<_>>()?,
            norm: w(&m.lm.norm)?,
            audio_head: w(&m.lm.audio_head)?,
            rope: be.upload(&rope_table(&m.lm_config), BufRole::Table)?,
            audio_embeddings: w(&m.depth.audio_embeddings)?,
            projection: w(&m.depth.projection)?,
            pos_embedding: w(&m.depth.pos_embedding)?,
            depth_layers: m
                .depth
                .layers
                .iter()
                .map(depth_layer)
                .collect::<Result<_>>()?,
            depth_norm: w(&m.depth.norm)?,
            audio_heads: m.depth.audio_heads.iter().map(w).collect::<Result<_>>()?,
        })
    }
}

/// The RoPE table as transformers builds it (`modeling_rope_utils._compute_default_rope_parameters`,
/// `Qwen3RotaryEmbedding.forward`): `inv_freq[j] = 1 / theta^(2j / d)` in f32, the angle
/// `p * inv_freq[j]` rounded to f32, then its cos and sin (taken in f64 and rounded).
pub fn rope_table(c: &Qwen3Config) -> Vec<f32> {
    let half = c.head_dim / 2;
    let theta = c.theta() as f32;
    let inv_freq: Vec<f32> = (0..half)
        .map(|j| 1.0 / theta.powf((2 * j) as f32 / c.head_dim as f32))
        .collect();
    let mut t = Vec::with_capacity(ROPE_POSITIONS * 2 * half);
    for p in 0..ROPE_POSITIONS {
        let angles: Vec<f64> = inv_freq.iter().map(|&f| (p as f32 * f) as f64).collect();
        t.extend(angles.iter().map(|a| a.cos() as f32));
        t.extend(angles.iter().map(|a| a.sin() as f32));
    }
    t
}
