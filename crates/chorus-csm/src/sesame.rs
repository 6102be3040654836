//! Sesame's checkpoint layout (`models.Model`'s state dict: `model.safetensors` of the
//! `PyTorchModelHubMixin` era, or the names of `ckpt.pt`) seen through HF names, with the
//! arithmetic of transformers' `convert_csm.py` (`CSM.md` §2.3): renames, the tied audio table,
//! `audio_head` kept as stored (`[levels, in, out]` in both), and the q/k row permutation from
//! torchtune's interleaved RoPE pairs `(2j, 2j + 1)` to HF's rotate-half pairs `(j, j + d/2)`.

use std::collections::BTreeMap;

use chorus_core::checkpoint::TensorSource;
use chorus_core::{Error, HostTensor, Result};

pub use chorus_lm::{half_to_interleaved, interleaved_to_half};

use crate::config::{CsmConfig, LlamaConfig};
use crate::weights::{
    AUDIO_EMBED, BACKBONE, CODEBOOKS_HEAD, DEPTH, LM_HEAD, PROJECTOR, TEXT_EMBED,
};

/// Whole-tensor renames (Sesame, HF).
const TOP_LEVEL: [(&str, &str); 7] = [
    ("text_embeddings.weight", TEXT_EMBED),
    ("audio_embeddings.weight", AUDIO_EMBED),
    ("codebook0_head.weight", LM_HEAD),
    ("projection.weight", PROJECTOR),
    ("audio_head", CODEBOOKS_HEAD),
    ("backbone.norm.scale", "backbone_model.norm.weight"),
    ("decoder.norm.scale", "depth_decoder.model.norm.weight"),
];
/// Decoder prefixes (Sesame, HF).
const DECODERS: [(&str, &str); 2] = [("backbone.layers.", BACKBONE), ("decoder.layers.", DEPTH)];
/// Per-layer suffixes (Sesame torchtune, HF Llama).
const LAYER_SUFFIXES: [(&str, &str); 9] = [
    ("sa_norm.scale", "input_layernorm.weight"),
    ("attn.q_proj.weight", "self_attn.q_proj.weight"),
    ("attn.k_proj.weight", "self_attn.k_proj.weight"),
    ("attn.v_proj.weight", "self_attn.v_proj.weight"),
    ("attn.output_proj.weight", "self_attn.o_proj.weight"),
    ("mlp_norm.scale", "post_attention_layernorm.weight"),
    ("mlp.w1.weight", "mlp.gate_proj.weight"),
    ("mlp.w3.weight", "mlp.up_proj.weight"),
    ("mlp.w2.weight", "mlp.down_proj.weight"),
];

/// The HF name of a Sesame tensor, if it is one of CSM's.
pub fn sesame_to_hf(name: &str) -> Option<String> {
    if let Some((_, hf)) = TOP_LEVEL.iter().find(|(s, _)| *s == name) {
        return Some(hf.to_string());
    }
    for (ses, hf) in DECODERS {
        if let Some(rest) = name.strip_prefix(ses) {
            let (layer, suffix) = rest.split_once('.')?;
            layer.parse::<usize>().ok()?;
            let (_, h) = LAYER_SUFFIXES.iter().find(|(s, _)| *s == suffix)?;
            return Some(format!("{hf}.layers.{layer}.{h}"));
        }
    }
    None
}

/// The Sesame name of an HF tensor, if it has one (the depth decoder's copy of the tied table
/// has none: Sesame stores the table once).
pub fn hf_to_sesame(name: &str) -> Option<String> {
    if let Some((ses, _)) = TOP_LEVEL.iter().find(|(_, h)| *h == name) {
        return Some(ses.to_string());
    }
    for (ses, hf) in DECODERS {
        if let Some(rest) = name
            .strip_prefix(hf)
            .and_then(|r| r.strip_prefix(".layers."))
        {
            let (layer, suffix) = rest.split_once('.')?;
            layer.parse::<usize>().ok()?;
            let (s, _) = LAYER_SUFFIXES.iter().find(|(_, h)| *h == suffix)?;
            return Some(format!("{ses}{layer}.{s}"));
        }
    }
    None
}

/// True when `names` look like Sesame's layout.
pub fn is_sesame_layout(names: &[String]) -> bool {
    names.iter().any(|n| {
        n.starts_with("backbone.layers.") || n == "text_embeddings.weight" || n == "audio_head"
    })
}

/// Heads and head width of the q or k projection `hf_name`, if it is one.
pub fn rope_rows(c: &CsmConfig, hf_name: &str) -> Option<(usize, usize)> {
    let of = |lc: &LlamaConfig, rest: &str| -> Option<(usize, usize)> {
        let (_, suffix) = rest.strip_prefix("layers.")?.split_once('.')?;
        match suffix {
            "self_attn.q_proj.weight" => Some((lc.num_attention_heads, lc.head_dim)),
            "self_attn.k_proj.weight" => Some((lc.num_key_value_heads, lc.head_dim)),
            _ => None,
        }
    };
    if let Some(rest) = hf_name.strip_prefix("backbone_model.") {
        return of(&c.backbone, rest);
    }
    of(&c.depth, hf_name.strip_prefix("depth_decoder.model.")?)
}

/// A Sesame-layout source under HF names; q/k rows are permuted as they load. Names with no HF
/// counterpart keep their Sesame name, so the loader reports them.
pub struct SesameView<'a> {
    inner: &'a dyn TensorSource,
    config: CsmConfig,
    /// HF name -> Sesame name.
    map: BTreeMap<String, String>,
    unmapped: Vec<String>,
    name: String,
}

impl<'a> SesameView<'a> {
    /// Views `inner` (Sesame names) through HF names for `config`'s head layout.
    pub fn new(inner: &'a dyn TensorSource, config: &CsmConfig) -> Self {
        let mut map = BTreeMap::new();
        let mut unmapped = Vec::new();
        for n in inner.names() {
            match sesame_to_hf(&n) {
                Some(hf) => {
                    map.insert(hf, n);
                }
                None => unmapped.push(n),
            }
        }
        Self {
            name: format!("{} (Sesame layout)", inner.source_name()),
            inner,
            config: config.clone(),
            map,
            unmapped,
        }
    }
}

impl TensorSource for SesameView<'_> {
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
        self.inner.shape(self.map.get(name)?)
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        let ses = self.map.get(name).ok_or_else(|| Error::MissingTensor {
            op: "SesameView::load",
            name: format!(
                "{name} (Sesame: {})",
                hf_to_sesame(name).unwrap_or_default()
            ),
            source_name: self.name.clone(),
        })?;
        let t = self.inner.load(ses)?;
        match rope_rows(&self.config, name) {
            Some((heads, head_dim)) => interleaved_to_half(&t, heads, head_dim),
            None => Ok(t),
        }
    }
}
