//! Weights on the device, uploaded once from the fused host weights, and the RoPE table. Linears
//! keep their stored form, dense or int8 ConvRot (`model/linear.rs`).

use chorus_core::{BufRole, LmOps, Result};

use crate::config::{Qwen3Config, ROPE_POSITIONS};
use crate::load::MusicModel;
use crate::model::linear::Linear;
use crate::quant::HostLinear;
use crate::weights::{DepthLayer, LmLayer};

/// One LM layer on the device.
pub struct LmLayerBufs<B: LmOps> {
    pub input_layernorm: B::Buf,
    pub qkv: Linear<B>,
    pub q_norm: B::Buf,
    pub k_norm: B::Buf,
    pub o_proj: Linear<B>,
    pub post_attention_layernorm: B::Buf,
    pub gate_up: Linear<B>,
    pub down: Linear<B>,
}

/// One depth-decoder layer on the device.
pub struct DepthLayerBufs<B: LmOps> {
    pub input_layernorm: B::Buf,
    pub qkv: Linear<B>,
    pub to_out: Linear<B>,
    pub post_attention_layernorm: B::Buf,
    pub gate_up: Linear<B>,
    pub down: Linear<B>,
}

/// Both models on the device.
pub struct DeviceWeights<B: LmOps> {
    pub embed_tokens: B::Buf,
    pub lm_layers: Vec<LmLayerBufs<B>>,
    pub norm: B::Buf,
    pub audio_head: B::Buf,
    /// `[ROPE_POSITIONS, 2, head_dim / 2]`: cos, then sin.
    pub rope: B::Buf,
    pub audio_embeddings: B::Buf,
    pub projection: Linear<B>,
    pub pos_embedding: B::Buf,
    pub depth_layers: Vec<DepthLayerBufs<B>>,
    pub depth_norm: B::Buf,
    pub audio_heads: Vec<Linear<B>>,
}

impl<B: LmOps> DeviceWeights<B> {
    /// Uploads `m` (host weights stay with the caller, who may drop them).
    pub fn upload(be: &B, m: &MusicModel) -> Result<Self> {
        let w = |t: &chorus_core::HostTensor| be.upload(&t.data, BufRole::Weight);
        let lin = |l: &HostLinear| Linear::upload(be, l);
        let lm_layer = |l: &LmLayer| -> Result<LmLayerBufs<B>> {
            Ok(LmLayerBufs {
                input_layernorm: w(&l.input_layernorm)?,
                qkv: lin(&l.qkv)?,
                q_norm: w(&l.q_norm)?,
                k_norm: w(&l.k_norm)?,
                o_proj: lin(&l.o_proj)?,
                post_attention_layernorm: w(&l.post_attention_layernorm)?,
                gate_up: lin(&l.gate_up)?,
                down: lin(&l.down)?,
            })
        };
        let depth_layer = |l: &DepthLayer| -> Result<DepthLayerBufs<B>> {
            Ok(DepthLayerBufs {
                input_layernorm: w(&l.input_layernorm)?,
                qkv: lin(&l.qkv)?,
                to_out: lin(&l.to_out)?,
                post_attention_layernorm: w(&l.post_attention_layernorm)?,
                gate_up: lin(&l.gate_up)?,
                down: lin(&l.down)?,
            })
        };
        Ok(Self {
            embed_tokens: w(&m.lm.embed_tokens)?,
            lm_layers: m.lm.layers.iter().map(lm_layer).collect::<Result<_>>()?,
            norm: w(&m.lm.norm)?,
            audio_head: w(&m.lm.audio_head)?,
            rope: be.upload(&rope_table(&m.lm_config), BufRole::Table)?,
            audio_embeddings: w(&m.depth.audio_embeddings)?,
            projection: lin(&m.depth.projection)?,
            pos_embedding: w(&m.depth.pos_embedding)?,
            depth_layers: m
                .depth
                .layers
                .iter()
                .map(depth_layer)
                .collect::<Result<_>>()?,
            depth_norm: w(&m.depth.norm)?,
            audio_heads: m.depth.audio_heads.iter().map(lin).collect::<Result<_>>()?,
        })
    }

    /// True when an LM layer linear is int8 (LM activations then need a rotation scratch).
    pub fn lm_q8(&self) -> bool {
        self.lm_layers.iter().any(|l| {
            [&l.qkv, &l.o_proj, &l.gate_up, &l.down]
                .iter()
                .any(|x| x.is_q8())
        })
    }

    /// True when a depth-decoder linear (projection, layers, heads) is int8.
    pub fn depth_q8(&self) -> bool {
        self.projection.is_q8()
            || self.audio_heads.iter().any(Linear::is_q8)
            || self.depth_layers.iter().any(|l| {
                [&l.qkv, &l.to_out, &l.gate_up, &l.down]
                    .iter()
                    .any(|x| x.is_q8())
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
