//! A parsed `start` to a song request the stage accepts: prompt ids (given or tokenised), checked
//! against the model's vocabulary and the stage's context before anything reaches the engine.

use chorus_music::prompt::{PromptIds, PromptTokenizer};
use chorus_music::SongRequest;

use super::engine::MusicInfo;
use super::error::{MusicError, MusicErrorCode};
use super::start::{PromptSource, StartRequest};

/// What the engine thread admits: the stage's request and whether the client wants hiddens.
#[derive(Clone, Debug)]
pub struct SongSpec {
    pub request: SongRequest,
    pub hiddens: bool,
}

impl SongSpec {
    /// Tokens per prompt row.
    pub fn prompt_tokens(&self) -> usize {
        self.request.prompt.len()
    }
}

/// Builds the stage request of `req`; `hiddens` is the endpoint's resolved choice.
pub(crate) fn build_song(
    req: &StartRequest,
    hiddens: bool,
    info: &MusicInfo,
    tokenizer: Option<&PromptTokenizer>,
) -> Result<SongSpec, MusicError> {
    let vocab = info.vocab_size;
    let prompt = match &req.prompt {
        PromptSource::Ids { cond, uncond: None } => PromptIds::from_cond(cond.clone(), vocab),
        PromptSource::Ids {
            cond,
            uncond: Some(uncond),
        } => PromptIds::from_pair(cond.clone(), uncond.clone(), vocab),
        PromptSource::Text { caption, lyrics } => {
            let Some(tok) = tokenizer else {
                return Err(MusicError::new(
                    MusicErrorCode::NoTokenizer,
                    "this server has no tokenizer for `caption` and `lyrics` \
                     (start it with --music-tokenizer tokenizer.json); send `prompt_ids` instead",
                ));
            };
            tok.encode(caption, lyrics, vocab)
        }
    }
    .map_err(|e| MusicError::bad_request(format!("prompt: {e}")))?;
    let p = prompt.len();
    if p > info.max_prompt {
        return Err(MusicError::bad_request(format!(
            "the prompt has {p} tokens; this server takes at most {}",
            info.max_prompt
        )));
    }
    let positions = p + req.frames + 1;
    if positions > info.max_context {
        return Err(MusicError::bad_request(format!(
            "the song needs {p} prompt tokens + {} frames + 1 = {positions} positions, more than \
             this server's context of {} (--music-context): ask for fewer `seconds` or set \
             `max_frames` to at most {}",
            req.frames,
            info.max_context,
            info.max_context.saturating_sub(p + 1)
        )));
    }
    Ok(SongSpec {
        request: SongRequest {
            prompt,
            max_frames: req.frames,
            sampling: req.sampling,
            allow_end: req.allow_end,
            forced: None,
        },
        hiddens,
    })
}
