//! The device buffers of the last launched frame, for tests and diagnostics.

use chorus_core::{LmOps, Result};

use super::SemanticStage;
use crate::config::AUDIO_LOGITS;
use crate::song::{SongId, LEVELS};

/// Device buffers of the last launched frame (downloading waits for it).
pub struct FrameTrace {
    /// Songs of the frame in row order: song `i` owns rows `2i` (cond) and `2i + 1`.
    pub songs: Vec<SongId>,
    /// `[rows, hidden]`: the hidden the frame's logits came from.
    pub h: Vec<f32>,
    /// `[rows, 16385]`.
    pub logits: Vec<f32>,
    /// 7 × `[rows, hidden]`: depth positions 1..7.
    pub depth_out: Vec<Vec<f32>>,
    /// 7 × `[rows, audio_vocab]`.
    pub head_logits: Vec<Vec<f32>>,
    /// `[rows, hidden]`.
    pub feedback: Vec<f32>,
    /// `[songs, 8]`: the frame's codes, drawn or forced (loop frame 0's included).
    pub codes: Vec<i32>,
}

impl<B: LmOps> SemanticStage<B> {
    /// Downloads the last launched frame's buffers (synchronises; for tests and diagnostics).
    pub fn trace(&self) -> Result<FrameTrace> {
        let be = &self.be;
        let (songs, bucket, half) = &self.last;
        let rows = 2 * songs.len();
        let h = self.lm.hidden_size;
        let cut = |buf: &B::Buf, width: usize| -> Result<Vec<f32>> {
            let mut v = be.download(buf)?;
            v.truncate(rows * width);
            Ok(v)
        };
        let vocab = self.depth.audio_vocab_size;
        let mut codes =
            be.download_ints(&self.pipe.buckets[*bucket].halves[*half].inputs.codes.dev)?;
        codes.truncate(songs.len() * LEVELS);
        Ok(FrameTrace {
            songs: songs.clone(),
            h: cut(&self.bufs.h, h)?,
            logits: cut(&self.bufs.logits, AUDIO_LOGITS)?,
            depth_out: self.bufs.depth_out[1..]
                .iter()
                .map(|b| cut(b, h))
                .collect::<Result<_>>()?,
            head_logits: self
                .bufs
                .head_logits
                .iter()
                .map(|b| cut(b, vocab))
                .collect::<Result<_>>()?,
            feedback: cut(&self.bufs.feedback, h)?,
            codes,
        })
    }
}
