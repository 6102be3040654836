//! Model specs to validated configs and fused host weights.
//!
//! A spec is `random` (the real architecture, seeded), `random-small` (the reduced one), their
//! int8 ConvRot variants `random-int8` and `random-small-int8`, a directory holding the checkpoint
//! files under their upstream names (bf16, else int8 ConvRot), two explicit files
//! `LM.safetensors,DEPTH.safetensors`, or a Hugging Face repo id with a subfolder
//! (`DeepBeepMeep/TTS/MiniMaxMusic3-Qwen3`). A config json beside a weights file overrides the
//! real configuration. Linears stored int8 load as int8 (`linear_source.rs`), tensor by tensor.

use std::path::PathBuf;

use chorus_core::host::mem_available;
use chorus_core::{Error, Result};

use crate::config::{DepthConfig, Qwen3Config, SEMANTIC_VOCAB};
use crate::random::{is_q8_linear, RandomSource, RANDOM_MUSIC_SEED};
use crate::weights::{
    build_depth, build_lm, depth_tensor_specs, lm_tensor_specs, parameter_count, DepthWeights,
    LmWeights,
};

pub use crate::files::{resolve, ModelFiles};

const OP: &str = "load_music_model";
/// Spec of the real architecture with random weights.
pub const RANDOM_SPEC: &str = "random";
/// Spec of the reduced architecture with random weights.
pub const RANDOM_SMALL_SPEC: &str = "random-small";
/// Spec of the real architecture with random weights, its linears int8 ConvRot.
pub const RANDOM_INT8_SPEC: &str = "random-int8";
/// Spec of the reduced architecture with random weights, its linears int8 ConvRot.
pub const RANDOM_SMALL_INT8_SPEC: &str = "random-small-int8";
/// The LM checkpoint's file name upstream.
pub const LM_WEIGHTS: &str = "MiniMaxMusic3-Qwen3_bf16.safetensors";
/// The int8 ConvRot LM checkpoint's file name upstream.
pub const LM_WEIGHTS_INT8: &str = "MiniMaxMusic3-Qwen3_int8_convrot.safetensors";
/// The LM config's file name upstream.
pub const LM_CONFIG: &str = "text_encoder_config.json";
/// The depth decoder checkpoint's file name upstream.
pub const DEPTH_WEIGHTS: &str = "rvq_depth_decoder_bf16.safetensors";
/// The int8 ConvRot depth decoder checkpoint's file name upstream.
pub const DEPTH_WEIGHTS_INT8: &str = "rvq_depth_decoder_int8_convrot.safetensors";
/// The depth decoder config's file name upstream.
pub const DEPTH_CONFIG: &str = "rvq_depth_decoder_config.json";
/// The tokenizer's file name upstream.
pub const TOKENIZER: &str = "tokenizer.json";

/// Both models, fused, with where they came from.
#[derive(Clone, Debug)]
pub struct MusicModel {
    pub lm_config: Qwen3Config,
    pub depth_config: DepthConfig,
    pub lm: LmWeights,
    pub depth: DepthWeights,
    pub source: String,
    /// Random weights: the songs are noise.
    pub random: bool,
    /// Checkpoint parameters of both models.
    pub parameter_count: usize,
    /// A tokenizer.json found beside the weights, if any.
    pub tokenizer: Option<PathBuf>,
}

/// The configs and int8 flag of a random spec.
fn random_spec(spec: &str) -> Option<(Qwen3Config, DepthConfig, bool)> {
    match spec {
        RANDOM_SPEC => Some((Qwen3Config::music3(), DepthConfig::music3(), false)),
        RANDOM_SMALL_SPEC => Some((Qwen3Config::small(), DepthConfig::small(), false)),
        RANDOM_INT8_SPEC => Some((Qwen3Config::music3(), DepthConfig::music3(), true)),
        RANDOM_SMALL_INT8_SPEC => Some((Qwen3Config::small(), DepthConfig::small(), true)),
        _ => None,
    }
}

/// True when `spec` names random weights (any size, float or int8).
pub fn is_random_spec(spec: &str) -> bool {
    random_spec(spec).is_some()
}

/// The configs a spec names, without loading weights (for `chorus info`).
pub fn describe(spec: &str) -> Result<(Qwen3Config, DepthConfig, String)> {
    match random_spec(spec) {
        Some((lm, depth, int8)) => {
            let what = if int8 {
                "random weights, int8 ConvRot linears"
            } else {
                "random weights"
            };
            Ok((lm, depth, what.into()))
        }
        None => {
            let files = resolve(spec)?;
            let (lm, depth) = files.configs()?;
            Ok((lm, depth, files.describe()))
        }
    }
}

/// Loads `spec` (see the module doc).
pub fn load_music_model(spec: &str) -> Result<MusicModel> {
    match random_spec(spec) {
        Some((lm, depth, false)) => random_model(lm, depth, 1.0),
        Some((lm, depth, true)) => random_int8_model(lm, depth, 1.0),
        None => resolve(spec)?.load(),
    }
}

/// Seeded random weights of the given configs; `end_gain` scales the END row of the LM head.
pub fn random_model(lm: Qwen3Config, depth: DepthConfig, end_gain: f32) -> Result<MusicModel> {
    random_from(lm, depth, end_gain, false)
}

/// [`random_model`] with the int8 linears of `random::is_q8_linear` quantized by the ConvRot
/// writer's formula, tensor by tensor as they are drawn.
pub fn random_int8_model(lm: Qwen3Config, depth: DepthConfig, end_gain: f32) -> Result<MusicModel> {
    random_from(lm, depth, end_gain, true)
}

fn random_from(
    lm: Qwen3Config,
    depth: DepthConfig,
    end_gain: f32,
    int8: bool,
) -> Result<MusicModel> {
    lm.validate()?;
    depth.validate(&lm)?;
    check_host_memory(&lm, &depth, int8)?;
    let src = RandomSource::new(&lm, &depth, RANDOM_MUSIC_SEED, end_gain);
    let src = if int8 { src.quantized() } else { src };
    let lm_w = build_lm(&lm, &src, &|s| src.audio_head(s))?;
    let depth_w = build_depth(&depth, &lm, &src)?;
    let kind = if int8 { "int8 ConvRot linears, " } else { "" };
    Ok(MusicModel {
        parameter_count: parameter_count(&lm, &depth),
        source: format!("random weights ({kind}seed {RANDOM_MUSIC_SEED:#x}): the music is noise"),
        lm_config: lm,
        depth_config: depth,
        lm: lm_w,
        depth: depth_w,
        random: true,
        tokenizer: None,
    })
}

/// Host f32 bytes the fused weights take (the LM head counted by its audio rows).
pub fn host_bytes(lm: &Qwen3Config, depth: &DepthConfig) -> usize {
    let head_rows = lm.vocab_size - SEMANTIC_VOCAB - 1;
    (parameter_count(lm, depth) - head_rows * lm.hidden_size) * std::mem::size_of::<f32>()
}

/// Host bytes of the fused weights with the `random::is_q8_linear` linears in int8 (one byte per
/// weight, four per row for the scales).
pub fn host_bytes_int8(lm: &Qwen3Config, depth: &DepthConfig) -> usize {
    let q8: usize = lm_tensor_specs(lm)
        .iter()
        .chain(depth_tensor_specs(depth).iter())
        .filter(|s| is_q8_linear(&s.name))
        .map(|s| s.shape.iter().product::<usize>() * 3 - s.shape[0] * 4)
        .sum();
    host_bytes(lm, depth) - q8
}

/// Refuses a model whose host copy cannot fit, instead of dying of memory exhaustion.
fn check_host_memory(lm: &Qwen3Config, depth: &DepthConfig, int8: bool) -> Result<()> {
    let need = if int8 {
        host_bytes_int8(lm, depth)
    } else {
        host_bytes(lm, depth)
    };
    let Some(avail) = mem_available() else {
        return Ok(());
    };
    if need > avail {
        return Err(Error::config(
            OP,
            format!(
                "the host weights need {:.1} GB and this machine has {:.1} GB available; use `random-small` on small machines",
                need as f64 / 1e9,
                avail as f64 / 1e9
            ),
        ));
    }
    Ok(())
}
