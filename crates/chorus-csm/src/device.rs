//! CSM's weights on the device, uploaded once from the HF-layout host weights: both decoders as
//! chorus-lm [`DecoderLayer`]s (q/k/v and gate/up fused here, RoPE without q/k norm), the two
//! embedding tables, the heads as `[out, in]` linears (each level's `codebooks_head` slice
//! transposed here, once), and each decoder's llama3-scaled RoPE table.

use chorus_core::{BufRole, Error, HostTensor, LmOps, Result};
use chorus_lm::{
    check_positional, rope_table_scaled, sequence_layers, DecoderLayer, HostLinear, Linear,
};

use crate::config::{CsmConfig, LlamaConfig};
use crate::load::CsmModel;
use crate::weights::{DecoderWeights, LayerWeights};

/// One decoder on the device.
pub struct DeviceDecoder<B: LmOps> {
    pub layers: Vec<DecoderLayer<B>>,
    pub norm: B::Buf,
    /// `[positions, 2, head_dim / 2]` (llama3-scaled frequencies).
    pub rope: B::Buf,
}

/// Every weight the frame program and the prefill read.
pub struct DeviceWeights<B: LmOps> {
    /// `[text_vocab, backbone_hidden]`.
    pub text_embeddings: B::Buf,
    /// `[codebooks * audio_vocab, backbone_hidden]`, shared by the backbone's input and the depth
    /// decoder's (tied, `CSM.md` §1.2).
    pub audio_embeddings: B::Buf,
    pub backbone: DeviceDecoder<B>,
    /// Codebook 0's head `[audio_vocab, backbone_hidden]`.
    pub lm_head: Linear<B>,
    /// `[depth_hidden, backbone_hidden]`.
    pub projector: Linear<B>,
    pub depth: DeviceDecoder<B>,
    /// Level `k`'s head (`k` = 1..codebooks) at `k - 1`: `[audio_vocab, depth_hidden]`.
    pub heads: Vec<Linear<B>>,
}

fn dense<B: LmOps>(be: &B, t: &HostTensor) -> Result<Linear<B>> {
    Ok(Linear::Dense(be.upload(&t.data, BufRole::Weight)?))
}

/// One layer with q/k/v and gate/up fused along the output axis.
fn layer<B: LmOps>(be: &B, l: &LayerWeights) -> Result<DecoderLayer<B>> {
    let fused = |parts: &[&HostTensor]| -> Result<Linear<B>> {
        let parts = parts
            .iter()
            .map(|t| HostLinear::Dense((*t).clone()))
            .collect();
        Linear::upload(be, &HostLinear::concat_rows(parts)?)
    };
    Ok(DecoderLayer {
        input_layernorm: be.upload(&l.input_layernorm.data, BufRole::Weight)?,
        qkv: fused(&[&l.q_proj, &l.k_proj, &l.v_proj])?,
        qk_norm: None,
        o_proj: dense(be, &l.o_proj)?,
        post_attention_layernorm: be.upload(&l.post_attention_layernorm.data, BufRole::Weight)?,
        gate_up: fused(&[&l.gate_proj, &l.up_proj])?,
        down: dense(be, &l.down_proj)?,
    })
}

fn decoder<B: LmOps>(
    be: &B,
    c: &LlamaConfig,
    w: &DecoderWeights,
    positions: usize,
) -> Result<DeviceDecoder<B>> {
    let layers: Vec<_> = w
        .layers
        .iter()
        .map(|l| layer(be, l))
        .collect::<Result<_>>()?;
    // Llama-style: RoPE with no q/k norm.
    check_positional(&layers, true)?;
    let table = rope_table_scaled(positions, c.head_dim, f64::from(c.rope_theta), c.rope());
    Ok(DeviceDecoder {
        layers,
        norm: be.upload(&w.norm.data, BufRole::Weight)?,
        rope: be.upload(&table, BufRole::Table)?,
    })
}

/// `codebooks_head` `[levels, in, out]` as one `[out, in]` linear per level.
fn level_heads<B: LmOps>(be: &B, c: &CsmConfig, head: &HostTensor) -> Result<Vec<Linear<B>>> {
    let &[levels, d, v] = head.shape.as_slice() else {
        return Err(Error::config(
            "DeviceWeights::upload",
            format!("codebooks_head is {:?}, not 3-D", head.shape),
        ));
    };
    if levels + 1 != c.num_codebooks {
        return Err(Error::config(
            "DeviceWeights::upload",
            format!(
                "codebooks_head has {levels} levels for {} codebooks",
                c.num_codebooks
            ),
        ));
    }
    (0..levels)
        .map(|k| {
            let slice = &head.data[k * d * v..(k + 1) * d * v];
            let mut t = vec![0f32; d * v];
            for i in 0..d {
                for o in 0..v {
                    t[o * d + i] = slice[i * v + o];
                }
            }
            Ok(Linear::Dense(be.upload(&t, BufRole::Weight)?))
        })
        .collect()
}

impl<B: LmOps> DeviceWeights<B> {
    /// Uploads `m`; the backbone's RoPE table covers its `max_position_embeddings`, the depth
    /// decoder's the `codebooks` positions of a frame.
    pub fn upload(be: &B, m: &CsmModel) -> Result<Self> {
        let (c, w) = (&m.config, &m.weights);
        let weights = Self {
            text_embeddings: be.upload(&w.text_embeddings.data, BufRole::Weight)?,
            audio_embeddings: be.upload(&w.audio_embeddings.data, BufRole::Weight)?,
            backbone: decoder(
                be,
                &c.backbone,
                &w.backbone,
                c.backbone.max_position_embeddings,
            )?,
            lm_head: dense(be, &w.lm_head)?,
            projector: dense(be, &w.projector)?,
            depth: decoder(be, &c.depth, &w.depth, c.num_codebooks)?,
            heads: level_heads(be, c, &w.codebooks_head)?,
        };
        // A frame runs the backbone, then the depth decoder once per level.
        let dims = |l: &LlamaConfig| {
            (
                l.hidden_size,
                l.num_attention_heads * l.head_dim,
                l.intermediate_size,
            )
        };
        let (bb, depth) = (&weights.backbone.layers, &weights.depth.layers);
        sequence_layers(be, depth, dims(&c.depth), depth.first())?;
        sequence_layers(be, bb, dims(&c.backbone), depth.first())?;
        Ok(weights)
    }
}
