//! The tensor list of CSM under transformers' names and layout (`CSM.md` §2.2), and the host
//! weights loaded from it.
//!
//! One list, used twice: loading checks every (name, shape) of [`tensor_specs`] before it reads
//! any data, and `random.rs` draws weights from the same list. The layout is HF's: q/k rows in
//! rotate-half order, linears `[out, in]`, `codebooks_head` `[codebooks - 1, depth_hidden,
//! audio_vocab]` as stored (`[in, out]` per level, applied as `h @ W[level - 1]`). The audio table
//! is one tensor: transformers ties the depth decoder's `embed_tokens` to the backbone's.

use chorus_core::checkpoint::{check, TensorSource};
use chorus_core::{Error, HostTensor, Result};

use crate::config::{CsmConfig, LlamaConfig};

/// The text embedding table `[text_vocab, backbone_hidden]`.
pub const TEXT_EMBED: &str = "embed_text_tokens.weight";
/// The audio embedding table `[codebooks * audio_vocab, backbone_hidden]`.
pub const AUDIO_EMBED: &str = "backbone_model.embed_tokens.embed_audio_tokens.weight";
/// The depth decoder's name of the same (tied) audio table.
pub const DEPTH_AUDIO_EMBED: &str = "depth_decoder.model.embed_tokens.weight";
/// Codebook 0's head `[audio_vocab, backbone_hidden]` (Sesame's `codebook0_head`).
pub const LM_HEAD: &str = "lm_head.weight";
/// The depth decoder's input projection `[depth_hidden, backbone_hidden]`.
pub const PROJECTOR: &str = "depth_decoder.model.inputs_embeds_projector.weight";
/// The depth heads `[codebooks - 1, depth_hidden, audio_vocab]`.
pub const CODEBOOKS_HEAD: &str = "depth_decoder.codebooks_head.weight";
/// Prefix of the backbone's layers and norm.
pub const BACKBONE: &str = "backbone_model";
/// Prefix of the depth decoder's layers and norm.
pub const DEPTH: &str = "depth_decoder.model";
/// Tensors of the checkpoint that are not CSM's (the Mimi codec; Chorus has its own).
pub const CODEC_PREFIX: &str = "codec_model.";

const OP: &str = "load_csm";

/// How a tensor is initialised by the random models (its role in the model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    TextEmbedding,
    AudioEmbedding,
    Norm,
    /// `[out, in]`.
    Linear,
    /// `lm_head` `[vocab, in]` or `codebooks_head` `[levels, in, vocab]`.
    Head,
}

/// One checkpoint tensor: HF name, shape, role.
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

/// The nine tensors of one decoder layer, HF suffixes in checkpoint order.
pub const LAYER_TENSORS: [&str; 9] = [
    "input_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
];

/// One decoder's layers and final norm under `prefix`.
fn decoder_specs(prefix: &str, c: &LlamaConfig, out: &mut Vec<TensorSpec>) {
    let (h, i, q, kv) = (
        c.hidden_size,
        c.intermediate_size,
        c.q_width(),
        c.kv_width(),
    );
    for l in 0..c.num_hidden_layers {
        let shapes: [(&[usize], Role); 9] = [
            (&[h], Role::Norm),
            (&[q, h], Role::Linear),
            (&[kv, h], Role::Linear),
            (&[kv, h], Role::Linear),
            (&[h, q], Role::Linear),
            (&[h], Role::Norm),
            (&[i, h], Role::Linear),
            (&[i, h], Role::Linear),
            (&[h, i], Role::Linear),
        ];
        for (suffix, (shape, role)) in LAYER_TENSORS.iter().zip(shapes) {
            out.push(spec(format!("{prefix}.layers.{l}.{suffix}"), shape, role));
        }
    }
    out.push(spec(format!("{prefix}.norm.weight"), &[h], Role::Norm));
}

/// Every tensor of the HF checkpoint in a fixed order, the tied audio table once (under
/// [`AUDIO_EMBED`]); 1 552 791 552 parameters at csm-1b's size.
pub fn tensor_specs(c: &CsmConfig) -> Vec<TensorSpec> {
    let (h, dh, v) = (
        c.backbone.hidden_size,
        c.depth.hidden_size,
        c.audio_vocab_size,
    );
    let mut s = vec![
        spec(TEXT_EMBED, &[c.text_vocab_size, h], Role::TextEmbedding),
        spec(AUDIO_EMBED, &[c.audio_rows(), h], Role::AudioEmbedding),
    ];
    decoder_specs(BACKBONE, &c.backbone, &mut s);
    s.push(spec(LM_HEAD, &[v, h], Role::Head));
    s.push(spec(PROJECTOR, &[dh, h], Role::Linear));
    decoder_specs(DEPTH, &c.depth, &mut s);
    s.push(spec(
        CODEBOOKS_HEAD,
        &[c.num_codebooks - 1, dh, v],
        Role::Head,
    ));
    s
}

/// Parameters of the checkpoint (the tied table counted once).
pub fn parameter_count(c: &CsmConfig) -> usize {
    tensor_specs(c)
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum()
}

/// One decoder layer, HF layout (q/k rows rotate-half within each head).
#[derive(Clone, Debug)]
pub struct LayerWeights {
    pub input_layernorm: HostTensor,
    pub q_proj: HostTensor,
    pub k_proj: HostTensor,
    pub v_proj: HostTensor,
    pub o_proj: HostTensor,
    pub post_attention_layernorm: HostTensor,
    pub gate_proj: HostTensor,
    pub up_proj: HostTensor,
    pub down_proj: HostTensor,
}

impl LayerWeights {
    /// The tensor of HF suffix `suffix` (one of [`LAYER_TENSORS`]).
    pub fn get(&self, suffix: &str) -> Option<&HostTensor> {
        Some(match suffix {
            "input_layernorm.weight" => &self.input_layernorm,
            "self_attn.q_proj.weight" => &self.q_proj,
            "self_attn.k_proj.weight" => &self.k_proj,
            "self_attn.v_proj.weight" => &self.v_proj,
            "self_attn.o_proj.weight" => &self.o_proj,
            "post_attention_layernorm.weight" => &self.post_attention_layernorm,
            "mlp.gate_proj.weight" => &self.gate_proj,
            "mlp.up_proj.weight" => &self.up_proj,
            "mlp.down_proj.weight" => &self.down_proj,
            _ => return None,
        })
    }
}

/// One decoder: its layers and final norm.
#[derive(Clone, Debug)]
pub struct DecoderWeights {
    pub layers: Vec<LayerWeights>,
    pub norm: HostTensor,
}

impl DecoderWeights {
    fn get(&self, rest: &str) -> Option<&HostTensor> {
        if rest == "norm.weight" {
            return Some(&self.norm);
        }
        let (layer, suffix) = rest.strip_prefix("layers.")?.split_once('.')?;
        self.layers.get(layer.parse::<usize>().ok()?)?.get(suffix)
    }
}

/// CSM's host weights, f32, in HF names and layout (module doc). Each tensor is held once; take
/// fields out (they are public) to upload them without a second copy.
#[derive(Clone, Debug)]
pub struct CsmWeights {
    /// [`TEXT_EMBED`] `[text_vocab, backbone_hidden]`.
    pub text_embeddings: HostTensor,
    /// [`AUDIO_EMBED`] = [`DEPTH_AUDIO_EMBED`] `[codebooks * audio_vocab, backbone_hidden]`.
    pub audio_embeddings: HostTensor,
    pub backbone: DecoderWeights,
    /// [`LM_HEAD`] `[audio_vocab, backbone_hidden]`.
    pub lm_head: HostTensor,
    /// [`PROJECTOR`] `[depth_hidden, backbone_hidden]`.
    pub projector: HostTensor,
    pub depth: DecoderWeights,
    /// [`CODEBOOKS_HEAD`] `[codebooks - 1, depth_hidden, audio_vocab]`.
    pub codebooks_head: HostTensor,
}

impl CsmWeights {
    /// The tensor of HF name `name` (either name of the tied audio table).
    pub fn get(&self, name: &str) -> Result<&HostTensor> {
        self.lookup(name).ok_or_else(|| Error::MissingTensor {
            op: "CsmWeights::get",
            name: name.into(),
            source_name: "the CSM weights".into(),
        })
    }

    fn lookup(&self, name: &str) -> Option<&HostTensor> {
        match name {
            TEXT_EMBED => return Some(&self.text_embeddings),
            AUDIO_EMBED | DEPTH_AUDIO_EMBED => return Some(&self.audio_embeddings),
            LM_HEAD => return Some(&self.lm_head),
            PROJECTOR => return Some(&self.projector),
            CODEBOOKS_HEAD => return Some(&self.codebooks_head),
            _ => {}
        }
        if let Some(rest) = name.strip_prefix("backbone_model.") {
            return self.backbone.get(rest);
        }
        self.depth.get(name.strip_prefix("depth_decoder.model.")?)
    }

    /// The head of depth level `level` (1..codebooks-1): `[depth_hidden, audio_vocab]`, row-major,
    /// applied as `logits = g @ W`.
    pub fn codebook_head(&self, level: usize) -> Result<&[f32]> {
        let s = &self.codebooks_head.shape;
        if level == 0 || level > s[0] {
            return Err(Error::input(
                "CsmWeights::codebook_head",
                format!(
                    "level {level} is outside 1..={} (codebook 0 is lm_head)",
                    s[0]
                ),
            ));
        }
        let n = s[1] * s[2];
        Ok(&self.codebooks_head.data[(level - 1) * n..level * n])
    }

    /// Checks every tensor of [`tensor_specs`] (presence, shape) and that `src` holds nothing
    /// else (the codec and non-persistent buffers aside) before reading any data, then loads
    /// each tensor once. The audio table may be stored under either name or both (then equal).
    pub fn from_source(c: &CsmConfig, src: &dyn TensorSource) -> Result<Self> {
        c.validate()?;
        let specs = tensor_specs(c);
        check_names(&specs, src)?;
        let table = audio_table_name(c, src)?;
        for s in specs.iter().filter(|s| s.name != AUDIO_EMBED) {
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
        let decoder = |prefix: &str, lc: &LlamaConfig| -> Result<DecoderWeights> {
            let mut layers = Vec::with_capacity(lc.num_hidden_layers);
            for l in 0..lc.num_hidden_layers {
                let a = |suffix: &str| load(&format!("{prefix}.layers.{l}.{suffix}"));
                layers.push(LayerWeights {
                    input_layernorm: a(LAYER_TENSORS[0])?,
                    q_proj: a(LAYER_TENSORS[1])?,
                    k_proj: a(LAYER_TENSORS[2])?,
                    v_proj: a(LAYER_TENSORS[3])?,
                    o_proj: a(LAYER_TENSORS[4])?,
                    post_attention_layernorm: a(LAYER_TENSORS[5])?,
                    gate_proj: a(LAYER_TENSORS[6])?,
                    up_proj: a(LAYER_TENSORS[7])?,
                    down_proj: a(LAYER_TENSORS[8])?,
                });
            }
            Ok(DecoderWeights {
                layers,
                norm: load(&format!("{prefix}.norm.weight"))?,
            })
        };
        let mut audio_embeddings = src.load(table)?;
        audio_embeddings.shape = vec![c.audio_rows(), c.backbone.hidden_size];
        Ok(Self {
            text_embeddings: load(TEXT_EMBED)?,
            audio_embeddings,
            backbone: decoder(BACKBONE, &c.backbone)?,
            lm_head: load(LM_HEAD)?,
            projector: load(PROJECTOR)?,
            depth: decoder(DEPTH, &c.depth)?,
            codebooks_head: load(CODEBOOKS_HEAD)?,
        })
    }
}

/// A present tensor's shape against the expected one, before its data is read.
fn check_shape(src: &dyn TensorSource, name: &str, expected: &[usize]) -> Result<()> {
    check::check_shape(OP, src, name, expected)
}

/// True for names a checkpoint may hold that CSM does not read: the codec, and buffers some
/// exports persist (the audio offsets, RoPE frequencies).
pub fn is_ignored(name: &str) -> bool {
    name.starts_with(CODEC_PREFIX)
        || name.ends_with("audio_tokens_offsets")
        || name.ends_with("rotary_emb.inv_freq")
}

/// Refuses tensors the config has no place for (a layer count or vocabulary mismatch shows here).
fn check_names(specs: &[TensorSpec], src: &dyn TensorSource) -> Result<()> {
    check::refuse_unexpected(OP, src, |n| {
        is_ignored(n) || n == DEPTH_AUDIO_EMBED || specs.iter().any(|s| s.name == n)
    })
}

/// The name the audio table is read from: the backbone's, else the depth decoder's; when both
/// are present their shapes are checked and their values compared (transformers ties them).
fn audio_table_name(c: &CsmConfig, src: &dyn TensorSource) -> Result<&'static str> {
    let expected = [c.audio_rows(), c.backbone.hidden_size];
    match (src.contains(AUDIO_EMBED), src.contains(DEPTH_AUDIO_EMBED)) {
        (true, false) => {
            check_shape(src, AUDIO_EMBED, &expected)?;
            Ok(AUDIO_EMBED)
        }
        (false, true) => {
            check_shape(src, DEPTH_AUDIO_EMBED, &expected)?;
            Ok(DEPTH_AUDIO_EMBED)
        }
        (true, true) => {
            check_shape(src, AUDIO_EMBED, &expected)?;
            check_shape(src, DEPTH_AUDIO_EMBED, &expected)?;
            check_tied(src)?;
            Ok(AUDIO_EMBED)
        }
        (false, false) => Err(Error::MissingTensor {
            op: OP,
            name: format!("{AUDIO_EMBED} (or {DEPTH_AUDIO_EMBED})"),
            source_name: src.source_name().into(),
        }),
    }
}

/// The two stored copies of the tied table agree bit for bit (the second copy is held only
/// while it is compared).
fn check_tied(src: &dyn TensorSource) -> Result<()> {
    let (a, b) = (src.load(AUDIO_EMBED)?, src.load(DEPTH_AUDIO_EMBED)?);
    compare_tied(&a.data, &b.data, a.shape.get(1).copied().unwrap_or(1))
}

fn compare_tied(a: &[f32], b: &[f32], cols: usize) -> Result<()> {
    match a
        .iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
    {
        None => Ok(()),
        Some(i) => Err(Error::input(
            OP,
            format!(
                "the checkpoint stores the tied audio table twice and the copies differ at row {} \
                 ({AUDIO_EMBED} vs {DEPTH_AUDIO_EMBED})",
                i / cols.max(1)
            ),
        )),
    }
}
