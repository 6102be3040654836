//! A parsed `start` to an utterance the stage accepts: the text tokenised (or ready ids), context
//! turns with their codes, speaker ids, draws and lengths checked against the model and the
//! stage before anything reaches the owner thread.

use chorus_csm::prompt::{build_prompt_ids, IdSegment, PromptLimits};
use chorus_csm::{CsmTokenizer, DrawSettings, UtteranceRequest};

use super::engine::{TtsConfig, TtsInfo};
use super::start::{TtsStart, TtsText};
use super::{TtsError, TtsErrorCode};

/// What the owner thread admits.
#[derive(Clone, Debug)]
pub struct UtteranceSpec {
    pub request: UtteranceRequest,
}

impl UtteranceSpec {
    /// Frames of the backbone prompt.
    pub fn prompt_frames(&self) -> usize {
        self.request.prompt.len()
    }
}

/// Builds the stage request of `req`.
pub(crate) fn build_utterance(
    req: &TtsStart,
    info: &TtsInfo,
    config: &TtsConfig,
    tokenizer: Option<&CsmTokenizer>,
) -> Result<UtteranceSpec, TtsError> {
    check_speaker(req.speaker, "`speaker`", config)?;
    for (i, turn) in req.context.iter().enumerate() {
        check_speaker(
            turn.speaker,
            &format!("context turn {i}: `speaker`"),
            config,
        )?;
    }
    let tok = || {
        tokenizer.ok_or_else(|| {
            TtsError::new(
                TtsErrorCode::NoTokenizer,
                "this server has no tokenizer for text (the model folder has no tokenizer.json; \
                 start it with --tts-tokenizer tokenizer.json): send `prompt_ids` and no context",
            )
        })
    };
    let target = match &req.text {
        TtsText::Text(text) => {
            check_text(text, "`text`", config)?;
            tok()?
                .encode_segment(req.speaker, text)
                .map_err(|e| TtsError::bad_request(format!("`text`: {e}")))?
        }
        TtsText::Ids(ids) if ids.is_empty() => {
            return Err(TtsError::bad_request(
                "`prompt_ids` is empty: nothing to say",
            ))
        }
        TtsText::Ids(ids) => ids.clone(),
    };
    let context = req
        .context
        .iter()
        .enumerate()
        .map(|(i, turn)| {
            let what = format!("context turn {i}: `text`");
            check_text(&turn.text, &what, config)?;
            let text_ids = tok()?
                .encode_segment(turn.speaker, &turn.text)
                .map_err(|e| TtsError::bad_request(format!("{what}: {e}")))?;
            Ok(IdSegment {
                text_ids,
                audio: Some(turn.codes.clone()),
            })
        })
        .collect::<Result<Vec<_>, TtsError>>()?;
    // The prompt with one frame to generate: the length cap is resolved below, against it.
    let limits = PromptLimits::new(&info.config, 1);
    let prompt = build_prompt_ids(&context, &target, &limits)
        .map_err(|e| TtsError::bad_request(format!("prompt: {e}")))?;
    let p = prompt.len();
    if p + 1 > info.max_context.min(info.max_prompt + 1) {
        return Err(TtsError::bad_request(format!(
            "the text is too long: its prompt has {p} frames (context turns included), and this \
             server takes prompts of at most {} frames (--tts-context {})",
            info.max_prompt.min(info.max_context - 1),
            info.max_context
        )));
    }
    let room = info.max_context - p;
    let max_frames = match req.max_frames {
        None => config.default_max_frames.min(room),
        Some(n) if n > room => {
            return Err(TtsError::bad_request(format!(
                "`max_frames` is {n}: the prompt's {p} frames leave room for at most {room} in \
                 this server's context of {} positions (--tts-context)",
                info.max_context
            )))
        }
        Some(n) => n,
    };
    let request = UtteranceRequest {
        prompt,
        max_frames,
        sampling: req.sampling,
        draws: draws(req, info),
        forced: None,
    };
    request
        .validate(&info.config)
        .map_err(|e| TtsError::bad_request(e.to_string()))?;
    Ok(UtteranceSpec { request })
}

/// The request's temperature and top-k, each defaulting to the server's (checked by
/// `UtteranceRequest::validate` below; the fields were checked on their own when parsed).
fn draws(req: &TtsStart, info: &TtsInfo) -> Option<DrawSettings> {
    (req.temperature.is_some() || req.top_k.is_some()).then(|| DrawSettings {
        temperature: req.temperature.unwrap_or(info.draws.temperature),
        top_k: req.top_k.unwrap_or(info.draws.top_k),
    })
}

fn check_speaker(speaker: u32, what: &str, config: &TtsConfig) -> Result<(), TtsError> {
    if speaker as usize >= config.speakers {
        return Err(TtsError::bad_request(format!(
            "{what}: unknown speaker {speaker}; this server has speakers 0..={} (--tts-speakers)",
            config.speakers - 1
        )));
    }
    Ok(())
}

fn check_text(text: &str, what: &str, config: &TtsConfig) -> Result<(), TtsError> {
    if text.trim().is_empty() {
        return Err(TtsError::bad_request(format!(
            "{what} is empty: nothing to say"
        )));
    }
    if text.len() > config.max_text_bytes {
        return Err(TtsError::bad_request(format!(
            "{what} is too long: {} bytes, this server takes at most {} (--tts-max-text)",
            text.len(),
            config.max_text_bytes
        )));
    }
    Ok(())
}
