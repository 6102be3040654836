//! Weights on the device, uploaded once from the fused host weights, and the RoPE table. Linears
//! keep their stored form, dense or int8 ConvRot (`chorus_lm::Linear`); both networks' layers
//! are chorus-lm's [`DecoderLayer`], the depth decoder's without q/k norms.

use chorus_core::{BufRole, LmOps, Result};
use chorus_lm::{
    check_positional, rope_table, sequence_layers, DecoderLayer, HostLinear, Linear, QkNorm,
};

use crate::config::ROPE_POSITIONS;
use crate::load::MusicModel;
use crate::weights::{DepthLayer, LmLayer};

/// Both models on the device.
pub struct DeviceWeights<B: LmOps> {
    pub embed_tokens: B::Buf,
    pub lm_layers: Vec<DecoderLayer<B>>,
    pub norm: B::Buf,
    pub audio_head: B::Buf,
    /// `[ROPE_POSITIONS, 2, head_dim / 2]`: cos, then sin.
    pub rope: B::Buf,
    pub audio_embeddings: B::Buf,
    pub projection: Linear<B>,
    pub pos_embedding: B::Buf,
    pub depth_layers: Vec<DecoderLayer<B>>,
    pub depth_norm: B::Buf,
    pub audio_heads: Vec<Linear<B>>,
}

impl<B: LmOps> DeviceWeights<B> {
    /// Uploads `m` (host weights stay with the caller, who may drop them).
    pub fn upload(be: &B, m: &MusicModel) -> Result<Self> {
        let w = |t: &chorus_core::HostTensor| be.upload(&t.data, BufRole::Weight);
        let lin = |l: &HostLinear| Linear::upload(be, l);
        let lm_layer = |l: &LmLayer| -> Result<DecoderLayer<B>> {
            Ok(DecoderLayer {
                input_layernorm: w(&l.input_layernorm)?,
                qkv: lin(&l.qkv)?,
                qk_norm: Some(QkNorm {
                    q: w(&l.q_norm)?,
                    k: w(&l.k_norm)?,
                }),
                o_proj: lin(&l.o_proj)?,
                post_attention_layernorm: w(&l.post_attention_layernorm)?,
                gate_up: lin(&l.gate_up)?,
                down: lin(&l.down)?,
            })
        };
        let depth_layer = |l: &DepthLayer| -> Result<DecoderLayer<B>> {
            Ok(DecoderLayer {
                input_layernorm: w(&l.input_layernorm)?,
                qkv: lin(&l.qkv)?,
                qk_norm: None,
                o_proj: lin(&l.to_out)?,
                post_attention_layernorm: w(&l.post_attention_layernorm)?,
                gate_up: lin(&l.gate_up)?,
                down: lin(&l.down)?,
            })
        };
        let lm_layers: Vec<_> = m.lm.layers.iter().map(lm_layer).collect::<Result<_>>()?;
        let depth_layers: Vec<_> = m
            .depth
            .layers
            .iter()
            .map(depth_layer)
            .collect::<Result<_>>()?;
        // Qwen3: q/k norms with RoPE; the depth decoder: neither (learnt positions).
        check_positional(&lm_layers, true)?;
        check_positional(&depth_layers, false)?;
        // A frame runs the depth decoder once per level, then the LM, then the next frame's
        // depth decoder.
        let (lc, dc) = (&m.lm_config, &m.depth_config);
        let depth_dims = (dc.hidden_size, dc.hidden_size, dc.intermediate_size);
        sequence_layers(be, &depth_layers, depth_dims, depth_layers.first())?;
        let lm_dims = (
            lc.hidden_size,
            lc.num_attention_heads * lc.head_dim,
            lc.intermediate_size,
        );
        sequence_layers(be, &lm_layers, lm_dims, depth_layers.first())?;
        Ok(Self {
            embed_tokens: w(&m.lm.embed_tokens)?,
            lm_layers,
            norm: w(&m.lm.norm)?,
            audio_head: w(&m.lm.audio_head)?,
            rope: be.upload(
                &rope_table(ROPE_POSITIONS, m.lm_config.head_dim, m.lm_config.theta()),
                BufRole::Table,
            )?,
            audio_embeddings: w(&m.depth.audio_embeddings)?,
            projection: lin(&m.depth.projection)?,
            pos_embedding: w(&m.depth.pos_embedding)?,
            depth_layers,
            depth_norm: w(&m.depth.norm)?,
            audio_heads: m.depth.audio_heads.iter().map(lin).collect::<Result<_>>()?,
        })
    }

    /// True when an LM layer linear is int8 (LM activations then need a rotation scratch).
    pub fn lm_q8(&self) -> bool {
        self.lm_layers.iter().any(DecoderLayer::is_q8)
    }

    /// True when a depth-decoder linear (projection, layers, heads) is int8.
    pub fn depth_q8(&self) -> bool {
        self.projection.is_q8()
            || self.audio_heads.iter().any(Linear::is_q8)
            || self.depth_layers.iter().any(DecoderLayer::is_q8)
    }
}
