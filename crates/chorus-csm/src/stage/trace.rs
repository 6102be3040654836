//! The last launched frame's intermediates, read back for teacher-forced comparisons.

use chorus_core::{LmOps, Result};

use super::TtsStage;
use crate::utterance::UtteranceId;

/// One frame's buffers, rows in the order of `utterances`.
#[derive(Clone, Debug)]
pub struct FrameTrace {
    pub utterances: Vec<UtteranceId>,
    /// `[n, backbone_hidden]`: the backbone hidden the frame started from.
    pub h: Vec<f32>,
    /// `[n, audio_vocab]`: codebook 0's logits.
    pub logits: Vec<f32>,
    /// Level `k` (1..codebooks) at `k - 1`: `[n, depth_hidden]`, the depth decoder's normed
    /// output at position `k`.
    pub depth_out: Vec<Vec<f32>>,
    /// Level `k` at `k - 1`: `[n, audio_vocab]`.
    pub head_logits: Vec<Vec<f32>>,
    /// `[n, backbone_hidden]`: the next backbone input.
    pub feedback: Vec<f32>,
    /// `[n, codebooks]`.
    pub codes: Vec<i32>,
}

impl<B: LmOps> TtsStage<B> {
    /// Downloads the last launched frame's buffers (synchronises; for tests and diagnostics).
    pub fn trace(&self) -> Result<FrameTrace> {
        let be = &self.be;
        let (utts, bucket, half) = &self.last;
        let n = utts.len();
        let cut = |buf: &B::Buf, width: usize| -> Result<Vec<f32>> {
            let mut v = be.download(buf)?;
            v.truncate(n * width);
            Ok(v)
        };
        let (h, d, v) = (
            self.c.backbone.hidden_size,
            self.c.depth.hidden_size,
            self.c.audio_vocab_size,
        );
        let mut codes =
            be.download_ints(&self.pipe.buckets[*bucket].halves[*half].inputs.codes.dev)?;
        codes.truncate(n * self.c.num_codebooks);
        Ok(FrameTrace {
            utterances: utts.clone(),
            h: cut(&self.bufs.h, h)?,
            logits: cut(&self.bufs.logits, v)?,
            depth_out: self.bufs.depth_out[1..]
                .iter()
                .map(|b| cut(b, d))
                .collect::<Result<_>>()?,
            head_logits: self
                .bufs
                .head_logits
                .iter()
                .map(|b| cut(b, v))
                .collect::<Result<_>>()?,
            feedback: cut(&self.bufs.feedback, h)?,
            codes,
        })
    }
}
