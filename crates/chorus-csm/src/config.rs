//! The configuration of CSM: two Llama 3.2-style decoders (backbone, depth decoder), the audio
//! vocabulary and the special ids (`CSM.md` §1), parsed from transformers' `CsmConfig` json or
//! from Sesame's `config.json` (flavors `llama-1B` / `llama-100M`), validated once.

use chorus_core::{Error, Result};
use chorus_lm::{Llama3Scaling, RopeScaling};

use chorus_core::json::{Fields, JsonValue};

/// Classes per codebook of csm-1b: Mimi's 2048 codes plus three extra classes.
pub const CSM_AUDIO_VOCAB: usize = 2051;
/// Codes of one Mimi codebook: a code a Mimi encoder can produce is below this.
pub const MIMI_CODEBOOK_SIZE: usize = 2048;
/// Codebooks of csm-1b (Mimi's 32 quantizers).
pub const CSM_CODEBOOKS: usize = 32;
/// The Llama 3.2 text vocabulary.
pub const CSM_TEXT_VOCAB: usize = 128_256;
/// The backbone's positions (Sesame's KV cache, HF `max_position_embeddings`).
pub const CSM_MAX_POSITIONS: usize = 2048;
/// RoPE base of both decoders.
pub const CSM_ROPE_THETA: f32 = 500_000.0;
/// The fewest codebooks the frame loop is defined for (codebook 0 plus one depth level).
pub const MIN_CODEBOOKS: usize = 2;
/// Text ids of csm-1b (`CSM.md` §1.2).
pub const CSM_BOS: u32 = 128_000;
pub const CSM_TEXT_EOS: u32 = 128_001;
pub const CSM_AUDIO_TOKEN: u32 = 128_002;
pub const CSM_AUDIO_EOS: u32 = 128_003;
/// Codebook ids of csm-1b: 2050 pads, an all-0 frame ends the audio.
pub const CSM_CODEBOOK_PAD: u32 = 2050;
pub const CSM_CODEBOOK_EOS: u32 = 0;

const OP: &str = "CsmConfig";

/// One decoder (backbone or depth decoder): transformers' Llama field names.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: Option<Llama3Scaling>,
    pub max_position_embeddings: usize,
}

/// The special ids of the text and audio vocabularies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialIds {
    /// `<|begin_of_text|>`: the first token of every text segment.
    pub bos: u32,
    /// `<|end_of_text|>`: the last token of every text segment.
    pub text_eos: u32,
    /// `<|AUDIO|>`: HF's placeholder of one audio frame (not used by the frame layout).
    pub audio_token: u32,
    /// `<|audio_eos|>`: HF's placeholder of the all-0 EOS frame.
    pub audio_eos: u32,
    /// The config's `pad_token_id` (equal to the audio token in csm-1b).
    pub pad: u32,
    /// Codebook padding class (2050).
    pub codebook_pad: u32,
    /// Codebook EOS code: a frame whose codes all equal it ends the audio (0).
    pub codebook_eos: u32,
}

/// The whole model: backbone, depth decoder, vocabularies, ids.
#[derive(Clone, Debug, PartialEq)]
pub struct CsmConfig {
    pub backbone: LlamaConfig,
    pub depth: LlamaConfig,
    pub num_codebooks: usize,
    /// Classes per codebook (2051), the width of every audio head.
    pub audio_vocab_size: usize,
    pub text_vocab_size: usize,
    pub ids: SpecialIds,
}

/// csm-1b's rope scaling as transformers stores it for the backbone (`convert_csm.py`); equal bit
/// for bit to Sesame's (32, 1, 4, 8192) (`chorus_lm::rope` tests).
const BACKBONE_LLAMA3: Llama3Scaling = Llama3Scaling {
    factor: 32.0,
    low_freq_factor: 0.125,
    high_freq_factor: 0.5,
    original_max_position_embeddings: 1024.0,
};
/// The same for the depth decoder.
const DEPTH_LLAMA3: Llama3Scaling = Llama3Scaling {
    factor: 32.0,
    low_freq_factor: 0.001_953_125,
    high_freq_factor: 0.007_812_5,
    original_max_position_embeddings: 16.0,
};

impl LlamaConfig {
    /// Sesame's `llama-1B` flavor (the backbone), in HF's terms.
    pub fn llama_1b() -> Self {
        Self {
            hidden_size: 2048,
            intermediate_size: 8192,
            num_hidden_layers: 16,
            num_attention_heads: 32,
            num_key_value_heads: 8,
            head_dim: 64,
            rms_norm_eps: 1e-5,
            rope_theta: CSM_ROPE_THETA,
            rope_scaling: Some(BACKBONE_LLAMA3),
            max_position_embeddings: CSM_MAX_POSITIONS,
        }
    }

    /// Sesame's `llama-100M` flavor (the depth decoder) for `num_codebooks` codebooks: HF's
    /// `max_position_embeddings` is `num_codebooks + 1` (33).
    pub fn llama_100m(num_codebooks: usize) -> Self {
        Self {
            hidden_size: 1024,
            intermediate_size: 8192,
            num_hidden_layers: 4,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            head_dim: 128,
            rms_norm_eps: 1e-5,
            rope_theta: CSM_ROPE_THETA,
            rope_scaling: Some(DEPTH_LLAMA3),
            max_position_embeddings: num_codebooks + 1,
        }
    }

    /// Width of the q projection.
    pub fn q_width(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of the k and v projections each.
    pub fn kv_width(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// The RoPE frequencies' scaling in chorus-lm's terms.
    pub fn rope(&self) -> RopeScaling {
        self.rope_scaling
            .map_or(RopeScaling::None, RopeScaling::Llama3)
    }

    /// Refuses what the decoder cannot run; `what` (`backbone`, `depth decoder`) names it.
    pub fn validate(&self, what: &str) -> Result<()> {
        let bad = |r: String| Err(Error::config(OP, format!("{what}: {r}")));
        let sizes = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
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
        if self.q_width() != self.hidden_size {
            return bad(format!(
                "head_dim {} x num_attention_heads {} = {} differs from hidden_size {}",
                self.head_dim,
                self.num_attention_heads,
                self.q_width(),
                self.hidden_size
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim {} must be even for RoPE", self.head_dim));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return bad(format!(
                "rms_norm_eps {} must be positive",
                self.rms_norm_eps
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return bad(format!("rope_theta {} must exceed 1", self.rope_theta));
        }
        if let Some(s) = &self.rope_scaling {
            let values = [
                ("factor", s.factor),
                ("low_freq_factor", s.low_freq_factor),
                ("high_freq_factor", s.high_freq_factor),
                (
                    "original_max_position_embeddings",
                    s.original_max_position_embeddings,
                ),
            ];
            if let Some((name, v)) = values.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
                return bad(format!("rope scaling {name} {v} must be positive"));
            }
            if s.high_freq_factor <= s.low_freq_factor {
                return bad(format!(
                    "rope scaling high_freq_factor {} must exceed low_freq_factor {}",
                    s.high_freq_factor, s.low_freq_factor
                ));
            }
        }
        Ok(())
    }
}

impl CsmConfig {
    /// Sesame csm-1b (`CSM.md` §1).
    pub fn csm_1b() -> Self {
        Self {
            backbone: LlamaConfig::llama_1b(),
            depth: LlamaConfig::llama_100m(CSM_CODEBOOKS),
            num_codebooks: CSM_CODEBOOKS,
            audio_vocab_size: CSM_AUDIO_VOCAB,
            text_vocab_size: CSM_TEXT_VOCAB,
            ids: SpecialIds {
                bos: CSM_BOS,
                text_eos: CSM_TEXT_EOS,
                audio_token: CSM_AUDIO_TOKEN,
                audio_eos: CSM_AUDIO_EOS,
                pad: CSM_AUDIO_TOKEN,
                codebook_pad: CSM_CODEBOOK_PAD,
                codebook_eos: CSM_CODEBOOK_EOS,
            },
        }
    }

    /// The smallest configuration that keeps every code path (`CSM.md` §7.1): 8 codebooks of 11
    /// classes, backbone 64 wide (4 heads over 2 KV heads), depth decoder 32 wide (a real
    /// projector), both with llama3 rope scaling. Text EOS is 3 (transformers' config has no
    /// text EOS field; the oracle writes it beside the config).
    pub fn random_small() -> Self {
        let books = 8;
        Self {
            backbone: LlamaConfig {
                hidden_size: 64,
                intermediate_size: 128,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                head_dim: 16,
                max_position_embeddings: 256,
                ..LlamaConfig::llama_1b()
            },
            depth: LlamaConfig {
                hidden_size: 32,
                intermediate_size: 64,
                num_hidden_layers: 2,
                num_attention_heads: 4,
                num_key_value_heads: 2,
                head_dim: 8,
                max_position_embeddings: books + 1,
                ..LlamaConfig::llama_100m(books)
            },
            num_codebooks: books,
            audio_vocab_size: 11,
            text_vocab_size: 100,
            ids: SpecialIds {
                bos: 1,
                text_eos: 3,
                audio_token: 98,
                audio_eos: 97,
                pad: 2,
                codebook_pad: 10,
                codebook_eos: 0,
            },
        }
    }

    /// Rows of the audio embedding table: `num_codebooks * audio_vocab_size`; codebook `i`'s
    /// code `c` is row `i * audio_vocab_size + c`.
    pub fn audio_rows(&self) -> usize {
        self.num_codebooks * self.audio_vocab_size
    }

    /// Codes a prompt's audio frame may hold: below both the audio vocabulary and Mimi's codebook.
    pub fn code_limit(&self) -> usize {
        self.audio_vocab_size.min(MIMI_CODEBOOK_SIZE)
    }

    /// Parses transformers' `CsmConfig` json (backbone fields at the top, the depth decoder under
    /// `depth_decoder_config`) or Sesame's `config.json` (flavors, possibly under `args`);
    /// `what` (a path) names the file in errors. Validates the result.
    pub fn from_hf_json(text: &str, what: &str) -> Result<Self> {
        let value: JsonValue = serde_json::from_str(text).map_err(|e| Error::Format {
            op: OP,
            path: what.into(),
            reason: format!("not valid JSON: {e}"),
        })?;
        let top = Fields::root(OP, &value, what)?;
        let c = if top.has("depth_decoder_config") {
            from_transformers(&top)?
        } else if let Some(sesame) = top.args_with("backbone_flavor")? {
            from_sesame(&sesame)?
        } else {
            return Err(top.malformed(
                "neither a transformers CsmConfig (no `depth_decoder_config`) nor a Sesame \
                 config (no `backbone_flavor`, at the top or under `args`)"
                    .into(),
            ));
        };
        c.validate()?;
        Ok(c)
    }

    /// Refuses an inconsistent configuration, once, so the frame loop never checks it.
    pub fn validate(&self) -> Result<()> {
        self.backbone.validate("backbone")?;
        self.depth.validate("depth decoder")?;
        let bad = |r: String| Err(Error::config(OP, r));
        if self.num_codebooks < MIN_CODEBOOKS {
            return bad(format!(
                "num_codebooks {} (at least {MIN_CODEBOOKS}: codebook 0 and one depth level)",
                self.num_codebooks
            ));
        }
        // Depth positions 0..num_codebooks-1: the backbone hidden, then c0..c(n-2).
        if self.depth.max_position_embeddings < self.num_codebooks {
            return bad(format!(
                "depth decoder max_position_embeddings {} < num_codebooks {}",
                self.depth.max_position_embeddings, self.num_codebooks
            ));
        }
        if self.backbone.max_position_embeddings < 2 {
            return bad("backbone max_position_embeddings must be at least 2".into());
        }
        if self.audio_vocab_size == 0 || self.text_vocab_size == 0 {
            return bad("audio_vocab_size and text_vocab_size must be positive".into());
        }
        let ids = &self.ids;
        for (name, id) in [
            ("codebook_pad_token_id", ids.codebook_pad),
            ("codebook_eos_token_id", ids.codebook_eos),
        ] {
            if id as usize >= self.audio_vocab_size {
                return bad(format!(
                    "{name} {id} is outside the audio vocabulary of {}",
                    self.audio_vocab_size
                ));
            }
        }
        for (name, id) in [
            ("bos_token_id", ids.bos),
            ("text EOS", ids.text_eos),
            ("audio_token_id", ids.audio_token),
            ("audio_eos_token_id", ids.audio_eos),
            ("pad_token_id", ids.pad),
        ] {
            if id as usize >= self.text_vocab_size {
                return bad(format!(
                    "{name} {id} is outside the text vocabulary of {}",
                    self.text_vocab_size
                ));
            }
        }
        if ids.bos == ids.text_eos {
            return bad(format!("bos and text EOS share the id {}", ids.bos));
        }
        Ok(())
    }
}

/// transformers' `CsmConfig`: the backbone at the top, the depth decoder nested.
fn from_transformers(top: &Fields) -> Result<CsmConfig> {
    if let Some(t) = top.opt_str("model_type")? {
        if t != "csm" {
            return Err(top.malformed(format!("model_type is `{t}`, expected `csm`")));
        }
    }
    let depth_fields = top.object("depth_decoder_config")?;
    let num_codebooks = top.usize("num_codebooks")?;
    let audio_vocab_size = top.usize("vocab_size")?;
    let backbone = llama_fields(top)?;
    let depth = llama_fields(&depth_fields)?;
    // The depth decoder repeats what it shares with the backbone: they must agree.
    for (field, expected) in [
        ("num_codebooks", num_codebooks),
        ("vocab_size", audio_vocab_size),
        ("backbone_hidden_size", backbone.hidden_size),
    ] {
        if let Some(found) = depth_fields.opt_usize(field)? {
            if found != expected {
                return Err(depth_fields.malformed(format!(
                    "{field} {found} differs from the backbone's {expected}"
                )));
            }
        }
    }
    let default = CsmConfig::csm_1b().ids;
    let id =
        |name: &str, default: u32| -> Result<u32> { Ok(top.opt_u32(name)?.unwrap_or(default)) };
    let text_eos = match top.opt_u32("text_eos_token_id")? {
        Some(v) => v,
        None => top.opt_u32("eos_token_id")?.unwrap_or(default.text_eos),
    };
    Ok(CsmConfig {
        backbone,
        depth,
        num_codebooks,
        audio_vocab_size,
        text_vocab_size: top.usize("text_vocab_size")?,
        ids: SpecialIds {
            bos: id("bos_token_id", default.bos)?,
            text_eos,
            audio_token: id("audio_token_id", default.audio_token)?,
            audio_eos: id("audio_eos_token_id", default.audio_eos)?,
            pad: id("pad_token_id", default.pad)?,
            codebook_pad: id("codebook_pad_token_id", default.codebook_pad)?,
            codebook_eos: id("codebook_eos_token_id", default.codebook_eos)?,
        },
    })
}

/// One decoder's fields (transformers' names; `num_key_value_heads` and `head_dim` default as
/// transformers does when absent or null).
fn llama_fields(f: &Fields) -> Result<LlamaConfig> {
    let hidden_size = f.usize("hidden_size")?;
    let num_attention_heads = f.usize("num_attention_heads")?;
    if num_attention_heads == 0 {
        return Err(f.malformed("num_attention_heads must be positive".into()));
    }
    if let Some(act) = f.opt_str("hidden_act")? {
        if act != "silu" {
            return Err(f.malformed(format!("hidden_act `{act}` is not supported (silu)")));
        }
    }
    for flag in ["attention_bias", "mlp_bias"] {
        if f.opt_bool(flag)? == Some(true) {
            return Err(f.malformed(format!(
                "{flag} = true is not supported (CSM has no biases)"
            )));
        }
    }
    let (rope_theta, rope_scaling) = rope_fields(f)?;
    Ok(LlamaConfig {
        hidden_size,
        intermediate_size: f.usize("intermediate_size")?,
        num_hidden_layers: f.usize("num_hidden_layers")?,
        num_attention_heads,
        num_key_value_heads: f
            .opt_usize("num_key_value_heads")?
            .unwrap_or(num_attention_heads),
        head_dim: f
            .opt_usize("head_dim")?
            .unwrap_or(hidden_size / num_attention_heads),
        rms_norm_eps: f.f32("rms_norm_eps")?,
        rope_theta,
        rope_scaling,
        max_position_embeddings: f.usize("max_position_embeddings")?,
    })
}

/// `rope_parameters` (transformers 5) or `rope_theta` + `rope_scaling` (4.x): theta and the
/// llama3 scaling; a missing theta is CSM's 500000 (transformers' `default_theta`).
fn rope_fields(f: &Fields) -> Result<(f32, Option<Llama3Scaling>)> {
    let (params, theta) = if f.has("rope_parameters") {
        let p = f.object("rope_parameters")?;
        let theta = p.opt_f32("rope_theta")?;
        (Some(p), theta)
    } else if f.has("rope_scaling") {
        (f.opt_object("rope_scaling")?, None)
    } else {
        (None, None)
    };
    let theta = match theta {
        Some(t) => t,
        None => f.opt_f32("rope_theta")?.unwrap_or(CSM_ROPE_THETA),
    };
    let Some(p) = params else {
        return Ok((theta, None));
    };
    let kind = match p.opt_str("rope_type")? {
        Some(t) => t,
        None => p.opt_str("type")?.unwrap_or("default"),
    };
    match kind {
        "default" => Ok((theta, None)),
        "llama3" => Ok((
            theta,
            Some(Llama3Scaling {
                factor: p.f32("factor")?,
                low_freq_factor: p.f32("low_freq_factor")?,
                high_freq_factor: p.f32("high_freq_factor")?,
                original_max_position_embeddings: p.f32("original_max_position_embeddings")?,
            }),
        )),
        other => Err(p.malformed(format!(
            "rope_type `{other}` is not supported (default, llama3)"
        ))),
    }
}

/// Sesame's `ModelArgs`: two flavors and the vocabularies; the ids are Llama 3's.
fn from_sesame(f: &Fields) -> Result<CsmConfig> {
    let num_codebooks = f.usize("audio_num_codebooks")?;
    let flavor = |field: &str| -> Result<LlamaConfig> {
        match f.str(field)? {
            "llama-1B" => Ok(LlamaConfig::llama_1b()),
            "llama-100M" => Ok(LlamaConfig::llama_100m(num_codebooks)),
            other => Err(f.malformed(format!(
                "{field} `{other}` is not a known flavor (llama-1B, llama-100M)"
            ))),
        }
    };
    Ok(CsmConfig {
        backbone: flavor("backbone_flavor")?,
        depth: flavor("decoder_flavor")?,
        num_codebooks,
        audio_vocab_size: f.usize("audio_vocab_size")?,
        text_vocab_size: f.usize("text_vocab_size")?,
        ids: CsmConfig::csm_1b().ids,
    })
}
