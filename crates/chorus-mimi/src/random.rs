//! Seeded random weights of the real architecture, bit-identical to `tools/fixtures/weightgen.py`.
//!
//! Element `i` of the tensor called `name` is a pure function of `(seed, name, i)`: splitmix64
//! (Steele, Lea, Flood: "Fast splittable pseudorandom number generators", OOPSLA 2014) run at
//! counter `i + 1` from a per-tensor key `mix64(seed ^ fnv1a64(name))`. The top 24 bits map exactly
//! to a uniform f32 in [-1, 1), then `value = u * scale + offset` in f32 (two roundings, no FMA),
//! so numpy reproduces every bit with vectorised uint64 arithmetic. Scales keep the decoded PCM
//! well-conditioned (RMS about 0.2, peak about 1 on the real architecture): variance-preserving
//! fan-in scaling, layer norms near 1, layer scales near 0.1, cluster usage in [0.5, 1.5).

pub use chorus_core::rng::{fnv1a64, mix64, uniform};
use chorus_core::{HostTensor, Result};

use crate::checkpoint::hf_encoder::encoder_tensor_specs;
use crate::checkpoint::hf_layout::{build_weights, decoder_tensor_specs, seanet_plan};
use crate::checkpoint::kyutai_layout::{hf_to_kyutai_name, KyutaiView};
use crate::checkpoint::source::MemorySource;
use crate::checkpoint::{parameter_count, Layout, LoadedModel};
use crate::config::MimiConfig;

/// Seed of the `random` model spec.
pub const RANDOM_MODEL_SEED: u64 = 0x6d69_6d69_2d72_6e64;
/// Gain of a residual block's last conv, so that each identity skip grows the signal gently.
const RESBLOCK_OUT_GAIN: f64 = 0.5;
/// Gain of the last conv, so that the noise sits in a typical audio range (peak near 1).
const OUTPUT_CONV_GAIN: f64 = 0.25;
/// Gain of the encoder's input conv, so that speech at -6 dBFS moves the latent well beyond the
/// constant the biases build up (with gain 1 level 1 saw 4 distinct codes in 140 frames).
const ENCODER_INPUT_CONV_GAIN: f64 = 4.0;
/// The encoder's input conv.
const ENCODER_INPUT_CONV: &str = "encoder.layers.0.conv.weight";

/// How one tensor is drawn: `u * scale + offset`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Init {
    pub scale: f32,
    pub offset: f32,
}

/// The init of a decoder-side HF tensor, chosen by its role (name) and fan-in (shape).
pub fn init_for(c: &MimiConfig, hf_name: &str, shape: &[usize]) -> Init {
    let fixed = |scale: f32, offset: f32| Init { scale, offset };
    if hf_name.ends_with("codebook.embed_sum") {
        return fixed(1.0, 0.0);
    }
    if hf_name.ends_with("codebook.cluster_usage") {
        return fixed(0.5, 1.0);
    }
    if hf_name.ends_with("layernorm.weight") {
        return fixed(0.1, 1.0);
    }
    if hf_name.ends_with("layernorm.bias") {
        return fixed(0.1, 0.0);
    }
    if hf_name.ends_with("layer_scale.scale") {
        return fixed(0.05, 0.1);
    }
    if hf_name.ends_with(".bias") {
        return fixed(0.05, 0.0);
    }
    let fan_in = fan_in(c, hf_name, shape);
    let conv_out = format!(
        "decoder.layers.{}.conv.weight",
        seanet_plan(c).conv_out.index
    );
    let gain = if hf_name.contains(".block.3.") {
        RESBLOCK_OUT_GAIN
    } else if hf_name == conv_out {
        OUTPUT_CONV_GAIN
    } else if hf_name == ENCODER_INPUT_CONV {
        ENCODER_INPUT_CONV_GAIN
    } else {
        1.0
    };
    // Uniform [-a, a) has variance a^2 / 3: a = sqrt(3 / fan_in) preserves unit variance.
    fixed((gain * (3.0 / fan_in as f64).sqrt()) as f32, 0.0)
}

/// Inputs summed into one output: transposed convs see `c_in / groups * kernel / stride` taps.
fn fan_in(c: &MimiConfig, hf_name: &str, shape: &[usize]) -> usize {
    let convtr_stride = if hf_name == "upsample.conv.weight" {
        Some(c.compress)
    } else {
        seanet_plan(c)
            .stages
            .iter()
            .find(|s| hf_name == format!("decoder.layers.{}.conv.weight", s.convtr.index))
            .map(|s| s.convtr.stride)
    };
    match (convtr_stride, shape) {
        (Some(stride), [c_in, _, k]) => {
            let groups = if hf_name.starts_with("upsample") {
                c.upsample_groups
            } else {
                1
            };
            (c_in / groups * k / stride).max(1)
        }
        (_, [_, c_in, k]) => c_in * k,
        (_, [_, c_in]) => *c_in,
        _ => 1,
    }
}

/// Draws one tensor.
pub fn random_tensor(seed: u64, name: &str, shape: Vec<usize>, init: Init) -> HostTensor {
    let n = shape.iter().product();
    let mut data = uniform(seed, name, n);
    for x in &mut data {
        *x = *x * init.scale + init.offset;
    }
    HostTensor { shape, data }
}

/// Raw checkpoint tensors (decoder, then encoder side) in `layout` (the `Random` layout uses HF names).
///
/// Each layout is drawn under its own names: an original-layout file holds a fused
/// `in_proj_weight` drawn as one tensor, so loading it exercises the q/k permutation.
pub fn random_tensors(c: &MimiConfig, seed: u64, layout: Layout) -> Vec<(String, HostTensor)> {
    let mut specs = decoder_tensor_specs(c);
    specs.extend(encoder_tensor_specs(c));
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        let init = init_for(c, &spec.name, &spec.shape);
        let (name, shape) = match layout {
            Layout::HuggingFace | Layout::Random => (spec.name, spec.shape),
            Layout::Kyutai => {
                if spec.name.ends_with(".k_proj.weight") || spec.name.ends_with(".v_proj.weight") {
                    continue;
                }
                match spec.name.strip_suffix("q_proj.weight") {
                    Some(stem) => (
                        hf_to_kyutai_name(c, &format!("{stem}in_proj_weight")),
                        vec![3 * spec.shape[0], spec.shape[1]],
                    ),
                    None => (hf_to_kyutai_name(c, &spec.name), spec.shape),
                }
            }
        };
        let t = random_tensor(seed, &name, shape, init);
        out.push((name, t));
    }
    out
}

/// A small model of the real topology (1920 samples per frame, every layer kind) with a 10-token
/// window, so that window and ring behaviour show within a few frames: for fast tests.
pub fn small_config() -> MimiConfig {
    MimiConfig {
        hidden_size: 64,
        num_filters: 8,
        codebook_dim: 16,
        num_hidden_layers: 2,
        intermediate_size: 128,
        num_attention_heads: 4,
        num_key_value_heads: 4,
        upsample_groups: 64,
        sliding_window: 10,
        ..MimiConfig::default()
    }
}

/// A model of the real architecture with seeded random weights, normalised by the same code as
/// an HF checkpoint. Its output is noise.
pub fn random_model(c: &MimiConfig, seed: u64) -> Result<LoadedModel> {
    random_model_in_layout(c, seed, Layout::HuggingFace)
}

/// Like [`random_model`], but drawn in `layout`'s names and loaded through that layout's view:
/// `Kyutai` gives the weights an original-layout file from [`random_tensors`] would load to.
pub fn random_model_in_layout(c: &MimiConfig, seed: u64, layout: Layout) -> Result<LoadedModel> {
    let source = format!("random weights (seed {seed:#x}): decoded audio is noise");
    let memory = MemorySource::new(source.clone(), random_tensors(c, seed, layout));
    let weights = match layout {
        Layout::Kyutai => build_weights(c, &KyutaiView::new(memory, c.num_attention_heads))?,
        Layout::HuggingFace | Layout::Random => build_weights(c, &memory)?,
    };
    Ok(LoadedModel {
        config: c.clone(),
        parameter_count: parameter_count(&weights),
        weights,
        layout: Layout::Random,
        source,
    })
}
