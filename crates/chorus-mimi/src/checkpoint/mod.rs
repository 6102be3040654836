//! Checkpoint loading: a model spec (`random`, a file, a directory or a hub repo id) to a
//! validated [`MimiConfig`] and normalised [`MimiWeights`].
//!
//! Every layout is viewed through HF names ([`kyutai_layout::KyutaiView`] renames and splits the
//! original layout), so one routine ([`hf_layout::build_weights`]) checks names and shapes and
//! does the folding for all of them, random weights included.

pub mod hf_encoder;
pub mod hf_layout;
pub mod hub;
pub mod kyutai_layout;
pub use chorus_core::checkpoint::{safetensors, source, writer};

use std::path::{Path, PathBuf};

use chorus_core::{Error, Result};

pub use self::safetensors::{Dtype, SafetensorsFile};
pub use self::writer::write_safetensors;
use crate::config::MimiConfig;
use crate::weights::{ConvWeights, MimiWeights};
use kyutai_layout::KyutaiView;
use source::TensorSource;

const OP: &str = "load_model";
/// The spec that selects seeded random weights.
pub const RANDOM_SPEC: &str = "random";
/// The default model spec.
pub const DEFAULT_MODEL: &str = "kyutai/mimi";
/// How many tensor names an unknown-layout error lists.
const NAMES_IN_ERROR: usize = 6;

/// The checkpoint layout a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// transformers' `MimiModel` names (`kyutai/mimi` `model.safetensors`).
    HuggingFace,
    /// Kyutai's original names (`tokenizer-*.safetensors`): fused in_proj, interleaved RoPE.
    Kyutai,
    /// Seeded random weights: the output is noise.
    Random,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::HuggingFace => "Hugging Face",
            Layout::Kyutai => "Kyutai original",
            Layout::Random => "random (output is noise)",
        })
    }
}

/// A loaded model: configuration, normalised decoder weights, and where they came from.
#[derive(Clone, Debug)]
pub struct LoadedModel {
    pub config: MimiConfig,
    pub weights: MimiWeights,
    pub layout: Layout,
    /// A path, a repo id with its resolved file, or a random-weights notice.
    pub source: String,
    /// Decoder-side parameters after folding (codebook tables included).
    pub parameter_count: usize,
}

impl LoadedModel {
    /// True for random weights, whose decoded audio is noise.
    pub fn is_random(&self) -> bool {
        self.layout == Layout::Random
    }
}

/// Loads `spec`: `random`, a `.safetensors` file, a directory, or a hub repo id (`kyutai/mimi`).
pub fn load_model(spec: &str) -> Result<LoadedModel> {
    if spec == RANDOM_SPEC {
        return crate::random::random_model(
            &MimiConfig::default(),
            crate::random::RANDOM_MODEL_SEED,
        );
    }
    let path = Path::new(spec);
    if path.exists() {
        return load_local(path);
    }
    if hub::looks_like_repo_id(spec) && !spec.ends_with(".safetensors") {
        let files = hub::resolve(spec)?;
        let config = match &files.config {
            Some(p) => read_config(p)?,
            None => MimiConfig::default(),
        };
        let mut model = load_file(&files.weights, config)?;
        model.source = format!("{spec} ({})", files.weights.display());
        return Ok(model);
    }
    Err(Error::io(
        OP,
        spec,
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file or directory (and not a hub repo id like kyutai/mimi)",
        ),
    ))
}

/// Loads a local file or directory; a `config.json` beside the weights overrides the defaults.
pub fn load_local(path: &Path) -> Result<LoadedModel> {
    let (weights, dir) = if path.is_dir() {
        (find_weights(path)?, path.to_path_buf())
    } else {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        (path.to_path_buf(), dir)
    };
    let config_path = dir.join(hub::HF_CONFIG);
    let config = if config_path.is_file() {
        read_config(&config_path)?
    } else {
        MimiConfig::default()
    };
    load_file(&weights, config)
}

fn read_config(path: &Path) -> Result<MimiConfig> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(OP, &display, e))?;
    MimiConfig::from_json(&text, &display)
}

/// Picks the weights file of a directory: `model.safetensors`, else the only
/// `tokenizer-*.safetensors`, else the only `*.safetensors`.
pub(crate) fn find_weights(dir: &Path) -> Result<PathBuf> {
    let display = dir.display().to_string();
    let preferred = dir.join(hub::HF_WEIGHTS);
    if preferred.is_file() {
        return Ok(preferred);
    }
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(OP, &display, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    all.sort();
    let tokenizers: Vec<&PathBuf> = all
        .iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("tokenizer-"))
        })
        .collect();
    match (tokenizers.as_slice(), all.as_slice()) {
        ([one], _) => Ok((*one).clone()),
        ([], [one]) => Ok(one.clone()),
        ([], []) => Err(Error::io(
            OP,
            &display,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no .safetensors file in this directory",
            ),
        )),
        _ => Err(Error::input(
            OP,
            format!(
                "{display} holds several checkpoints ({}); pass the file itself",
                all.iter()
                    .filter_map(|p| p.file_name().and_then(|n| n.to_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Opens one safetensors file with `config`, detecting its layout from the tensor names.
pub fn load_file(path: &Path, config: MimiConfig) -> Result<LoadedModel> {
    config.validate()?;
    let file = SafetensorsFile::open(path)?;
    load_source(file, config, path.display().to_string())
}

/// Builds a model from tensors held anywhere (a file, host memory) in either layout; `source`
/// names where they came from in reports.
pub fn load_source<S: TensorSource>(
    src: S,
    config: MimiConfig,
    source: String,
) -> Result<LoadedModel> {
    config.validate()?;
    let layout = detect_layout(&src)?;
    let weights = match layout {
        Layout::Kyutai => {
            hf_layout::build_weights(&config, &KyutaiView::new(src, config.num_attention_heads))?
        }
        _ => hf_layout::build_weights(&config, &src)?,
    };
    Ok(LoadedModel {
        parameter_count: parameter_count(&weights),
        config,
        weights,
        layout,
        source,
    })
}

/// Tells the layout from the tensor names; names neither layout uses are an error.
pub fn detect_layout(src: &dyn TensorSource) -> Result<Layout> {
    let names = src.names();
    let has = |prefixes: &[&str]| {
        names
            .iter()
            .any(|n| prefixes.iter().any(|p| n.starts_with(p)))
    };
    if has(&[
        "decoder_transformer.transformer.",
        "quantizer.rvq_first.",
        "quantizer.rvq_rest.",
        "decoder.model.",
    ]) {
        return Ok(Layout::Kyutai);
    }
    if has(&[
        "decoder_transformer.layers.",
        hf_layout::SEMANTIC_RVQ,
        hf_layout::ACOUSTIC_RVQ,
        "decoder.layers.",
    ]) {
        return Ok(Layout::HuggingFace);
    }
    let sample: Vec<&str> = names
        .iter()
        .take(NAMES_IN_ERROR)
        .map(String::as_str)
        .collect();
    Err(Error::Format {
        op: OP,
        path: src.source_name().into(),
        reason: format!(
            "unknown checkpoint layout: neither Hugging Face (`decoder_transformer.layers.*`) nor Kyutai (`decoder_transformer.transformer.*`) names; found {} tensors such as [{}]",
            names.len(),
            sample.join(", ")
        ),
    })
}

/// Decoder-side parameters held by `w`.
pub fn parameter_count(w: &MimiWeights) -> usize {
    let conv = |c: &ConvWeights| c.weight.len() + c.bias.as_ref().map_or(0, |b| b.len());
    let rvq = [&w.semantic, &w.acoustic]
        .iter()
        .map(|r| r.codebooks.iter().map(|t| t.len()).sum::<usize>() + r.output_proj.len())
        .sum::<usize>();
    let transformer: usize = w
        .transformer
        .iter()
        .map(|l| {
            [
                &l.input_layernorm_weight,
                &l.input_layernorm_bias,
                &l.q_proj,
                &l.k_proj,
                &l.v_proj,
                &l.o_proj,
                &l.self_attn_layer_scale,
                &l.post_attention_layernorm_weight,
                &l.post_attention_layernorm_bias,
                &l.fc1,
                &l.fc2,
                &l.mlp_layer_scale,
            ]
            .iter()
            .map(|t| t.len())
            .sum::<usize>()
        })
        .sum();
    let seanet = conv(&w.decoder.conv_in)
        + conv(&w.decoder.conv_out)
        + w.decoder
            .stages
            .iter()
            .map(|s| {
                s.convtr.weight.len()
                    + s.convtr.bias.as_ref().map_or(0, |b| b.len())
                    + s.resblocks
                        .iter()
                        .map(|r| conv(&r.conv1) + conv(&r.conv2))
                        .sum::<usize>()
            })
            .sum::<usize>();
    rvq + w.upsample.weight.len() + transformer + seanet
}
