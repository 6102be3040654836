//! Configurations of the two models (serde over the Hugging Face field names) and the recipe
//! constants of the stage (`MUSIC_SEMANTIC.md` §1.1, §3, §4.1; upstream `pipeline.py:27-35`).

use chorus_core::{Error, Result};
use serde::Deserialize;

/// First LM token id of a semantic code: code `c` is token `AUDIO_CODE_OFFSET + c`.
pub const AUDIO_CODE_OFFSET: usize = 151_675;
/// LM token id that ends the audio.
pub const AUDIO_END_TOKEN: usize = 151_670;
/// Semantic codes per frame's first level.
pub const SEMANTIC_VOCAB: usize = 16_384;
/// Columns of the audio logits: the semantic codes, then END.
pub const AUDIO_LOGITS: usize = SEMANTIC_VOCAB + 1;
/// Column of END in the audio logits.
pub const END_COLUMN: usize = SEMANTIC_VOCAB;
/// Hard cap of emitted frames per song (`_MAX_AUDIO_FRAMES`).
pub const MAX_AUDIO_FRAMES: usize = 9_000;
/// Classifier-free guidance scale of every draw (`_AR_CFG_SCALE`).
pub const CFG_SCALE: f32 = 1.5;
/// Conditional-row top-k that limits the LM draw (`_AR_CFG_TOP_K`).
pub const CFG_TOP_K: usize = 50;
/// Top-k of every draw (`_AR_SAMPLING_TOP_K`).
pub const SAMPLING_TOP_K: usize = 50;
/// Frames per second of the semantic codes (24000 / 960).
pub const FRAME_RATE: f64 = 25.0;
/// Song duration limits accepted at the edge, in seconds.
pub const MIN_SECONDS: f64 = 1.0;
pub const MAX_SECONDS: f64 = 360.0;
/// Random draws per frame: c0 and the 7 depth levels (draw index `8 f + l`).
pub const DRAWS_PER_FRAME: u32 = 8;

/// `transformers.Qwen3Config`, the fields the stage uses (HF names).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Qwen3Config {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f64,
    /// Old-style field; `rope_parameters.rope_theta` wins when both are present.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub rope_parameters: Option<RopeParameters>,
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub use_sliding_window: bool,
    #[serde(default = "default_act")]
    pub hidden_act: String,
}

/// `rope_parameters` of recent transformers configs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RopeParameters {
    pub rope_theta: f64,
    #[serde(default = "default_rope_type")]
    pub rope_type: String,
}

fn default_max_positions() -> usize {
    ROPE_POSITIONS
}
fn default_act() -> String {
    "silu".into()
}
fn default_rope_type() -> String {
    "default".into()
}

/// RoPE table length: the accelerated path's override (`pipeline.py:113`); positions reach
/// at most 5,000 + 9,000 - 1.
pub const ROPE_POSITIONS: usize = 16_384;

impl Qwen3Config {
    /// MiniMax Music 3's LM (`text_encoder_config.json`).
    pub fn music3() -> Self {
        Self {
            hidden_size: 4096,
            intermediate_size: 12288,
            num_hidden_layers: 36,
            num_attention_heads: 32,
            num_key_value_heads: 8,
            head_dim: 128,
            vocab_size: 200_000,
            rms_norm_eps: 1e-6,
            rope_theta: None,
            rope_parameters: Some(RopeParameters {
                rope_theta: 1e6,
                rope_type: "default".into(),
            }),
            max_position_embeddings: ROPE_POSITIONS,
            tie_word_embeddings: false,
            attention_bias: false,
            use_sliding_window: false,
            hidden_act: "silu".into(),
        }
    }

    /// The reduced configuration of the same architecture for CPU tests (`random-small`).
    pub fn small() -> Self {
        Self {
            hidden_size: 256,
            intermediate_size: 512,
            num_hidden_layers: 2,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            head_dim: 64,
            ..Self::music3()
        }
    }

    /// RoPE base frequency.
    pub fn theta(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .map(|r| r.rope_theta)
            .or(self.rope_theta)
            .unwrap_or(1e6)
    }

    /// Parses a config json, naming the file in errors.
    pub fn from_json(text: &str, source: &str) -> Result<Self> {
        let c: Self = serde_json::from_str(text).map_err(|e| Error::Format {
            op: "Qwen3Config::from_json",
            path: source.into(),
            reason: e.to_string(),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Refuses what the runtime does not implement, once, so inner paths never branch on it.
    pub fn validate(&self) -> Result<()> {
        const OP: &str = "Qwen3Config::validate";
        let bad = |r: String| Err(Error::config(OP, r));
        if self.use_sliding_window {
            return bad(
                "use_sliding_window = true is not supported (every layer is full attention)".into(),
            );
        }
        if self.attention_bias {
            return bad(
                "attention_bias = true is not supported (Qwen3 with q/k norms has none)".into(),
            );
        }
        if self.tie_word_embeddings {
            return bad(
                "tie_word_embeddings = true is not supported (lm_head is its own tensor)".into(),
            );
        }
        if self.hidden_act != "silu" {
            return bad(format!(
                "hidden_act `{}` is not supported (silu)",
                self.hidden_act
            ));
        }
        if let Some(r) = &self.rope_parameters {
            if r.rope_type != "default" {
                return bad(format!(
                    "rope_type `{}` is not supported (default)",
                    r.rope_type
                ));
            }
        }
        let zero = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{name} must be positive"));
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return bad(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head_dim {} must be even for rotate-half RoPE",
                self.head_dim
            ));
        }
        // The END column (16384) is looked up as token 151675 + 16384 by the rest of its frame.
        if self.vocab_size <= AUDIO_CODE_OFFSET + SEMANTIC_VOCAB {
            return bad(format!(
                "vocab_size {} cannot hold the audio codes {}..{}",
                self.vocab_size,
                AUDIO_CODE_OFFSET,
                AUDIO_CODE_OFFSET + SEMANTIC_VOCAB
            ));
        }
        // max_position_embeddings is not checked: the json says 10240, and the runtime sizes
        // its RoPE table for the longest song (ROPE_POSITIONS) either way.
        Ok(())
    }

    /// Width of the fused q/k/v projection.
    pub fn qkv_width(&self) -> usize {
        (self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim
    }
}

/// `MiniMaxMusic3RVQDepthDecoder`'s constructor arguments (`rvq_depth_decoder_config.json`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct DepthConfig {
    #[serde(default = "d_hidden")]
    pub hidden_size: usize,
    #[serde(default = "d_layers")]
    pub num_layers: usize,
    #[serde(default = "d_heads")]
    pub num_attention_heads: usize,
    #[serde(default = "d_inter")]
    pub intermediate_size: usize,
    #[serde(default = "d_vocab")]
    pub audio_vocab_size: usize,
    #[serde(default = "d_books")]
    pub num_codebooks: usize,
    #[serde(default = "d_pos")]
    pub max_position_embeddings: usize,
}

fn d_hidden() -> usize {
    4096
}
fn d_layers() -> usize {
    4
}
fn d_heads() -> usize {
    16
}
fn d_inter() -> usize {
    6144
}
fn d_vocab() -> usize {
    1024
}
fn d_books() -> usize {
    8
}
fn d_pos() -> usize {
    16
}

/// diffusers `RMSNorm(eps=1e-6)` of the depth decoder.
pub const DEPTH_RMS_EPS: f32 = 1e-6;

impl DepthConfig {
    /// The real depth decoder (constructor defaults, matching the HF config).
    pub fn music3() -> Self {
        Self {
            hidden_size: d_hidden(),
            num_layers: d_layers(),
            num_attention_heads: d_heads(),
            intermediate_size: d_inter(),
            audio_vocab_size: d_vocab(),
            num_codebooks: d_books(),
            max_position_embeddings: d_pos(),
        }
    }

    /// The reduced depth decoder paired with [`Qwen3Config::small`].
    pub fn small() -> Self {
        Self {
            hidden_size: 256,
            num_layers: 2,
            num_attention_heads: 4,
            intermediate_size: 384,
            ..Self::music3()
        }
    }

    /// Parses a config json, naming the file in errors.
    pub fn from_json(text: &str, source: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| Error::Format {
            op: "DepthConfig::from_json",
            path: source.into(),
            reason: e.to_string(),
        })
    }

    /// Head width.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Checks the depth decoder against the LM it serves.
    pub fn validate(&self, lm: &Qwen3Config) -> Result<()> {
        const OP: &str = "DepthConfig::validate";
        let bad = |r: String| Err(Error::config(OP, r));
        if self.hidden_size != lm.hidden_size {
            return bad(format!(
                "hidden_size {} differs from the LM's {} (frame hiddens concatenate both)",
                self.hidden_size, lm.hidden_size
            ));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return bad(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if self.num_codebooks != DRAWS_PER_FRAME as usize {
            return bad(format!(
                "num_codebooks {} (the stage runs 8)",
                self.num_codebooks
            ));
        }
        if self.max_position_embeddings < self.num_codebooks {
            return bad(format!(
                "max_position_embeddings {} < num_codebooks {}",
                self.max_position_embeddings, self.num_codebooks
            ));
        }
        if self.audio_vocab_size < SAMPLING_TOP_K || self.num_layers == 0 {
            return bad(format!(
                "audio_vocab_size {} / num_layers {} out of range",
                self.audio_vocab_size, self.num_layers
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vocabulary_without_a_row_for_end_is_refused() {
        // END (column 16384) is looked up as token 151675 + 16384 by the rest of its frame.
        let c = Qwen3Config {
            vocab_size: AUDIO_CODE_OFFSET + SEMANTIC_VOCAB,
            ..Qwen3Config::small()
        };
        assert!(c.validate().unwrap_err().to_string().contains("vocab_size"));
        let c = Qwen3Config {
            vocab_size: AUDIO_CODE_OFFSET + SEMANTIC_VOCAB + 1,
            ..Qwen3Config::small()
        };
        assert!(c.validate().is_ok());
    }
}
