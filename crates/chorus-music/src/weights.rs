//! The tensor lists of both models and their host weights after load-time fusion.
//!
//! One list, used twice: loading validates every (name, shape) of [`lm_tensor_specs`] and
//! [`depth_tensor_specs`] before reading data, and `random.rs` draws weights from the same lists.
//! Fusion happens here, once: q/k/v and gate/up concatenate along the output axis, and the LM
//! head keeps only the audio rows (codes `151675..168059`, then END `151670`). Linears come from a
//! [`LinearSource`], dense or int8 ConvRot per tensor (`chorus_lm::HostLinear`).

use chorus_core::checkpoint::TensorSource;
use chorus_core::{Error, HostTensor, Result};
use chorus_lm::HostLinear;

use crate::config::{DepthConfig, Qwen3Config, AUDIO_CODE_OFFSET, AUDIO_END_TOKEN, SEMANTIC_VOCAB};
use crate::linear_source::{LinearSource, Loader};

/// One checkpoint tensor: its name and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub name: String,
    pub shape: Vec<usize>,
}

fn spec(name: String, shape: &[usize]) -> Spec {
    Spec {
        name,
        shape: shape.to_vec(),
    }
}

/// Every tensor of the LM checkpoint (stock HF Qwen3 names, `MUSIC_SEMANTIC.md` §1.2).
pub fn lm_tensor_specs(c: &Qwen3Config) -> Vec<Spec> {
    let (h, i, v, d) = (c.hidden_size, c.intermediate_size, c.vocab_size, c.head_dim);
    let (q, kv) = (c.num_attention_heads * d, c.num_key_value_heads * d);
    let mut s = vec![spec("model.embed_tokens.weight".into(), &[v, h])];
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}");
        s.push(spec(format!("{p}.input_layernorm.weight"), &[h]));
        s.push(spec(format!("{p}.self_attn.q_proj.weight"), &[q, h]));
        s.push(spec(format!("{p}.self_attn.k_proj.weight"), &[kv, h]));
        s.push(spec(format!("{p}.self_attn.v_proj.weight"), &[kv, h]));
        s.push(spec(format!("{p}.self_attn.o_proj.weight"), &[h, q]));
        s.push(spec(format!("{p}.self_attn.q_norm.weight"), &[d]));
        s.push(spec(format!("{p}.self_attn.k_norm.weight"), &[d]));
        s.push(spec(format!("{p}.post_attention_layernorm.weight"), &[h]));
        s.push(spec(format!("{p}.mlp.gate_proj.weight"), &[i, h]));
        s.push(spec(format!("{p}.mlp.up_proj.weight"), &[i, h]));
        s.push(spec(format!("{p}.mlp.down_proj.weight"), &[h, i]));
    }
    s.push(spec("model.norm.weight".into(), &[h]));
    s.push(spec(LM_HEAD.into(), &[v, h]));
    s
}

/// The LM head's checkpoint name.
pub const LM_HEAD: &str = "lm_head.weight";

/// Every tensor of the depth decoder checkpoint (47 at the real size, `MUSIC_SEMANTIC.md` §4.1).
pub fn depth_tensor_specs(c: &DepthConfig) -> Vec<Spec> {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let levels = c.num_codebooks - 1;
    let mut s = vec![
        spec(
            "audio_embeddings.weight".into(),
            &[levels * c.audio_vocab_size, h],
        ),
        spec("projection.weight".into(), &[h, h]),
        spec(
            "pos_embedding.weight".into(),
            &[c.max_position_embeddings, h],
        ),
    ];
    for l in 0..c.num_layers {
        let p = format!("layers.{l}");
        s.push(spec(format!("{p}.input_layernorm.weight"), &[h]));
        for n in ["to_q", "to_k", "to_v", "to_out"] {
            s.push(spec(format!("{p}.attn.{n}.weight"), &[h, h]));
        }
        s.push(spec(format!("{p}.post_attention_layernorm.weight"), &[h]));
        s.push(spec(format!("{p}.gate_proj.weight"), &[i, h]));
        s.push(spec(format!("{p}.up_proj.weight"), &[i, h]));
        s.push(spec(format!("{p}.down_proj.weight"), &[h, i]));
    }
    s.push(spec("norm.weight".into(), &[h]));
    for l in 0..levels {
        s.push(spec(
            format!("audio_heads.{l}.weight"),
            &[c.audio_vocab_size, h],
        ));
    }
    s
}

/// One LM layer after fusion.
#[derive(Clone, Debug)]
pub struct LmLayer {
    pub input_layernorm: HostTensor,
    /// `[q + 2 kv, hidden]`: q_proj, k_proj, v_proj rows.
    pub qkv: HostLinear,
    pub q_norm: HostTensor,
    pub k_norm: HostTensor,
    pub o_proj: HostLinear,
    pub post_attention_layernorm: HostTensor,
    /// `[2 inter, hidden]`: gate_proj then up_proj rows.
    pub gate_up: HostLinear,
    pub down: HostLinear,
}

/// The LM after fusion.
#[derive(Clone, Debug)]
pub struct LmWeights {
    pub embed_tokens: HostTensor,
    pub layers: Vec<LmLayer>,
    pub norm: HostTensor,
    /// `[16385, hidden]`: lm_head rows of the codes, then the END row.
    pub audio_head: HostTensor,
}

/// One depth-decoder layer after fusion.
#[derive(Clone, Debug)]
pub struct DepthLayer {
    pub input_layernorm: HostTensor,
    /// `[3 hidden, hidden]`: to_q, to_k, to_v rows.
    pub qkv: HostLinear,
    pub to_out: HostLinear,
    pub post_attention_layernorm: HostTensor,
    pub gate_up: HostLinear,
    pub down: HostLinear,
}

/// The depth decoder after fusion.
#[derive(Clone, Debug)]
pub struct DepthWeights {
    pub audio_embeddings: HostTensor,
    pub projection: HostLinear,
    pub pos_embedding: HostTensor,
    pub layers: Vec<DepthLayer>,
    pub norm: HostTensor,
    /// 7 heads `[audio_vocab, hidden]`; head `l - 1` predicts level `l`.
    pub audio_heads: Vec<HostLinear>,
}

impl LmLayer {
    /// The layer's linears: fused q/k/v, o, fused gate/up, down.
    pub fn linears(&self) -> [&HostLinear; 4] {
        [&self.qkv, &self.o_proj, &self.gate_up, &self.down]
    }
}

impl DepthLayer {
    /// The layer's linears: fused q/k/v, out, fused gate/up, down.
    pub fn linears(&self) -> [&HostLinear; 4] {
        [&self.qkv, &self.to_out, &self.gate_up, &self.down]
    }
}

/// Checks every LM tensor's presence and shape, then loads and fuses. `audio_head_rows` loads
/// the head's audio rows only (a file source can read row ranges; see `load.rs`).
pub fn build_lm(
    c: &Qwen3Config,
    lin: &dyn LinearSource,
    audio_head: &dyn Fn(&dyn TensorSource) -> Result<HostTensor>,
) -> Result<LmWeights> {
    const OP: &str = "load_lm";
    c.validate()?;
    let src = lin.tensors();
    let ld = Loader::new(OP, lin, lm_tensor_specs(c), LM_HEAD)?;
    let head_shape = vec![c.vocab_size, c.hidden_size];
    match src.shape(LM_HEAD) {
        None => {
            return Err(Error::MissingTensor {
                op: OP,
                name: LM_HEAD.into(),
                source_name: src.source_name().into(),
            })
        }
        Some(found) if found != head_shape => {
            return Err(Error::Shape {
                op: OP,
                name: LM_HEAD.into(),
                expected: head_shape,
                found,
            })
        }
        Some(_) => {}
    }
    let mut layers = Vec::with_capacity(c.num_hidden_layers);
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}.");
        let a = |n: &str| ld.tensor(&format!("{p}{n}"));
        layers.push(LmLayer {
            input_layernorm: a("input_layernorm.weight")?,
            qkv: ld.fused(
                &p,
                &[
                    "self_attn.q_proj.weight",
                    "self_attn.k_proj.weight",
                    "self_attn.v_proj.weight",
                ],
            )?,
            q_norm: a("self_attn.q_norm.weight")?,
            k_norm: a("self_attn.k_norm.weight")?,
            o_proj: ld.linear(&format!("{p}self_attn.o_proj.weight"))?,
            post_attention_layernorm: a("post_attention_layernorm.weight")?,
            gate_up: ld.fused(&p, &["mlp.gate_proj.weight", "mlp.up_proj.weight"])?,
            down: ld.linear(&format!("{p}mlp.down_proj.weight"))?,
        });
    }
    Ok(LmWeights {
        embed_tokens: ld.tensor("model.embed_tokens.weight")?,
        layers,
        norm: ld.tensor("model.norm.weight")?,
        audio_head: audio_head(src)?,
    })
}

/// The audio rows of the LM head through full loads (sources without row access).
pub fn audio_head_from_full(src: &dyn TensorSource) -> Result<HostTensor> {
    let head = src.load(LM_HEAD)?;
    let h = head.shape[1];
    let mut data =
        head.data[AUDIO_CODE_OFFSET * h..(AUDIO_CODE_OFFSET + SEMANTIC_VOCAB) * h].to_vec();
    data.extend_from_slice(&head.data[AUDIO_END_TOKEN * h..(AUDIO_END_TOKEN + 1) * h]);
    HostTensor::new(vec![SEMANTIC_VOCAB + 1, h], data)
}

/// Checks every depth tensor, then loads and fuses.
pub fn build_depth(
    c: &DepthConfig,
    lm: &Qwen3Config,
    lin: &dyn LinearSource,
) -> Result<DepthWeights> {
    const OP: &str = "load_depth";
    c.validate(lm)?;
    let ld = Loader::new(OP, lin, depth_tensor_specs(c), "")?;
    let mut layers = Vec::with_capacity(c.num_layers);
    for l in 0..c.num_layers {
        let p = format!("layers.{l}.");
        layers.push(DepthLayer {
            input_layernorm: ld.tensor(&format!("{p}input_layernorm.weight"))?,
            qkv: ld.fused(
                &p,
                &["attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight"],
            )?,
            to_out: ld.linear(&format!("{p}attn.to_out.weight"))?,
            post_attention_layernorm: ld.tensor(&format!("{p}post_attention_layernorm.weight"))?,
            gate_up: ld.fused(&p, &["gate_proj.weight", "up_proj.weight"])?,
            down: ld.linear(&format!("{p}down_proj.weight"))?,
        });
    }
    Ok(DepthWeights {
        audio_embeddings: ld.tensor("audio_embeddings.weight")?,
        projection: ld.linear("projection.weight")?,
        pos_embedding: ld.tensor("pos_embedding.weight")?,
        layers,
        norm: ld.tensor("norm.weight")?,
        audio_heads: (0..c.num_codebooks - 1)
            .map(|l| ld.linear(&format!("audio_heads.{l}.weight")))
            .collect::<Result<_>>()?,
    })
}

/// Parameters of the checkpoint tensors of both models (the full LM head counted).
pub fn parameter_count(lm: &Qwen3Config, depth: &DepthConfig) -> usize {
    lm_tensor_specs(lm)
        .iter()
        .chain(depth_tensor_specs(depth).iter())
        .map(|s| s.shape.iter().product::<usize>())
        .sum()
}
