//! Seeded random weights of the real architecture (or the reduced one), drawn from the same
//! tensor lists as loading and bit-identical to `tools/fixtures/music_weights.py`.
//!
//! Element `i` of tensor `name` is `u * scale + offset` in f32 with `u` from
//! [`chorus_core::rng::uniform_range`], so the LM head's audio rows are drawn without drawing the
//! other 183,615 rows. Scales: embeddings 1, norms `1 + 0.1 u`, linears `sqrt(3 / fan_in)` (unit
//! variance in, unit variance out), heads twice that (logits of std ~2, like the real model's).
//!
//! The int8 variants (`random-int8`, `random-small-int8`) quantize the linears [`is_q8_linear`]
//! names by the ConvRot writer's formula (`chorus_lm::Q8Tensor`), tensor by tensor as they are
//! drawn, exactly as `tools/fixtures/music_int8.py` writes its `*_int8_convrot.safetensors` files.

use std::collections::HashMap;

use chorus_core::checkpoint::TensorSource;
use chorus_core::convrot::writer_group;
pub use chorus_core::rng::{draw_rows, Init};
use chorus_core::{Error, HostTensor, Result};
use chorus_lm::{HostLinear, Q8Tensor};

use crate::config::{DepthConfig, Qwen3Config, AUDIO_CODE_OFFSET, AUDIO_END_TOKEN, SEMANTIC_VOCAB};
use crate::linear_source::{load_checked, LinearSource};
use crate::weights::{depth_tensor_specs, lm_tensor_specs, Spec, LM_HEAD};

/// Seed of the `random` and `random-small` model specs.
pub const RANDOM_MUSIC_SEED: u64 = 0x6d75_7369_632d_726e;
/// Gain of the LM head and the depth heads over a unit-variance init.
const HEAD_GAIN: f64 = 2.0;

/// The init of a tensor of either model, by role (name) and fan-in (shape).
pub fn init_for(name: &str, shape: &[usize]) -> Init {
    let fixed = |scale: f32, offset: f32| Init { scale, offset };
    if name.ends_with("norm.weight") {
        return fixed(0.1, 1.0);
    }
    if name.ends_with("embed_tokens.weight")
        || name.ends_with("audio_embeddings.weight")
        || name.ends_with("pos_embedding.weight")
    {
        return fixed(1.0, 0.0);
    }
    let fan_in = shape.get(1).copied().unwrap_or(1).max(1) as f64;
    let gain = if name == LM_HEAD || name.starts_with("audio_heads.") {
        HEAD_GAIN
    } else {
        1.0
    };
    fixed((gain * (3.0 / fan_in).sqrt()) as f32, 0.0)
}

/// True for the linears the int8 random models (and `music_int8.py`) store in int8: the seven of
/// every LM layer, and the depth decoder's projection and layer linears (its audio heads, like the
/// LM head and every embedding and norm, stay float).
pub fn is_q8_linear(name: &str) -> bool {
    const LM: [&str; 7] = [
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    ];
    const DEPTH: [&str; 7] = [
        "attn.to_q.weight",
        "attn.to_k.weight",
        "attn.to_v.weight",
        "attn.to_out.weight",
        "gate_proj.weight",
        "up_proj.weight",
        "down_proj.weight",
    ];
    let layer = |prefix: &str, ends: &[&str]| {
        name.strip_prefix(prefix).is_some_and(|rest| {
            rest.split_once('.')
                .is_some_and(|(l, n)| l.parse::<usize>().is_ok() && ends.contains(&n))
        })
    };
    name == "projection.weight" || layer("model.layers.", &LM) || layer("layers.", &DEPTH)
}

/// A tensor source that draws each tensor on demand.
pub struct RandomSource {
    seed: u64,
    name: String,
    specs: HashMap<String, Vec<usize>>,
    /// Multiplies the LM head's END row (1 leaves it as drawn): makes END likely, for tests.
    end_gain: f32,
    /// Quantize the [`is_q8_linear`] linears (the int8 random models).
    int8: bool,
}

impl RandomSource {
    /// A source over both models' tensor lists.
    pub fn new(lm: &Qwen3Config, depth: &DepthConfig, seed: u64, end_gain: f32) -> Self {
        let specs = lm_tensor_specs(lm)
            .into_iter()
            .chain(depth_tensor_specs(depth))
            .map(|Spec { name, shape }| (name, shape))
            .collect();
        Self {
            seed,
            name: format!("random weights (seed {seed:#x}): the music is noise"),
            specs,
            end_gain,
            int8: false,
        }
    }

    /// The same source with the [`is_q8_linear`] linears quantized by the ConvRot writer's formula.
    pub fn quantized(self) -> Self {
        Self {
            int8: true,
            name: self.name.replace("seed", "int8 ConvRot, seed"),
            ..self
        }
    }

    /// The LM head's audio rows (codes, then END), drawn alone.
    pub fn audio_head(&self, _src: &dyn TensorSource) -> Result<HostTensor> {
        let shape = self.specs.get(LM_HEAD).cloned().unwrap_or_default();
        let h = shape[1];
        let init = init_for(LM_HEAD, &shape);
        let mut data = draw_rows(
            self.seed,
            LM_HEAD,
            AUDIO_CODE_OFFSET..AUDIO_CODE_OFFSET + SEMANTIC_VOCAB,
            h,
            init,
        );
        let end = draw_rows(
            self.seed,
            LM_HEAD,
            AUDIO_END_TOKEN..AUDIO_END_TOKEN + 1,
            h,
            init,
        );
        data.extend(end.into_iter().map(|x| x * self.end_gain));
        HostTensor::new(vec![SEMANTIC_VOCAB + 1, h], data)
    }
}

impl TensorSource for RandomSource {
    fn source_name(&self) -> &str {
        &self.name
    }

    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.specs.keys().cloned().collect();
        n.sort();
        n
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.specs.get(name).cloned()
    }

    fn load(&self, name: &str) -> Result<HostTensor> {
        let shape = self
            .specs
            .get(name)
            .cloned()
            .ok_or_else(|| Error::MissingTensor {
                op: "RandomSource::load",
                name: name.into(),
                source_name: self.name.clone(),
            })?;
        let rows = shape.first().copied().unwrap_or(1);
        let cols = shape.iter().skip(1).product::<usize>();
        let data = draw_rows(self.seed, name, 0..rows, cols, init_for(name, &shape));
        HostTensor::new(shape, data)
    }
}

impl LinearSource for RandomSource {
    fn tensors(&self) -> &dyn TensorSource {
        self
    }

    fn linear(&self, op: &'static str, name: &str, shape: &[usize]) -> Result<HostLinear> {
        let dense = load_checked(self, op, name, shape)?;
        let group = shape.get(1).and_then(|&cols| writer_group(cols));
        match group {
            Some(g) if self.int8 && is_q8_linear(name) => {
                Q8Tensor::quantize(dense, g).map(HostLinear::Q8)
            }
            _ => Ok(HostLinear::Dense(dense)),
        }
    }
}
