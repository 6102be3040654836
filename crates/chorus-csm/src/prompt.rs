//! The backbone's prompt as frames (`CSM.md` §3.2): each context segment gives its text frames
//! (`BOS, "[spk]text", EOS`), then its `T` audio frames, then one EOS frame (every code
//! `codebook_eos`, i.e. all 0); the utterance to generate gives only its text frames, so the last
//! prompt frame is text EOS. Positions run `0..P` over the prompt and go on by one per frame.
//!
//! Everything is checked here, at the edge: frame widths, codes, text ids, and that the prompt
//! plus the frames to generate fit the backbone's positions (§3.4).

use chorus_core::{Error, Result};

use crate::config::CsmConfig;
use crate::tokenizer::CsmTokenizer;

const OP: &str = "csm prompt";

/// One backbone input position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptFrame {
    /// One text token: its row of the text table.
    Text(u32),
    /// One audio frame of `num_codebooks` codes: the sum of their rows of the audio table.
    Audio(Vec<u32>),
}

/// A turn of the conversation: a speaker, the text, and (for context turns) the Mimi codes of
/// what was said, `[T][num_codebooks]`, already encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub speaker: u32,
    pub text: String,
    pub audio: Option<Vec<Vec<u32>>>,
}

/// A context turn given as ready token ids (the whole text segment, BOS and EOS included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdSegment {
    pub text_ids: Vec<u32>,
    pub audio: Option<Vec<Vec<u32>>>,
}

/// What a prompt must fit: the model's shapes and the frames that will be generated after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptLimits {
    /// The backbone's positions (2048).
    pub max_positions: usize,
    /// Frames that may be generated after the prompt (the length cap).
    pub max_frames: usize,
    pub num_codebooks: usize,
    /// Audio codes are below this (the audio vocabulary and Mimi's codebook).
    pub code_limit: usize,
    pub text_vocab: usize,
    /// The code of every column of the EOS frame.
    pub codebook_eos: u32,
}

impl PromptLimits {
    /// The limits of `config` with up to `max_frames` generated frames.
    pub fn new(config: &CsmConfig, max_frames: usize) -> Self {
        Self {
            max_positions: config.backbone.max_position_embeddings,
            max_frames,
            num_codebooks: config.num_codebooks,
            code_limit: config.code_limit(),
            text_vocab: config.text_vocab_size,
            codebook_eos: config.ids.codebook_eos,
        }
    }
}

/// The prompt of `text` said by `speaker` after the `context` turns (each with its audio).
pub fn build_prompt(
    tok: &CsmTokenizer,
    context: &[Segment],
    speaker: u32,
    text: &str,
    limits: &PromptLimits,
) -> Result<Vec<PromptFrame>> {
    let context: Vec<IdSegment> = context
        .iter()
        .map(|s| {
            Ok(IdSegment {
                text_ids: tok.encode_segment(s.speaker, &s.text)?,
                audio: s.audio.clone(),
            })
        })
        .collect::<Result<_>>()?;
    let target = tok.encode_segment(speaker, text)?;
    build_prompt_ids(&context, &target, limits)
}

/// [`build_prompt`] from ready ids: `target` is the utterance's whole text segment.
pub fn build_prompt_ids(
    context: &[IdSegment],
    target: &[u32],
    limits: &PromptLimits,
) -> Result<Vec<PromptFrame>> {
    if limits.max_frames == 0 {
        return Err(Error::input(
            OP,
            "max_frames is 0: nothing would be generated",
        ));
    }
    if target.is_empty() {
        return Err(Error::input(
            OP,
            "the utterance to generate has no text tokens",
        ));
    }
    let mut frames = Vec::new();
    for (s, seg) in context.iter().enumerate() {
        let what = format!("context segment {s}");
        let audio = seg.audio.as_ref().ok_or_else(|| {
            Error::input(
                OP,
                format!("{what} has no audio: every context turn needs its Mimi codes (only the utterance to generate is text alone)"),
            )
        })?;
        push_text(&mut frames, &seg.text_ids, &what, limits)?;
        for (f, codes) in audio.iter().enumerate() {
            check_codes(codes, &what, f, limits)?;
            frames.push(PromptFrame::Audio(codes.clone()));
        }
        frames.push(eos_frame(limits));
    }
    push_text(&mut frames, target, "the utterance", limits)?;
    let total = frames.len() + limits.max_frames;
    if total > limits.max_positions {
        return Err(Error::input(
            OP,
            format!(
                "the prompt has {} frames and up to {} frames may be generated: {total} positions \
                 exceed the backbone's {} (shorten the context or the length cap)",
                frames.len(),
                limits.max_frames,
                limits.max_positions
            ),
        ));
    }
    Ok(frames)
}

/// The all-`codebook_eos` frame that closes a context turn's audio.
pub fn eos_frame(limits: &PromptLimits) -> PromptFrame {
    PromptFrame::Audio(vec![limits.codebook_eos; limits.num_codebooks])
}

fn push_text(
    frames: &mut Vec<PromptFrame>,
    ids: &[u32],
    what: &str,
    limits: &PromptLimits,
) -> Result<()> {
    if let Some((i, id)) = ids
        .iter()
        .enumerate()
        .find(|(_, &id)| id as usize >= limits.text_vocab)
    {
        return Err(Error::input(
            OP,
            format!(
                "{what}: text id {id} at position {i} is outside the text vocabulary of {}",
                limits.text_vocab
            ),
        ));
    }
    frames.extend(ids.iter().map(|&id| PromptFrame::Text(id)));
    Ok(())
}

fn check_codes(codes: &[u32], what: &str, frame: usize, limits: &PromptLimits) -> Result<()> {
    if codes.len() != limits.num_codebooks {
        return Err(Error::input(
            OP,
            format!(
                "{what}, audio frame {frame}: {} codes, expected {} (one per codebook)",
                codes.len(),
                limits.num_codebooks
            ),
        ));
    }
    if let Some((k, c)) = codes
        .iter()
        .enumerate()
        .find(|(_, &c)| c as usize >= limits.code_limit)
    {
        return Err(Error::input(
            OP,
            format!(
                "{what}, audio frame {frame}, codebook {k}: code {c} is outside [0, {})",
                limits.code_limit
            ),
        ));
    }
    Ok(())
}
