//! Kyutai's original layout (`tokenizer-*.safetensors`) viewed as the HF layout.
//!
//! The renaming and the q/k row permutation reproduce transformers
//! `models/mimi/convert_mimi_checkpoint_to_pytorch.py` (`convert_list`, `permute`): the original
//! model applies RoPE to interleaved pairs `(2i, 2i+1)` of each head, transformers to the halves
//! `(i, i + head_dim/2)`, so the rows of q and k are reordered per head.

use std::collections::HashMap;

use chorus_core::{Error, HostTensor, Result};

use super::hf_layout::seanet_plan;
use super::source::TensorSource;
use crate::config::MimiConfig;

/// Substring replacements, applied in this order, that turn an original name into an HF name
/// (the conversion script's `convert_list`).
const CONVERT_LIST: &[(&str, &str)] = &[
    ("conv.conv.conv", "conv"),
    ("convtr.convtr.convtr", "conv"),
    ("conv.conv", "conv"),
    ("convtr.convtr", "conv"),
    (
        "quantizer.rvq_first.vq",
        "quantizer.semantic_residual_vector_quantizer",
    ),
    (
        "quantizer.rvq_first",
        "quantizer.semantic_residual_vector_quantizer",
    ),
    (
        "quantizer.rvq_rest.vq",
        "quantizer.acoustic_residual_vector_quantizer",
    ),
    (
        "quantizer.rvq_rest",
        "quantizer.acoustic_residual_vector_quantizer",
    ),
    ("_codebook", "codebook"),
    ("_initialized", "initialized"),
    ("embedding_sum", "embed_sum"),
    ("encoder.model", "encoder.layers"),
    ("decoder.model", "decoder.layers"),
    ("encoder_transformer.transformer", "encoder_transformer"),
    ("decoder_transformer.transformer", "decoder_transformer"),
    ("linear1", "mlp.fc1"),
    ("linear2", "mlp.fc2"),
    ("self_attn.out_proj", "self_attn.o_proj"),
    ("norm1", "input_layernorm"),
    ("norm2", "post_attention_layernorm"),
    ("layer_scale_1", "self_attn_layer_scale"),
    ("layer_scale_2", "mlp_layer_scale"),
];

/// The fused attention input projection of the original layout.
const IN_PROJ: &str = "in_proj_weight";
const OP: &str = "load_kyutai_layout";

/// Renames an original-layout tensor name to its HF name.
pub fn kyutai_to_hf_name(name: &str) -> String {
    let mut out = name.to_string();
    for (old, new) in CONVERT_LIST {
        if out.contains(old) {
            out = out.replace(old, new);
        }
    }
    out
}

/// Renames an HF name to the original layout (the inverse of
/// [`kyutai_to_hf_name`] on the names the decoder reads; q/k/v are fused separately).
pub fn hf_to_kyutai_name(c: &MimiConfig, name: &str) -> String {
    let convtr_layers: Vec<usize> = seanet_plan(c)
        .stages
        .iter()
        .map(|s| s.convtr.index)
        .collect();
    let mut out = name
        .replace(
            "quantizer.semantic_residual_vector_quantizer.layers",
            "quantizer.rvq_first.vq.layers",
        )
        .replace(
            "quantizer.acoustic_residual_vector_quantizer.layers",
            "quantizer.rvq_rest.vq.layers",
        )
        .replace(
            "quantizer.semantic_residual_vector_quantizer",
            "quantizer.rvq_first",
        )
        .replace(
            "quantizer.acoustic_residual_vector_quantizer",
            "quantizer.rvq_rest",
        )
        .replace(".codebook.embed_sum", "._codebook.embedding_sum")
        .replace(".codebook.cluster_usage", "._codebook.cluster_usage")
        .replace("upsample.conv.", "upsample.convtr.convtr.convtr.")
        .replace(
            "decoder_transformer.layers",
            "decoder_transformer.transformer.layers",
        )
        .replace(
            "encoder_transformer.layers",
            "encoder_transformer.transformer.layers",
        )
        .replace("downsample.conv.", "downsample.conv.conv.conv.")
        .replace("input_layernorm", "norm1")
        .replace("post_attention_layernorm", "norm2")
        .replace("mlp.fc1", "linear1")
        .replace("mlp.fc2", "linear2")
        .replace("self_attn.o_proj", "self_attn.out_proj")
        .replace("self_attn_layer_scale", "layer_scale_1")
        .replace("mlp_layer_scale", "layer_scale_2");
    if let Some(rest) = out.strip_prefix("decoder.layers.") {
        let (index, tail) = rest.split_once('.').unwrap_or((rest, ""));
        let is_convtr = index
            .parse::<usize>()
            .is_ok_and(|i| convtr_layers.contains(&i));
        let tail = if is_convtr {
            tail.replacen("conv.", "convtr.convtr.", 1)
        } else {
            tail.replacen("conv.", "conv.conv.", 1)
        };
        out = format!("decoder.model.{index}.{tail}");
    }
    if let Some(rest) = out.strip_prefix("encoder.layers.") {
        // The encoder has no transposed convs: every conv is `conv.conv`.
        let (index, tail) = rest.split_once('.').unwrap_or((rest, ""));
        out = format!(
            "encoder.model.{index}.{}",
            tail.replacen("conv.", "conv.conv.", 1)
        );
    }
    out
}

/// Which third of a fused in_proj an HF q/k/v name reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Q,
    K,
    V,
}

#[derive(Clone, Debug)]
enum Mapping {
    Direct(String),
    InProj(String, Part),
}

/// An original-layout source seen through HF names.
pub struct KyutaiView<S: TensorSource> {
    inner: S,
    heads: usize,
    map: HashMap<String, Mapping>,
}

impl<S: TensorSource> KyutaiView<S> {
    /// Indexes `inner` by HF name; `heads` is the attention head count used by the permutation.
    pub fn new(inner: S, heads: usize) -> Self {
        let mut map = HashMap::new();
        for name in inner.names() {
            let hf = kyutai_to_hf_name(&name);
            if hf.ends_with(IN_PROJ) {
                for (part, proj) in [
                    (Part::Q, "q_proj"),
                    (Part::K, "k_proj"),
                    (Part::V, "v_proj"),
                ] {
                    let split = hf.replace(IN_PROJ, &format!("{proj}.weight"));
                    map.insert(split, Mapping::InProj(name.clone(), part));
                }
            } else {
                map.insert(hf, Mapping::Direct(name));
            }
        }
        Self { inner, heads, map }
    }
}

impl<S: TensorSource> TensorSource for KyutaiView<S> {
    fn source_name(&self) -> &str {
        self.inner.source_name()
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.map.keys().cloned().collect();
        names.sort();
        names
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        match self.map.get(name)? {
            Mapping::Direct(n) => self.inner.shape(n),
            Mapping::InProj(n, _) => {
                let mut shape = self.inner.shape(n)?;
                if let Some(rows) = shape.first_mut() {
                    *rows /= 3;
                }
                Some(shape)
            }
        }
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        match self.map.get(name) {
            None => Err(Error::MissingTensor {
                op: OP,
                name: name.into(),
                source_name: self.inner.source_name().into(),
            }),
            Some(Mapping::Direct(n)) => self.inner.load(n),
            Some(Mapping::InProj(n, part)) => {
                let fused = self.inner.load(n)?;
                split_in_proj(&fused, n, *part, self.heads)
            }
        }
    }
}

fn split_in_proj(fused: &HostTensor, name: &str, part: Part, heads: usize) -> Result<HostTensor> {
    let (rows, cols) = match fused.shape[..] {
        [r, c] if r % 3 == 0 => (r / 3, c),
        _ => {
            return Err(Error::Shape {
                op: OP,
                name: name.into(),
                expected: vec![3 * fused.shape.last().copied().unwrap_or(0), 0],
                found: fused.shape.clone(),
            })
        }
    };
    let third = match part {
        Part::Q => 0,
        Part::K => 1,
        Part::V => 2,
    };
    let slice = fused.data[third * rows * cols..(third + 1) * rows * cols].to_vec();
    let t = HostTensor::new(vec![rows, cols], slice)?;
    match part {
        Part::V => Ok(t),
        Part::Q | Part::K => interleaved_to_halves(&t, heads),
    }
}

/// Reorders each head's rows from interleaved pairs to halves: new row `h*D + j*D/2 + i` is old
/// row `h*D + 2*i + j` (the conversion script's `view(H, D/2, 2, C).transpose(1, 2)`).
pub fn interleaved_to_halves(w: &HostTensor, heads: usize) -> Result<HostTensor> {
    permute_rows(w, heads, false)
}

/// The inverse of [`interleaved_to_halves`].
pub fn halves_to_interleaved(w: &HostTensor, heads: usize) -> Result<HostTensor> {
    permute_rows(w, heads, true)
}

fn permute_rows(w: &HostTensor, heads: usize, inverse: bool) -> Result<HostTensor> {
    let rows = w.shape.first().copied().unwrap_or(0);
    if w.shape.len() != 2 || heads == 0 || rows % (2 * heads) != 0 {
        return Err(Error::input(
            OP,
            format!(
                "cannot permute RoPE rows of a {:?} matrix over {heads} heads",
                w.shape
            ),
        ));
    }
    let cols = w.shape[1];
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut out = vec![0.0f32; w.data.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let halves = h * head_dim + j * half + i;
                let interleaved = h * head_dim + 2 * i + j;
                let (dst, src) = if inverse {
                    (interleaved, halves)
                } else {
                    (halves, interleaved)
                };
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&w.data[src * cols..(src + 1) * cols]);
            }
        }
    }
    HostTensor::new(w.shape.clone(), out)
}

/// Converts decoder-side HF-layout tensors to the original layout: renames, and fuses each
/// layer's q/k/v into `in_proj_weight` with q and k rows back in interleaved order.
pub fn hf_to_kyutai_tensors(
    c: &MimiConfig,
    tensors: Vec<(String, HostTensor)>,
) -> Result<Vec<(String, HostTensor)>> {
    let heads = c.num_attention_heads;
    let mut out = Vec::with_capacity(tensors.len());
    let mut pending: HashMap<String, [Option<HostTensor>; 3]> = HashMap::new();
    for (name, t) in tensors {
        let part = [".q_proj.weight", ".k_proj.weight", ".v_proj.weight"]
            .iter()
            .position(|s| name.ends_with(s));
        let Some(part) = part else {
            out.push((hf_to_kyutai_name(c, &name), t));
            continue;
        };
        let stem = name[..name.len() - ".q_proj.weight".len()].to_string();
        let t = if part < 2 {
            halves_to_interleaved(&t, heads)?
        } else {
            t
        };
        let slots = pending.entry(stem.clone()).or_default();
        slots[part] = Some(t);
        if let [Some(q), Some(k), Some(v)] = slots {
            let mut data = Vec::with_capacity(q.len() * 3);
            for p in [&*q, &*k, &*v] {
                data.extend_from_slice(&p.data);
            }
            let fused = HostTensor::new(vec![q.shape[0] * 3, q.shape[1]], data)?;
            let name = hf_to_kyutai_name(c, &format!("{stem}.{IN_PROJ}"));
            out.push((name, fused));
            pending.remove(&stem);
        }
    }
    if let Some(stem) = pending.keys().next() {
        return Err(Error::MissingTensor {
            op: "hf_to_kyutai_tensors",
            name: format!("{stem}.{{q,k,v}}_proj.weight"),
            source_name: "the HF-layout tensors".into(),
        });
    }
    Ok(out)
}
