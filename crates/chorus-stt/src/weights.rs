//! The tensor list of the STT LM under Kyutai's names and layout (`KYUTAI_STT.md` §2.1), and the
//! host weights loaded from it.
//!
//! One list, used twice: loading checks every (name, shape) of [`tensor_specs`] before it reads
//! any data, and `random.rs` draws weights from the same list. The layout is Kyutai's: one audio
//! table per codebook, the fused `in_proj_weight` (q, k, v rows, interleaved RoPE pairs), norm
//! gains `[1, 1, d]`, the text head without transformers' extra zero row. transformers' layout is
//! a view onto these names (`hf.rs`).

use chorus_core::checkpoint::{check, TensorSource};
use chorus_core::{HostTensor, Result};

use crate::config::SttConfig;

/// The text input table `[text_vocab + 1, hidden]`.
pub const TEXT_EMB: &str = "text_emb.weight";
/// The final norm's gain `[1, 1, hidden]`.
pub const OUT_NORM: &str = "out_norm.alpha";
/// The text head `[text_vocab, hidden]`.
pub const TEXT_LINEAR: &str = "text_linear.weight";
/// Prefix of the decoder layers.
pub const LAYERS: &str = "transformer.layers";

const OP: &str = "load_stt";

/// Codebook `k`'s audio table `[codebook_vocab, hidden]`.
pub fn audio_emb(k: usize) -> String {
    format!("emb.{k}.weight")
}

/// VAD head `h` `[extra_head_dim, hidden]`.
pub fn extra_head(h: usize) -> String {
    format!("extra_heads.{h}.weight")
}

/// How a tensor is initialised by the random models (its role in the model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    TextEmbedding,
    AudioEmbedding,
    Norm,
    /// `[out, in]`.
    Linear,
    /// The text head and the VAD heads `[classes, in]`.
    Head,
}

/// One checkpoint tensor: Kyutai name, shape, role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub role: Role,
}

fn spec(name: impl Into<String>, shape: &[usize], role: Role) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        shape: shape.to_vec(),
        role,
    }
}

/// The six tensors of one layer, Kyutai suffixes in checkpoint order.
pub const LAYER_TENSORS: [&str; 6] = [
    "norm1.alpha",
    "self_attn.in_proj_weight",
    "self_attn.out_proj.weight",
    "norm2.alpha",
    "gating.linear_in.weight",
    "gating.linear_out.weight",
];

/// Every tensor of the checkpoint in a fixed order: 2 617 118 720 parameters for stt-2.6b-en,
/// 989 253 632 for stt-1b-en_fr (its 49 152 VAD-head weights included).
pub fn tensor_specs(c: &SttConfig) -> Vec<TensorSpec> {
    let (h, f) = (c.hidden_size, c.ffn_hidden);
    let mut s: Vec<TensorSpec> = (0..c.num_codebooks)
        .map(|k| spec(audio_emb(k), &[c.codebook_vocab, h], Role::AudioEmbedding))
        .collect();
    s.push(spec(TEXT_EMB, &[c.text_rows(), h], Role::TextEmbedding));
    for l in 0..c.num_hidden_layers {
        let shapes: [(&[usize], Role); 6] = [
            (&[1, 1, h], Role::Norm),
            (&[c.qkv_width(), h], Role::Linear),
            (&[h, c.q_width()], Role::Linear),
            (&[1, 1, h], Role::Norm),
            (&[2 * f, h], Role::Linear),
            (&[h, f], Role::Linear),
        ];
        for (suffix, (shape, role)) in LAYER_TENSORS.iter().zip(shapes) {
            s.push(spec(format!("{LAYERS}.{l}.{suffix}"), shape, role));
        }
    }
    s.push(spec(OUT_NORM, &[1, 1, h], Role::Norm));
    s.push(spec(TEXT_LINEAR, &[c.text_vocab, h], Role::Head));
    for i in 0..c.extra_heads {
        s.push(spec(extra_head(i), &[c.extra_head_dim, h], Role::Head));
    }
    s
}

/// Parameters of the checkpoint.
pub fn parameter_count(c: &SttConfig) -> usize {
    tensor_specs(c)
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum()
}

/// One layer, Kyutai layout.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub norm1: HostTensor,
    /// `[q + k + v rows, hidden]`, interleaved RoPE pairs in the q and k rows.
    pub in_proj: HostTensor,
    pub out_proj: HostTensor,
    pub norm2: HostTensor,
    /// `[2 * ffn_hidden, hidden]`: rows `0..ffn_hidden` go through SiLU.
    pub linear_in: HostTensor,
    pub linear_out: HostTensor,
}

/// The STT LM's host weights, f32, Kyutai names and layout (module doc).
#[derive(Clone, Debug)]
pub struct SttWeights {
    /// `[codebooks * codebook_vocab, hidden]`: the codebooks' tables one after another (codebook
    /// `k`'s code `c` is row `k * codebook_vocab + c`), as `embed_sum` reads them.
    pub audio_emb: HostTensor,
    pub text_emb: HostTensor,
    pub layers: Vec<LayerWeights>,
    pub out_norm: HostTensor,
    pub text_linear: HostTensor,
    /// `extra_heads` × `[extra_head_dim, hidden]`.
    pub extra_heads: Vec<HostTensor>,
}

impl SttWeights {
    /// Checks every tensor of [`tensor_specs`] (presence, shape) and that `src` holds nothing
    /// else (the codec aside) before reading any data, then loads each tensor once.
    pub fn from_source(c: &SttConfig, src: &dyn TensorSource) -> Result<Self> {
        c.validate()?;
        let specs = tensor_specs(c);
        check_names(&specs, src)?;
        for s in &specs {
            check_shape(src, &s.name, &s.shape)?;
        }
        let load = |name: &str| -> Result<HostTensor> {
            let t = src.load(name)?;
            let expected = specs
                .iter()
                .find(|s| s.name == name)
                .map_or_else(Vec::new, |s| s.shape.clone());
            t.expect_shape(OP, name, &expected)?;
            Ok(t)
        };
        let mut audio = Vec::with_capacity(c.audio_rows() * c.hidden_size);
        for k in 0..c.num_codebooks {
            audio.extend_from_slice(&load(&audio_emb(k))?.data);
        }
        let layers = (0..c.num_hidden_layers)
            .map(|l| {
                let a = |i: usize| load(&format!("{LAYERS}.{l}.{}", LAYER_TENSORS[i]));
                Ok(LayerWeights {
                    norm1: a(0)?,
                    in_proj: a(1)?,
                    out_proj: a(2)?,
                    norm2: a(3)?,
                    linear_in: a(4)?,
                    linear_out: a(5)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            audio_emb: HostTensor::new(vec![c.audio_rows(), c.hidden_size], audio)?,
            text_emb: load(TEXT_EMB)?,
            layers,
            out_norm: load(OUT_NORM)?,
            text_linear: load(TEXT_LINEAR)?,
            extra_heads: (0..c.extra_heads)
                .map(|i| load(&extra_head(i)))
                .collect::<Result<_>>()?,
        })
    }
}

/// A present tensor's shape against the expected one, before its data is read.
pub fn check_shape(src: &dyn TensorSource, name: &str, expected: &[usize]) -> Result<()> {
    check::check_shape(OP, src, name, expected)
}

/// True for names a checkpoint may hold that the LM does not read: the codec of a transformers
/// checkpoint, non-persistent buffers some exports keep.
pub fn is_ignored(name: &str) -> bool {
    name.starts_with("codec_model.")
        || name.ends_with("audio_tokens_offsets")
        || name.ends_with("rotary_emb.inv_freq")
}

/// Refuses tensors the config has no place for (a layer count, codebook count or VAD-head
/// mismatch shows here).
fn check_names(specs: &[TensorSpec], src: &dyn TensorSource) -> Result<()> {
    check::refuse_unexpected(OP, src, |n| {
        is_ignored(n) || specs.iter().any(|s| s.name == n)
    })
}
