//! The configuration of Kyutai's STT LM (`KYUTAI_STT.md` §1): one decoder over the sum of a text
//! embedding and 32 audio embeddings, sliding-window attention, a text head and optional VAD
//! heads; parsed from transformers' `KyutaiSpeechToTextConfig` json or from Kyutai's moshi
//! `config.json`, validated once.

use chorus_core::json::{Fields, JsonValue};
use chorus_core::{Error, Result, FRAME_SAMPLES, SAMPLE_RATE};

/// Frames per second of the LM (Mimi's 12.5 Hz).
pub const FRAME_RATE: f32 = SAMPLE_RATE as f32 / FRAME_SAMPLES as f32;
/// Codes of one Mimi codebook; the audio tables have one more row, the initial token.
pub const MIMI_CARD: usize = 2048;
/// Codebooks the STT models consume (Mimi's 32 quantizers).
pub const STT_CODEBOOKS: usize = 32;
/// RoPE period of both models (`max_period`).
pub const STT_ROPE_THETA: f32 = 100_000.0;
/// RMSNorm epsilon of both models (`rms_norm_f32`).
pub const STT_RMS_EPS: f32 = 1e-8;
/// Classes of each VAD head of stt-1b-en_fr.
pub const VAD_CLASSES: usize = 6;
/// Text ids shared by both models: PAD (nothing new this frame) and EPAD (a word starts).
pub const TEXT_PAD: u32 = 3;
pub const TEXT_EPAD: u32 = 0;

const OP: &str = "SttConfig";

/// The special ids of the text and audio columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SttIds {
    /// The text input of position 0 (the extra row of the text table: 4000 / 8000).
    pub initial_text: u32,
    /// "Nothing new this frame" (3).
    pub pad: u32,
    /// End of padding: the next pieces form a word (0).
    pub epad: u32,
    /// The audio input of position 0 in every codebook (2048, the extra row of each table).
    pub initial_audio: u32,
}

/// The whole model (HF field names where transformers has one).
#[derive(Clone, Debug, PartialEq)]
pub struct SttConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    /// Width of the gated FFN's hidden (`ffn_dim / 2`: 5632).
    pub ffn_hidden: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    /// Keys per query, its own included (Kyutai's `context`: 375 / 750).
    pub sliding_window: usize,
    /// Text pieces the head scores (4000 / 8000); the input table has one more row.
    pub text_vocab: usize,
    pub num_codebooks: usize,
    /// Rows of each audio table (`codebook_vocab_size`: 2049).
    pub codebook_vocab: usize,
    /// VAD heads (4 for stt-1b-en_fr, else 0), each `[VAD_CLASSES, hidden]`.
    pub extra_heads: usize,
    pub extra_head_dim: usize,
    /// Frames the text lags the audio (`asr_delay_in_tokens`: 32 / 6).
    pub text_delay_frames: usize,
    /// Silence the model expects before the speech (1 s for the 2.6B, 0 for the 1B).
    pub silence_prefix_seconds: f32,
    pub ids: SttIds,
}

impl SttConfig {
    /// kyutai/stt-2.6b-en.
    pub fn stt_2b6_en() -> Self {
        Self {
            hidden_size: 2048,
            num_hidden_layers: 48,
            num_attention_heads: 32,
            num_key_value_heads: 32,
            head_dim: 64,
            ffn_hidden: 5632,
            rms_norm_eps: STT_RMS_EPS,
            rope_theta: STT_ROPE_THETA,
            sliding_window: 375,
            text_vocab: 4000,
            num_codebooks: STT_CODEBOOKS,
            codebook_vocab: MIMI_CARD + 1,
            extra_heads: 0,
            extra_head_dim: VAD_CLASSES,
            // The server's `asr_delay_in_tokens` (2.5 s is 31.25 frames).
            text_delay_frames: 32,
            silence_prefix_seconds: 1.0,
            ids: SttIds {
                initial_text: 4000,
                pad: TEXT_PAD,
                epad: TEXT_EPAD,
                initial_audio: MIMI_CARD as u32,
            },
        }
    }

    /// kyutai/stt-1b-en_fr (with its four VAD heads).
    pub fn stt_1b_en_fr() -> Self {
        Self {
            num_hidden_layers: 16,
            num_attention_heads: 16,
            num_key_value_heads: 16,
            head_dim: 128,
            sliding_window: 750,
            text_vocab: 8000,
            extra_heads: 4,
            text_delay_frames: 6,
            silence_prefix_seconds: 0.0,
            ids: SttIds {
                initial_text: 8000,
                ..Self::stt_2b6_en().ids
            },
            ..Self::stt_2b6_en()
        }
    }

    /// The smallest configuration that keeps every code path (`KYUTAI_STT.md` §7.1): 32
    /// codebooks of 2049 rows, 64 wide (4 heads of 16), 2 layers, 40 text pieces, a window of 6
    /// so the ring wraps within a few steps, and the 1B's four VAD heads.
    pub fn random_small() -> Self {
        Self {
            hidden_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 4,
            head_dim: 16,
            ffn_hidden: 176,
            sliding_window: 6,
            text_vocab: 40,
            ids: SttIds {
                initial_text: 40,
                ..Self::stt_1b_en_fr().ids
            },
            ..Self::stt_1b_en_fr()
        }
    }

    pub fn q_width(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    pub fn kv_width(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// Width of the fused q/k/v projection (Kyutai's `in_proj_weight` rows).
    pub fn qkv_width(&self) -> usize {
        self.q_width() + 2 * self.kv_width()
    }

    /// Rows of the text input table (the pieces and the initial token).
    pub fn text_rows(&self) -> usize {
        self.text_vocab + 1
    }

    /// Rows of all audio tables together: codebook `k`'s code `c` is row `k * codebook_vocab + c`.
    pub fn audio_rows(&self) -> usize {
        self.num_codebooks * self.codebook_vocab
    }

    /// Columns of one position's input: the text token, then one code per codebook.
    pub fn input_width(&self) -> usize {
        1 + self.num_codebooks
    }

    /// Refuses an inconsistent configuration, once, so the step never checks it.
    pub fn validate(&self) -> Result<()> {
        let bad = |r: String| Err(Error::config(OP, r));
        let sizes = [
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("ffn_hidden", self.ffn_hidden),
            ("sliding_window", self.sliding_window),
            ("text_vocab", self.text_vocab),
            ("num_codebooks", self.num_codebooks),
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
        if self.codebook_vocab <= self.ids.initial_audio as usize {
            return bad(format!(
                "codebook_vocab_size {} has no row for the initial audio token {}",
                self.codebook_vocab, self.ids.initial_audio
            ));
        }
        if self.ids.initial_text as usize != self.text_vocab {
            return bad(format!(
                "the initial text token {} must be the extra row {} of the text table (transformers' \
                 default bos_token_id 48000 is not Kyutai's; set it to {})",
                self.ids.initial_text, self.text_vocab, self.text_vocab
            ));
        }
        for (name, id) in [("pad", self.ids.pad), ("epad", self.ids.epad)] {
            if id as usize >= self.text_vocab {
                return bad(format!(
                    "text {name} id {id} is outside the {} pieces",
                    self.text_vocab
                ));
            }
        }
        if self.extra_heads > 0 && self.extra_head_dim == 0 {
            return bad("extra heads need a positive extra_heads_dim".into());
        }
        if !(self.silence_prefix_seconds.is_finite() && self.silence_prefix_seconds >= 0.0) {
            return bad(format!(
                "audio_silence_prefix_seconds {} must be finite and >= 0",
                self.silence_prefix_seconds
            ));
        }
        Ok(())
    }

    /// Parses transformers' `KyutaiSpeechToTextConfig` json (`model_type`
    /// `kyutai_speech_to_text`) or Kyutai's moshi `config.json` (`dim`, `num_heads`, `context`,
    /// ...); `what` (a path) names the file in errors. Validates the result.
    pub fn from_json(text: &str, what: &str) -> Result<Self> {
        let value: JsonValue = serde_json::from_str(text).map_err(|e| Error::Format {
            op: OP,
            path: what.into(),
            reason: format!("not valid JSON: {e}"),
        })?;
        let top = Fields::root(OP, &value, what)?;
        let c = if top.has("codebook_vocab_size") || top.has("sliding_window") {
            from_transformers(&top)?
        } else if top.has("dim") && top.has("context") {
            from_kyutai(&top)?
        } else {
            return Err(top.malformed(
                "neither a transformers KyutaiSpeechToTextConfig (no `codebook_vocab_size`) nor a \
                 Kyutai moshi config (no `dim` and `context`)"
                    .into(),
            ));
        };
        c.validate()?;
        Ok(c)
    }
}

/// The delay and silence prefix of a model whose text vocabulary is `text_vocab` (the
/// transformers config has neither; they live in its processor): the 1B's or the 2.6B's.
fn stream_defaults(text_vocab: usize) -> (usize, f32) {
    let base = if text_vocab == SttConfig::stt_2b6_en().text_vocab {
        SttConfig::stt_2b6_en()
    } else {
        SttConfig::stt_1b_en_fr()
    };
    (base.text_delay_frames, base.silence_prefix_seconds)
}

/// transformers' `KyutaiSpeechToTextConfig`.
fn from_transformers(f: &Fields) -> Result<SttConfig> {
    if let Some(t) = f.opt_str("model_type")? {
        if t != "kyutai_speech_to_text" {
            return Err(f.malformed(format!(
                "model_type is `{t}`, expected `kyutai_speech_to_text`"
            )));
        }
    }
    if let Some(act) = f.opt_str("hidden_act")? {
        if act != "silu" {
            return Err(f.malformed(format!("hidden_act `{act}` is not supported (silu)")));
        }
    }
    let hidden_size = f.usize("hidden_size")?;
    let heads = f.usize("num_attention_heads")?;
    if heads == 0 {
        return Err(f.malformed("num_attention_heads must be positive".into()));
    }
    let vocab_size = f.usize("vocab_size")?;
    if vocab_size < 2 {
        return Err(f.malformed(format!("vocab_size {vocab_size} leaves no text piece")));
    }
    let text_vocab = vocab_size - 1;
    let ffn_dim = f.usize("ffn_dim")?;
    if !ffn_dim.is_multiple_of(2) {
        return Err(f.malformed(format!("ffn_dim {ffn_dim} must be even (two halves)")));
    }
    let theta = match f.opt_object("rope_parameters")? {
        Some(p) => {
            let kind = p.opt_str("rope_type")?.unwrap_or("default");
            if kind != "default" {
                return Err(p.malformed(format!("rope_type `{kind}` is not supported (default)")));
            }
            p.opt_f32("rope_theta")?
        }
        None => f.opt_f32("rope_theta")?,
    };
    // transformers 5.x falls back to 10 000 when no theta is given; Kyutai trains with 100 000.
    let rope_theta = theta.unwrap_or(STT_ROPE_THETA);
    let num_codebooks = f.usize("num_codebooks")?;
    let codebook_vocab = f.usize("codebook_vocab_size")?;
    let initial_audio = f.opt_u32("audio_bos_token_id")?.unwrap_or(MIMI_CARD as u32);
    let pad_row = vocab_size + num_codebooks * codebook_vocab;
    if let Some(p) = f.opt_usize("audio_pad_token_id")? {
        if p != pad_row {
            return Err(f.malformed(format!(
                "audio_pad_token_id {p} is not the zero row {pad_row} (vocab_size + \
                 num_codebooks * codebook_vocab_size)"
            )));
        }
    }
    let (text_delay_frames, silence_prefix_seconds) = stream_defaults(text_vocab);
    Ok(SttConfig {
        hidden_size,
        num_hidden_layers: f.usize("num_hidden_layers")?,
        num_attention_heads: heads,
        num_key_value_heads: f.opt_usize("num_key_value_heads")?.unwrap_or(heads),
        head_dim: f.opt_usize("head_dim")?.unwrap_or(hidden_size / heads),
        ffn_hidden: ffn_dim / 2,
        rms_norm_eps: f.opt_f32("rms_norm_eps")?.unwrap_or(STT_RMS_EPS),
        rope_theta,
        sliding_window: f.usize("sliding_window")?,
        text_vocab,
        num_codebooks,
        codebook_vocab,
        // transformers has no VAD heads (`KYUTAI_STT.md` §2.2).
        extra_heads: 0,
        extra_head_dim: VAD_CLASSES,
        text_delay_frames,
        silence_prefix_seconds,
        ids: SttIds {
            // transformers' default 48000 falls inside an audio table: the initial row is Kyutai's.
            initial_text: f
                .opt_u32("bos_token_id")?
                .filter(|&b| b as usize == text_vocab)
                .unwrap_or(text_vocab as u32),
            pad: f.opt_u32("pad_token_id")?.unwrap_or(TEXT_PAD),
            epad: TEXT_EPAD,
            initial_audio,
        },
    })
}

/// Kyutai's moshi `config.json` (`lm.py`'s `LMModel` arguments plus `stt_config`).
fn from_kyutai(f: &Fields) -> Result<SttConfig> {
    let dim = f.usize("dim")?;
    let heads = f.usize("num_heads")?;
    if heads == 0 {
        return Err(f.malformed("num_heads must be positive".into()));
    }
    if let Some(d) = f.opt_usize("dep_q")? {
        if d != 0 {
            return Err(f.malformed(format!(
                "dep_q {d}: a depformer model is not an STT model (dep_q must be 0)"
            )));
        }
    }
    if let Some(g) = f.opt_str("gating")? {
        if g != "silu" {
            return Err(f.malformed(format!("gating `{g}` is not supported (silu)")));
        }
    }
    if let Some(n) = f.opt_str("norm")? {
        if n != "rms_norm_f32" && n != "rms_norm" {
            return Err(f.malformed(format!("norm `{n}` is not supported (rms_norm_f32)")));
        }
    }
    if let Some(p) = f.opt_str("positional_embedding")? {
        if p != "rope" {
            return Err(f.malformed(format!(
                "positional_embedding `{p}` is not supported (rope)"
            )));
        }
    }
    let kv_repeat = f.opt_usize("kv_repeat")?.unwrap_or(1);
    if kv_repeat == 0 || !heads.is_multiple_of(kv_repeat) {
        return Err(f.malformed(format!(
            "kv_repeat {kv_repeat} does not divide num_heads {heads}"
        )));
    }
    // Gated FFN width (moshi `gating.py`): `dim_feedforward = int(hidden_scale * dim)`, hidden
    // `2 * dim_feedforward // 3`; an explicit `dim_feedforward` takes the place of the scale.
    let dim_feedforward = match f.opt_usize("dim_feedforward")? {
        Some(v) => v,
        None => (f.f32("hidden_scale")? as f64 * dim as f64) as usize,
    };
    let n_q = f.usize("n_q")?;
    let card = f.usize("card")?;
    let text_card = f.usize("text_card")?;
    if let Some(delays) = f.opt_array_usize("delays")? {
        if delays.iter().any(|&d| d != 0) {
            return Err(f.malformed(format!(
                "delays {delays:?}: an STT model has no per-codebook delays (all zero)"
            )));
        }
    }
    let (delay_default, prefix_default) = stream_defaults(text_card);
    let (delay, prefix) = match f.opt_object("stt_config")? {
        Some(s) => {
            let delay = match s.opt_usize("asr_delay_in_tokens")? {
                Some(d) => d,
                // The server's values for the two released delays; otherwise stt-rs's floor.
                None => match s.opt_f32("audio_delay_seconds")? {
                    Some(2.5) => 32,
                    Some(0.5) => 6,
                    Some(secs) => (secs * FRAME_RATE).floor() as usize,
                    None => delay_default,
                },
            };
            let prefix = s
                .opt_f32("audio_silence_prefix_seconds")?
                .unwrap_or(prefix_default);
            (delay, prefix)
        }
        None => (delay_default, prefix_default),
    };
    let extra_heads = f.opt_usize("extra_heads_num_heads")?.unwrap_or(0);
    Ok(SttConfig {
        hidden_size: dim,
        num_hidden_layers: f.usize("num_layers")?,
        num_attention_heads: heads,
        num_key_value_heads: heads / kv_repeat,
        head_dim: dim / heads,
        ffn_hidden: 2 * dim_feedforward / 3,
        rms_norm_eps: STT_RMS_EPS,
        rope_theta: f.opt_f32("max_period")?.unwrap_or(STT_ROPE_THETA),
        sliding_window: f.usize("context")?,
        text_vocab: text_card,
        num_codebooks: n_q,
        codebook_vocab: card + 1,
        extra_heads,
        extra_head_dim: f.opt_usize("extra_heads_dim")?.unwrap_or(VAD_CLASSES),
        text_delay_frames: delay,
        silence_prefix_seconds: prefix,
        ids: SttIds {
            initial_text: text_card as u32,
            pad: f.opt_u32("existing_text_padding_id")?.unwrap_or(TEXT_PAD),
            epad: f
                .opt_u32("existing_text_end_padding_id")?
                .unwrap_or(TEXT_EPAD),
            initial_audio: card as u32,
        },
    })
}
