//! Model specs to a validated config and host weights in Kyutai's layout.
//!
//! A spec is `random` (stt-1b-en_fr's architecture, seeded), `random-2.6b` (stt-2.6b-en's),
//! `random-small` (`KYUTAI_STT.md` §7.1), a directory (`model.safetensors` or an index with its
//! shards, optionally `config.json` and the SentencePiece `.model`), explicit comma-separated
//! files, or a hub repo id (`kyutai/stt-1b-en_fr`). The layout (Kyutai or transformers) is told
//! from the tensor names; both load to the same weights. Without a config json the model is told
//! from the text table's rows (4001: stt-2.6b-en, 8001: stt-1b-en_fr).

use chorus_core::checkpoint::{ShardedSource, TensorSource};
use chorus_core::host::mem_available;
use chorus_core::{Error, Result};

use crate::config::SttConfig;
use crate::files::{resolve, SttFiles};
use crate::hf::{is_hf_layout, HfView, HF_LM_HEAD};
use crate::random::{random_weights, RANDOM_STT_SEED};
use crate::tokenizer::SttTokenizer;
use crate::weights::{is_ignored, parameter_count, SttWeights, TEXT_EMB};

const OP: &str = "load_stt_model";
/// Spec of stt-1b-en_fr's architecture with random weights.
pub const RANDOM_SPEC: &str = "random";
/// Spec of stt-2.6b-en's architecture with random weights.
pub const RANDOM_2B6_SPEC: &str = "random-2.6b";
/// Spec of the small architecture with random weights.
pub const RANDOM_SMALL_SPEC: &str = "random-small";
/// The default hub repo.
pub const DEFAULT_MODEL: &str = "kyutai/stt-1b-en_fr";
/// How many names an unknown-layout error lists.
const NAMES_IN_ERROR: usize = 6;

/// The checkpoint layout a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Kyutai's moshi names (`emb.*`, `transformer.layers.*`).
    Kyutai,
    /// transformers' `KyutaiSpeechToTextForConditionalGeneration` names.
    HuggingFace,
    /// Seeded random weights: the text is noise.
    Random,
}

/// A loaded model.
#[derive(Debug)]
pub struct SttModel {
    pub config: SttConfig,
    pub weights: SttWeights,
    /// The SentencePiece tokenizer found with the weights, or the stand-in of a random model.
    pub tokenizer: Option<SttTokenizer>,
    pub source: String,
    pub layout: Layout,
}

impl SttModel {
    pub fn is_random(&self) -> bool {
        self.layout == Layout::Random
    }

    pub fn parameter_count(&self) -> usize {
        parameter_count(&self.config)
    }
}

fn random_config(spec: &str) -> Option<SttConfig> {
    match spec {
        RANDOM_SPEC => Some(SttConfig::stt_1b_en_fr()),
        RANDOM_2B6_SPEC => Some(SttConfig::stt_2b6_en()),
        RANDOM_SMALL_SPEC => Some(SttConfig::random_small()),
        _ => None,
    }
}

/// True when `spec` names random weights.
pub fn is_random_spec(spec: &str) -> bool {
    random_config(spec).is_some()
}

/// Loads `spec` (see the module doc).
pub fn load_stt_model(spec: &str) -> Result<SttModel> {
    match random_config(spec) {
        Some(c) => random_model(c, RANDOM_STT_SEED),
        None => load_files(&resolve(spec)?),
    }
}

/// Seeded random weights of `config` with the synthetic tokenizer.
pub fn random_model(config: SttConfig, seed: u64) -> Result<SttModel> {
    config.validate()?;
    check_host_memory(&config)?;
    let weights = random_weights(&config, seed)?;
    Ok(SttModel {
        tokenizer: Some(SttTokenizer::synthetic(&config)),
        source: format!(
            "random weights (seed {seed:#x}, {} parameters): the text is noise",
            parameter_count(&config)
        ),
        config,
        weights,
        layout: Layout::Random,
    })
}

/// The config a set of files names; without a config json, the released model whose text
/// table the checkpoint has.
pub fn files_config(files: &SttFiles, src: &dyn TensorSource, layout: Layout) -> Result<SttConfig> {
    if let Some(p) = &files.config {
        let shown = p.display().to_string();
        let text = std::fs::read_to_string(p).map_err(|e| Error::io(OP, &shown, e))?;
        return SttConfig::from_json(&text, &shown);
    }
    let (name, extra) = match layout {
        Layout::HuggingFace => (HF_LM_HEAD, 1),
        _ => (TEXT_EMB, 1),
    };
    let rows = src.shape(name).and_then(|s| s.first().copied());
    for c in [SttConfig::stt_2b6_en(), SttConfig::stt_1b_en_fr()] {
        if rows == Some(c.text_vocab + extra) {
            return Ok(c);
        }
    }
    let rows = rows.map_or_else(|| "no".to_string(), |r| r.to_string());
    Err(Error::config(
        OP,
        format!(
            "no config.json beside {} and `{name}` has {rows} rows, neither stt-2.6b-en's 4001 \
             nor stt-1b-en_fr's 8001: pass the config",
            files.describe()
        ),
    ))
}

/// Loads resolved files: layout detection, config, validation before any data is read, weights.
pub fn load_files(files: &SttFiles) -> Result<SttModel> {
    let shards = match &files.index {
        Some(index) => ShardedSource::from_index(index)?,
        None => ShardedSource::open(&files.weights)?,
    };
    let names = shards.names();
    let layout = detect_layout(&names, shards.source_name())?;
    let config = files_config(files, &shards, layout)?;
    shards.check_dtypes(names.iter().map(String::as_str).filter(|n| !is_ignored(n)))?;
    check_host_memory(&config)?;
    let weights = match layout {
        Layout::HuggingFace => SttWeights::from_source(&config, &HfView::new(&shards, &config)?)?,
        _ => SttWeights::from_source(&config, &shards)?,
    };
    let tokenizer = match &files.tokenizer {
        Some(p) => Some(SttTokenizer::from_file(p, &config)?),
        None => None,
    };
    Ok(SttModel {
        source: format!(
            "{} ({} layout)",
            files.describe(),
            if layout == Layout::Kyutai {
                "Kyutai"
            } else {
                "transformers"
            }
        ),
        config,
        weights,
        tokenizer,
        layout,
    })
}

/// True when `names` look like Kyutai's layout.
pub fn is_kyutai_layout(names: &[String]) -> bool {
    names
        .iter()
        .any(|n| n == TEXT_EMB || n.starts_with("transformer.layers."))
}

/// Kyutai or transformers, from the tensor names.
pub fn detect_layout(names: &[String], source: &str) -> Result<Layout> {
    match (is_kyutai_layout(names), is_hf_layout(names)) {
        (true, false) => Ok(Layout::Kyutai),
        (false, true) => Ok(Layout::HuggingFace),
        (true, true) => Err(Error::Format {
            op: OP,
            path: source.into(),
            reason: "the checkpoint mixes Kyutai names (transformer.layers.*) and transformers \
                     names (model.layers.*)"
                .into(),
        }),
        (false, false) => {
            let shown: Vec<&str> = names
                .iter()
                .take(NAMES_IN_ERROR)
                .map(String::as_str)
                .collect();
            Err(Error::Format {
                op: OP,
                path: source.into(),
                reason: format!(
                    "not a Kyutai STT checkpoint: neither Kyutai names (text_emb.weight, \
                     transformer.layers.*) nor transformers names (model.embed_tokens.*, \
                     model.layers.*); found {}{}",
                    shown.join(", "),
                    if names.len() > shown.len() {
                        ", ..."
                    } else {
                        ""
                    }
                ),
            })
        }
    }
}

/// Host f32 bytes of the weights.
pub fn host_bytes(c: &SttConfig) -> usize {
    parameter_count(c) * std::mem::size_of::<f32>()
}

/// Refuses a model whose host copy cannot fit, instead of dying of memory exhaustion.
fn check_host_memory(c: &SttConfig) -> Result<()> {
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
