//! The streaming transformer layers shared by the decoder and the encoder (the same module,
//! `MimiTransformerModel`, under `decoder_transformer` and `encoder_transformer`).

use crate::prepare::PreparedLayer;
use crate::state::StateBuf;
use crate::MimiConfig;
use chorus_core::{
    AttentionArgs, AttentionGeom, Backend, BufRole, LayerNormArgs, LinearArgs, NormLinearArgs,
    Result,
};

/// The activations the layers read and write, each `[tokens, ...]`.
pub struct LayerActs<B: Backend> {
    /// The residual stream `[tokens, hidden]`, updated in place.
    pub h: B::Buf,
    pub norm: B::Buf,
    pub qkv: B::Buf,
    pub attn: B::Buf,
    pub mlp: B::Buf,
}

impl<B: Backend> LayerActs<B> {
    /// Buffers for up to `tokens` token rows.
    pub(crate) fn new(be: &B, cfg: &MimiConfig, tokens: usize) -> Result<Self> {
        let a = |n: usize| be.zeros(tokens * n, BufRole::Activation);
        let hid = cfg.hidden_size;
        Ok(Self {
            h: a(hid)?,
            norm: a(hid)?,
            qkv: a(3 * hid)?,
            attn: a(hid)?,
            mlp: a(cfg.intermediate_size)?,
        })
    }
}

/// The rows of one step and the per-slot state the attention reads.
pub(crate) struct LayerStep<'a, B: Backend> {
    pub cfg: &'a MimiConfig,
    pub rows: usize,
    /// New tokens per row.
    pub time: usize,
    pub ring: usize,
    pub slots: &'a B::Ints,
    pub tokens: &'a B::Ints,
}

/// Runs every layer over the step's tokens; positions are not advanced here.
pub(crate) fn run_layers<B: Backend>(
    be: &B,
    step: &LayerStep<'_, B>,
    layers: &[PreparedLayer<B>],
    kv: &mut [StateBuf<B>],
    b: &mut LayerActs<B>,
) -> Result<()> {
    let cfg = step.cfg;
    let hid = cfg.hidden_size;
    let n = step.rows * step.time;
    let geom = AttentionGeom {
        rows: step.rows,
        time: step.time,
        heads: cfg.num_attention_heads,
        head_dim: cfg.head_dim(),
        ring: step.ring,
        window: cfg.sliding_window,
        rope_theta: cfg.rope_theta() as f32,
    };
    let eps = cfg.norm_eps as f32;
    let LayerActs {
        h,
        norm,
        qkv,
        attn,
        mlp,
    } = b;
    for (l, kv) in layers.iter().zip(kv.iter_mut()) {
        be.layer_norm_linear(NormLinearArgs {
            norm: LayerNormArgs {
                x: h,
                gamma: &l.norm1_w,
                beta: &l.norm1_b,
                out: norm,
                n,
                dim: hid,
                eps,
            },
            w: &l.qkv,
            out: qkv,
            m: 3 * hid,
            gelu: false,
        })?;
        be.attention(AttentionArgs {
            qkv,
            kv: &mut kv.buf,
            tokens: step.tokens,
            slots: step.slots,
            out: attn,
            geom,
        })?;
        // The layer scale is in `o`'s rows: the residual update is the product itself.
        be.linear_acc(LinearArgs {
            x: attn,
            w: &l.o,
            out: h,
            n,
            k: hid,
            m: hid,
        })?;
        let inter = cfg.intermediate_size;
        be.layer_norm_linear(NormLinearArgs {
            norm: LayerNormArgs {
                x: h,
                gamma: &l.norm2_w,
                beta: &l.norm2_b,
                out: norm,
                n,
                dim: hid,
                eps,
            },
            w: &l.fc1,
            out: mlp,
            m: inter,
            gelu: true,
        })?;
        be.linear_acc(LinearArgs {
            x: mlp,
            w: &l.fc2,
            out: h,
            n,
            k: inter,
            m: hid,
        })?;
    }
    Ok(())
}
