//! transformers' layout (`KyutaiSpeechToTextForConditionalGeneration`, `KYUTAI_STT.md` §2.2) seen
//! through Kyutai's names, the inverse of transformers' conversion script (§2.3): the merged
//! embedding split into the text table and one table per codebook (its trailing zero row
//! dropped), q/k/v rows permuted back to interleaved pairs and fused into `in_proj_weight`, norm
//! gains reshaped to `[1, 1, d]`, the text head without its extra zero row.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use chorus_core::checkpoint::TensorSource;
use chorus_core::{Error, HostTensor, Result};
use chorus_lm::half_to_interleaved;

use crate::config::SttConfig;
use crate::weights::{
    audio_emb, check_shape, is_ignored, LAYERS, LAYER_TENSORS, OUT_NORM, TEXT_EMB, TEXT_LINEAR,
};

/// The merged embedding `[text_vocab + 1 + codebooks * codebook_vocab + 1, hidden]`.
pub const HF_EMBED: &str = "model.embed_tokens.embed_tokens.weight";
/// The text head `[text_vocab + 1, hidden]` (its last row all zero).
pub const HF_LM_HEAD: &str = "lm_head.weight";
pub const HF_NORM: &str = "model.norm.weight";
/// Prefix of the decoder layers.
pub const HF_LAYERS: &str = "model.layers";

/// True when `names` look like transformers' layout.
pub fn is_hf_layout(names: &[String]) -> bool {
    names
        .iter()
        .any(|n| n == HF_EMBED || n.starts_with("model.layers."))
}

/// Every LM tensor of the transformers layout with its shape.
pub fn hf_specs(c: &SttConfig) -> Vec<(String, Vec<usize>)> {
    let h = c.hidden_size;
    let mut s = vec![(
        HF_EMBED.to_string(),
        vec![c.text_rows() + c.audio_rows() + 1, h],
    )];
    for l in 0..c.num_hidden_layers {
        let p = format!("{HF_LAYERS}.{l}");
        s.push((format!("{p}.input_layernorm.weight"), vec![h]));
        s.push((
            format!("{p}.self_attn.q_proj.linear.weight"),
            vec![c.q_width(), h],
        ));
        s.push((
            format!("{p}.self_attn.k_proj.linear.weight"),
            vec![c.kv_width(), h],
        ));
        s.push((
            format!("{p}.self_attn.v_proj.linear.weight"),
            vec![c.kv_width(), h],
        ));
        s.push((
            format!("{p}.self_attn.o_proj.linear.weight"),
            vec![h, c.q_width()],
        ));
        s.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        s.push((format!("{p}.mlp.fc1.weight"), vec![2 * c.ffn_hidden, h]));
        s.push((format!("{p}.mlp.fc2.weight"), vec![h, c.ffn_hidden]));
    }
    s.push((HF_NORM.to_string(), vec![h]));
    s.push((HF_LM_HEAD.to_string(), vec![c.text_rows(), h]));
    s
}

/// Where a Kyutai tensor comes from.
#[derive(Clone, Debug)]
enum Part {
    /// Rows of the merged embedding.
    EmbedRows(usize, usize),
    /// A gain `[d]` as `[1, 1, d]`.
    Gain(String),
    /// As stored.
    Same(String),
    /// Layer `l`'s fused projection from q, k, v.
    InProj(usize),
    /// The head's first `text_vocab` rows.
    HeadRows,
}

/// A transformers-layout source under Kyutai's names (module doc).
pub struct HfView<'a> {
    inner: &'a dyn TensorSource,
    config: SttConfig,
    map: BTreeMap<String, (Vec<usize>, Part)>,
    unmapped: Vec<String>,
    name: String,
    /// The merged embedding, read once for all its tables.
    embed: OnceLock<HostTensor>,
}

impl<'a> HfView<'a> {
    /// Checks every LM tensor of the transformers layout (presence and shape, under its own
    /// name) before any data is read, and maps it.
    pub fn new(inner: &'a dyn TensorSource, c: &SttConfig) -> Result<Self> {
        let specs = hf_specs(c);
        for (name, shape) in &specs {
            check_shape(inner, name, shape)?;
        }
        let h = c.hidden_size;
        let mut map = BTreeMap::new();
        map.insert(
            TEXT_EMB.to_string(),
            (vec![c.text_rows(), h], Part::EmbedRows(0, c.text_rows())),
        );
        for k in 0..c.num_codebooks {
            let r0 = c.text_rows() + k * c.codebook_vocab;
            map.insert(
                audio_emb(k),
                (
                    vec![c.codebook_vocab, h],
                    Part::EmbedRows(r0, r0 + c.codebook_vocab),
                ),
            );
        }
        let shapes: [Vec<usize>; 6] = [
            vec![1, 1, h],
            vec![c.qkv_width(), h],
            vec![h, c.q_width()],
            vec![1, 1, h],
            vec![2 * c.ffn_hidden, h],
            vec![h, c.ffn_hidden],
        ];
        for l in 0..c.num_hidden_layers {
            let p = format!("{HF_LAYERS}.{l}");
            let parts = [
                Part::Gain(format!("{p}.input_layernorm.weight")),
                Part::InProj(l),
                Part::Same(format!("{p}.self_attn.o_proj.linear.weight")),
                Part::Gain(format!("{p}.post_attention_layernorm.weight")),
                Part::Same(format!("{p}.mlp.fc1.weight")),
                Part::Same(format!("{p}.mlp.fc2.weight")),
            ];
            for ((suffix, shape), part) in LAYER_TENSORS.iter().zip(&shapes).zip(parts) {
                map.insert(format!("{LAYERS}.{l}.{suffix}"), (shape.clone(), part));
            }
        }
        map.insert(
            OUT_NORM.to_string(),
            (vec![1, 1, h], Part::Gain(HF_NORM.into())),
        );
        map.insert(
            TEXT_LINEAR.to_string(),
            (vec![c.text_vocab, h], Part::HeadRows),
        );
        let unmapped = inner
            .names()
            .into_iter()
            .filter(|n| !is_ignored(n) && !specs.iter().any(|(s, _)| s == n))
            .collect();
        Ok(Self {
            name: format!("{} (transformers layout)", inner.source_name()),
            inner,
            config: c.clone(),
            map,
            unmapped,
            embed: OnceLock::new(),
        })
    }

    fn rows(&self, t: &HostTensor, r0: usize, r1: usize) -> Result<HostTensor> {
        let cols = t.shape[1];
        HostTensor::new(vec![r1 - r0, cols], t.data[r0 * cols..r1 * cols].to_vec())
    }

    fn embed(&self) -> Result<&HostTensor> {
        if let Some(t) = self.embed.get() {
            return Ok(t);
        }
        let t = self.inner.load(HF_EMBED)?;
        Ok(self.embed.get_or_init(|| t))
    }
}

impl TensorSource for HfView<'_> {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.map.keys().cloned().collect();
        n.extend(self.unmapped.iter().cloned());
        n.sort();
        n
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.map.get(name).map(|(s, _)| s.clone())
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        let (shape, part) = self.map.get(name).ok_or_else(|| Error::MissingTensor {
            op: "HfView::load",
            name: name.into(),
            source_name: self.name.clone(),
        })?;
        let c = &self.config;
        match part {
            Part::EmbedRows(r0, r1) => self.rows(self.embed()?, *r0, *r1),
            Part::Gain(hf) => {
                let t = self.inner.load(hf)?;
                HostTensor::new(shape.clone(), t.data)
            }
            Part::Same(hf) => self.inner.load(hf),
            Part::HeadRows => {
                let t = self.inner.load(HF_LM_HEAD)?;
                self.rows(&t, 0, c.text_vocab)
            }
            Part::InProj(l) => {
                let p = format!("{HF_LAYERS}.{l}.self_attn");
                let q = self.inner.load(&format!("{p}.q_proj.linear.weight"))?;
                let k = self.inner.load(&format!("{p}.k_proj.linear.weight"))?;
                let v = self.inner.load(&format!("{p}.v_proj.linear.weight"))?;
                let q = half_to_interleaved(&q, c.num_attention_heads, c.head_dim)?;
                let k = half_to_interleaved(&k, c.num_key_value_heads, c.head_dim)?;
                let mut data = q.data;
                data.extend_from_slice(&k.data);
                data.extend_from_slice(&v.data);
                HostTensor::new(shape.clone(), data)
            }
        }
    }
}
