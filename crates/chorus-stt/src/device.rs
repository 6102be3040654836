//! The STT LM's weights on the device, uploaded once from the Kyutai-layout host weights: the
//! layers as chorus-lm [`DecoderLayer`]s (`in_proj_weight` is already the fused q/k/v; its q and
//! k rows go from Kyutai's interleaved RoPE pairs to the rotate-half pairs `qk_norm_rope` runs,
//! which leaves every attention score as it was), the text and audio tables, the text head, the
//! VAD heads as one `[heads * classes, hidden]` linear, and the RoPE table.

use chorus_core::{BufRole, HostTensor, LmOps, Result};
use chorus_lm::{
    check_positional, interleaved_to_half, rope_table, sequence_layers, DecoderLayer, Linear,
};

use crate::config::SttConfig;
use crate::load::SttModel;
use crate::weights::LayerWeights;

/// Every weight the step reads.
pub struct DeviceWeights<B: LmOps> {
    /// `[text_vocab + 1, hidden]`.
    pub text_emb: B::Buf,
    /// `[codebooks * codebook_vocab, hidden]`.
    pub audio_emb: B::Buf,
    pub layers: Vec<DecoderLayer<B>>,
    pub out_norm: B::Buf,
    /// `[text_vocab, hidden]`.
    pub text_linear: Linear<B>,
    /// `[extra_heads * classes, hidden]`; `None` without VAD heads.
    pub vad: Option<Linear<B>>,
    /// `[positions, 2, head_dim / 2]`.
    pub rope: B::Buf,
}

fn dense<B: LmOps>(be: &B, data: &[f32]) -> Result<Linear<B>> {
    Ok(Linear::Dense(be.upload(data, BufRole::Weight)?))
}

/// `in_proj_weight` with its q and k rows in rotate-half order, v as stored.
fn qkv_rows(c: &SttConfig, in_proj: &HostTensor) -> Result<Vec<f32>> {
    let (h, q, kv) = (c.hidden_size, c.q_width(), c.kv_width());
    let part = |r0: usize, rows: usize| {
        HostTensor::new(
            vec![rows, h],
            in_proj.data[r0 * h..(r0 + rows) * h].to_vec(),
        )
    };
    let mut out = interleaved_to_half(&part(0, q)?, c.num_attention_heads, c.head_dim)?.data;
    out.extend(interleaved_to_half(&part(q, kv)?, c.num_key_value_heads, c.head_dim)?.data);
    out.extend_from_slice(&in_proj.data[(q + kv) * h..(q + 2 * kv) * h]);
    Ok(out)
}

fn layer<B: LmOps>(be: &B, c: &SttConfig, l: &LayerWeights) -> Result<DecoderLayer<B>> {
    Ok(DecoderLayer {
        input_layernorm: be.upload(&l.norm1.data, BufRole::Weight)?,
        qkv: dense(be, &qkv_rows(c, &l.in_proj)?)?,
        qk_norm: None,
        o_proj: dense(be, &l.out_proj.data)?,
        post_attention_layernorm: be.upload(&l.norm2.data, BufRole::Weight)?,
        // Rows 0..ffn_hidden through SiLU times the rest: the SwiGLU epilogue's split.
        gate_up: dense(be, &l.linear_in.data)?,
        down: dense(be, &l.linear_out.data)?,
    })
}

impl<B: LmOps> DeviceWeights<B> {
    /// Uploads `m` with a RoPE table of `positions` positions.
    pub fn upload(be: &B, m: &SttModel, positions: usize) -> Result<Self> {
        let (c, w) = (&m.config, &m.weights);
        let layers: Vec<_> = w
            .layers
            .iter()
            .map(|l| layer(be, c, l))
            .collect::<Result<_>>()?;
        check_positional(&layers, true)?;
        // Each step runs the layers once, then the next step again from the first.
        let dims = (c.hidden_size, c.q_width(), c.ffn_hidden);
        sequence_layers(be, &layers, dims, layers.first())?;
        let vad = if w.extra_heads.is_empty() {
            None
        } else {
            let rows: Vec<f32> = w
                .extra_heads
                .iter()
                .flat_map(|t| t.data.iter().copied())
                .collect();
            Some(dense(be, &rows)?)
        };
        let table = rope_table(positions, c.head_dim, f64::from(c.rope_theta));
        Ok(Self {
            text_emb: be.upload(&w.text_emb.data, BufRole::Weight)?,
            audio_emb: be.upload(&w.audio_emb.data, BufRole::Weight)?,
            layers,
            out_norm: be.upload(&w.out_norm.data, BufRole::Weight)?,
            text_linear: dense(be, &w.text_linear.data)?,
            vad,
            rope: be.upload(&table, BufRole::Table)?,
        })
    }
}
