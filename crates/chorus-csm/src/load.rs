//! Model specs to a validated config and host weights in HF layout.
//!
//! A spec is `random` (csm-1b's architecture, seeded), `random-small` (`CSM.md` §7.1), a
//! directory (`model.safetensors` or `model.safetensors.index.json` with its shards, and
//! optionally `config.json` and `tokenizer.json`), explicit comma-separated files, or a hub repo
//! id (`sesame/csm-1b`). Without a config json the config is csm-1b's. The layout (HF or
//! Sesame) is told from the tensor names; both load to the same HF-layout weights.

use chorus_core::checkpoint::{ShardedSource, TensorSource};
use chorus_core::host::mem_available;
use chorus_core::{Error, Result};

use crate::config::CsmConfig;
use crate::files::{resolve, CsmFiles};
use crate::random::{random_weights, RandomOptions};
use crate::sesame::{is_sesame_layout, SesameView};
use crate::tokenizer::CsmTokenizer;
use crate::weights::{is_ignored, parameter_count, tensor_specs, CsmWeights, DEPTH_AUDIO_EMBED};

const OP: &str = "load_csm_model";
/// Spec of csm-1b's architecture with random weights.
pub const RANDOM_SPEC: &str = "random";
/// Spec of the small architecture with random weights.
pub const RANDOM_SMALL_SPEC: &str = "random-small";
/// The default hub repo.
pub const DEFAULT_MODEL: &str = "sesame/csm-1b";
/// How many names an unknown-layout error lists.
const NAMES_IN_ERROR: usize = 6;

/// The checkpoint layout a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// transformers' `CsmForConditionalGeneration` names.
    HuggingFace,
    /// Sesame's `models.Model` names (interleaved RoPE rows, permuted at load).
    Sesame,
    /// Seeded random weights: the speech is noise.
    Random,
}

/// A loaded model.
#[derive(Debug)]
pub struct CsmModel {
    pub config: CsmConfig,
    pub weights: CsmWeights,
    /// The Llama 3 tokenizer found with the weights, or the byte stand-in of a random model.
    pub tokenizer: Option<CsmTokenizer>,
    /// What was loaded, for logs.
    pub source: String,
    pub layout: Layout,
}

impl CsmModel {
    /// True for random weights.
    pub fn is_random(&self) -> bool {
        self.layout == Layout::Random
    }

    /// Checkpoint parameters.
    pub fn parameter_count(&self) -> usize {
        parameter_count(&self.config)
    }
}

/// The config of a random spec.
fn random_config(spec: &str) -> Option<CsmConfig> {
    match spec {
        RANDOM_SPEC => Some(CsmConfig::csm_1b()),
        RANDOM_SMALL_SPEC => Some(CsmConfig::random_small()),
        _ => None,
    }
}

/// True when `spec` names random weights.
pub fn is_random_spec(spec: &str) -> bool {
    random_config(spec).is_some()
}

/// Loads `spec` (see the module doc).
pub fn load_csm_model(spec: &str) -> Result<CsmModel> {
    match random_config(spec) {
        Some(c) => random_model(c, RandomOptions::default()),
        None => load_files(&resolve(spec)?),
    }
}

/// Seeded random weights of `config` with the byte stand-in tokenizer.
pub fn random_model(config: CsmConfig, opts: RandomOptions) -> Result<CsmModel> {
    config.validate()?;
    check_host_memory(&config)?;
    let seed = opts.seed;
    let weights = random_weights(&config, opts)?;
    Ok(CsmModel {
        tokenizer: Some(CsmTokenizer::byte_fallback(&config)?),
        source: format!(
            "random weights (seed {:#x}, {} parameters): the speech is noise",
            seed,
            parameter_count(&config)
        ),
        config,
        weights,
        layout: Layout::Random,
    })
}

/// The config a set of files names (csm-1b's when there is no config json).
pub fn files_config(files: &CsmFiles) -> Result<CsmConfig> {
    match &files.config {
        Some(p) => {
            let shown = p.display().to_string();
            let text = std::fs::read_to_string(p).map_err(|e| Error::io(OP, &shown, e))?;
            CsmConfig::from_hf_json(&text, &shown)
        }
        None => Ok(CsmConfig::csm_1b()),
    }
}

/// Loads resolved files: config, layout detection, validation before any data is read, weights.
pub fn load_files(files: &CsmFiles) -> Result<CsmModel> {
    let config = files_config(files)?;
    let shards = match &files.index {
        Some(index) => ShardedSource::from_index(index)?,
        None => ShardedSource::open(&files.weights)?,
    };
    let names = shards.names();
    let layout = detect_layout(&names, shards.source_name())?;
    shards.check_dtypes(names.iter().map(String::as_str).filter(|n| !is_ignored(n)))?;
    check_host_memory(&config)?;
    let weights = match layout {
        Layout::Sesame => CsmWeights::from_source(&config, &SesameView::new(&shards, &config))?,
        _ => CsmWeights::from_source(&config, &shards)?,
    };
    let tokenizer = match &files.tokenizer {
        Some(p) => Some(CsmTokenizer::from_file(p, &config)?),
        None => None,
    };
    Ok(CsmModel {
        source: format!(
            "{} ({} layout)",
            files.describe(),
            if layout == Layout::Sesame {
                "Sesame"
            } else {
                "HF"
            }
        ),
        config,
        weights,
        tokenizer,
        layout,
    })
}

/// HF or Sesame, from the tensor names.
pub fn detect_layout(names: &[String], source: &str) -> Result<Layout> {
    let specs = tensor_specs(&CsmConfig::random_small());
    let hf = names.iter().any(|n| {
        n == DEPTH_AUDIO_EMBED
            || n.starts_with("backbone_model.")
            || specs
                .iter()
                .any(|s| !s.name.contains(".layers.") && &s.name == n)
    });
    if is_sesame_layout(names) {
        if hf {
            return Err(Error::Format {
                op: OP,
                path: source.into(),
                reason: "the checkpoint mixes HF names (backbone_model.*) and Sesame names \
                         (backbone.layers.*)"
                    .into(),
            });
        }
        return Ok(Layout::Sesame);
    }
    if hf {
        return Ok(Layout::HuggingFace);
    }
    let shown: Vec<&str> = names
        .iter()
        .take(NAMES_IN_ERROR)
        .map(String::as_str)
        .collect();
    Err(Error::Format {
        op: OP,
        path: source.into(),
        reason: format!(
            "not a CSM checkpoint: neither HF names (backbone_model.*, embed_text_tokens.weight) \
             nor Sesame names (backbone.layers.*, text_embeddings.weight); found {}{}",
            shown.join(", "),
            if names.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        ),
    })
}

/// Host f32 bytes of the weights.
pub fn host_bytes(c: &CsmConfig) -> usize {
    parameter_count(c) * std::mem::size_of::<f32>()
}

/// Refuses a model whose host copy cannot fit, instead of dying of memory exhaustion.
fn check_host_memory(c: &CsmConfig) -> Result<()> {
    let need = host_bytes(c);
    match mem_available() {
        Some(avail) if need > avail => Err(Error::config(
            OP,
            format!(
                "the host weights need {:.1} GB and this machine has {:.1} GB available; use \
                 `random-small` on small machines",
                need as f64 / 1e9,
                avail as f64 / 1e9
            ),
        )),
        _ => Ok(()),
    }
}
