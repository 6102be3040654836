//! What a user asks for (a song request) and what the stage hands back (events).

use chorus_core::{Error, Result};

use crate::config::{FRAME_RATE, MAX_AUDIO_FRAMES, MAX_SECONDS, MIN_SECONDS, SEMANTIC_VOCAB};
use crate::prompt::PromptIds;
pub use chorus_lm::Sampling;

/// Codes per frame: c0 and the 7 depth levels.
pub const LEVELS: usize = 8;
/// One song to generate.
#[derive(Clone, Debug)]
pub struct SongRequest {
    pub prompt: PromptIds,
    /// Frames to emit at most (`min(seconds * 25, 9000)`).
    pub max_frames: usize,
    pub sampling: Sampling,
    /// `false` masks END, for fixed-length runs.
    pub allow_end: bool,
    /// Teacher forcing: the codes of loop frames `0..len` (frame 0 is fed back, not emitted);
    /// the song ends when they run out.
    pub forced: Option<Vec<[u32; LEVELS]>>,
}

/// `min(int(seconds * 25), 9000)` after checking `1 <= seconds <= 360`.
pub fn frames_for_seconds(seconds: f64) -> Result<usize> {
    if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) {
        return Err(Error::input(
            "frames_for_seconds",
            format!("duration {seconds} s is outside {MIN_SECONDS}..={MAX_SECONDS} s"),
        ));
    }
    Ok(((seconds * FRAME_RATE) as usize).min(MAX_AUDIO_FRAMES))
}

impl SongRequest {
    /// Checks everything the step path relies on; `audio_vocab` bounds the depth codes.
    pub fn validate(&self, audio_vocab: usize) -> Result<()> {
        const OP: &str = "SongRequest::validate";
        if self.max_frames == 0 || self.max_frames > MAX_AUDIO_FRAMES {
            return Err(Error::input(
                OP,
                format!(
                    "max_frames {} is outside 1..={MAX_AUDIO_FRAMES}",
                    self.max_frames
                ),
            ));
        }
        if let Some(forced) = &self.forced {
            if forced.is_empty() || forced.len() > self.max_frames + 1 {
                return Err(Error::input(
                    OP,
                    format!(
                        "{} forced frames: need 1..={} (max_frames + 1)",
                        forced.len(),
                        self.max_frames + 1
                    ),
                ));
            }
            for (f, codes) in forced.iter().enumerate() {
                for (l, &c) in codes.iter().enumerate() {
                    let card = if l == 0 { SEMANTIC_VOCAB } else { audio_vocab };
                    if c as usize >= card {
                        return Err(Error::CodeOutOfRangeAt {
                            op: OP,
                            stream: 0,
                            frame: f,
                            codebook: l,
                            code: i64::from(c),
                            cardinality: card,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// Why a song ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The model drew END.
    End,
    /// `max_frames` frames were emitted.
    MaxFrames,
    /// The forced codes ran out.
    ForcedDone,
    /// The caller cancelled it.
    Cancelled,
}

/// A song's id, unique over the stage's life.
pub type SongId = u64;

/// What a step hands back, in song order.
#[derive(Debug)]
pub enum SongEvent<'a> {
    /// An emitted frame: its index among the song's frames, 8 codes, and `frame_hiddens`
    /// (`[8 * hidden]`: the LM hidden, then the depth outputs at positions 1..7).
    Frame {
        song: SongId,
        index: usize,
        codes: [u32; LEVELS],
        hidden: &'a [f32],
    },
    /// The song is over and its blocks are back in the pool. `frames` were emitted.
    Ended {
        song: SongId,
        reason: EndReason,
        frames: usize,
    },
}
