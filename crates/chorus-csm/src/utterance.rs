//! What a user asks for (an utterance request) and what the stage hands back (events).

use chorus_core::{Error, Result};
use chorus_lm::Sampling;

use crate::config::CsmConfig;
use crate::frame::DrawSettings;
use crate::prompt::PromptFrame;

/// A stage-local utterance id.
pub type UtteranceId = u64;

/// One utterance to generate.
#[derive(Clone, Debug)]
pub struct UtteranceRequest {
    /// The backbone's prompt (`build_prompt`): context turns, then the text to say.
    pub prompt: Vec<PromptFrame>,
    /// Frames to emit at most (the length cap; 12.5 frames per second of audio).
    pub max_frames: usize,
    pub sampling: Sampling,
    /// Temperature and top-k of this utterance's draws; `None`: the stage's
    /// ([`crate::TtsOptions::draws`]).
    pub draws: Option<DrawSettings>,
    /// Teacher forcing: the codes of frames `0..len`, `[len][codebooks]`; the utterance ends when
    /// they run out.
    pub forced: Option<Vec<Vec<u32>>>,
}

/// Why an utterance ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// It drew a frame whose codes are all zero (the end rule of Sesame's generator,
    /// `CSM.md` §4.1 step 4): that frame is not emitted.
    EndFrame,
    /// It emitted `max_frames` frames.
    MaxFrames,
    /// Its forced codes ran out.
    ForcedDone,
}

/// What a step hands back.
#[derive(Debug)]
pub enum UtteranceEvent<'a> {
    /// Frame `index` of an utterance: its `codebooks` codes and, when the stage decodes, its
    /// 1,920 samples of 24 kHz audio.
    Frame {
        utterance: UtteranceId,
        index: usize,
        codes: &'a [u32],
        pcm: Option<&'a [f32]>,
    },
    Ended {
        utterance: UtteranceId,
        reason: EndReason,
        frames: usize,
    },
}

impl UtteranceRequest {
    /// Checks everything the step path relies on against `c`.
    pub fn validate(&self, c: &CsmConfig) -> Result<()> {
        const OP: &str = "UtteranceRequest::validate";
        if self.prompt.is_empty() {
            return Err(Error::input(OP, "the prompt is empty"));
        }
        if self.max_frames == 0 {
            return Err(Error::input(OP, "max_frames must be at least 1"));
        }
        if let Some(d) = &self.draws {
            d.validate(OP)?;
        }
        let (books, vocab) = (c.num_codebooks, c.audio_vocab_size);
        for (i, f) in self.prompt.iter().enumerate() {
            match f {
                PromptFrame::Text(t) if *t as usize >= c.text_vocab_size => {
                    return Err(Error::input(
                        OP,
                        format!(
                            "prompt frame {i}: text id {t} is outside the text vocabulary of {}",
                            c.text_vocab_size
                        ),
                    ))
                }
                PromptFrame::Audio(codes) => check_codes(
                    OP,
                    &format!("prompt frame {i}"),
                    codes,
                    books,
                    c.code_limit(),
                )?,
                PromptFrame::Text(_) => {}
            }
        }
        if let Some(forced) = &self.forced {
            for (f, codes) in forced.iter().enumerate() {
                check_codes(OP, &format!("forced frame {f}"), codes, books, vocab)?;
            }
        }
        Ok(())
    }
}

fn check_codes(
    op: &'static str,
    what: &str,
    codes: &[u32],
    books: usize,
    limit: usize,
) -> Result<()> {
    if codes.len() != books {
        return Err(Error::input(
            op,
            format!(
                "{what} has {} codes, the model {books} codebooks",
                codes.len()
            ),
        ));
    }
    if let Some((l, c)) = codes.iter().enumerate().find(|(_, &c)| c as usize >= limit) {
        return Err(Error::input(
            op,
            format!("{what}: code {c} of codebook {l} is not below {limit}"),
        ));
    }
    Ok(())
}
