//! Per-step I/O of a bucket of streams: pinned host copies the stage fills and device copies the
//! step reads, and the pinned outputs it writes.

use chorus_core::{LmOps, Result};
use chorus_lm::IntInput;

/// The inputs of one step for a bucket of `n` streams.
pub struct StepInputs<B: LmOps> {
    /// `[n]`: state slot of each stream (padding: the dummy slot).
    pub slots: IntInput<B>,
    /// `[n]`: the stream's position (steps since its reset).
    pub start: IntInput<B>,
    /// `[n, max_blocks]`: the stream's ring.
    pub tables: IntInput<B>,
    /// `[n, codebooks]`: the audio input of this position (the previous frame's codes, or the
    /// initial token at position 0).
    pub codes: IntInput<B>,
    /// `[n]`: a forced text token (teacher forcing), or -1 where the draw decides; the draw
    /// fills it.
    pub tokens: IntInput<B>,
    /// `[n]`: [`chorus_core::lm_ops::DrawMode`].
    pub mode: IntInput<B>,
    /// `[n, 2]`: 64-bit noise seeds, low word first.
    pub seeds: IntInput<B>,
    /// `[n]`: the draw index (the position).
    pub draws: IntInput<B>,
    /// `[n]`: unused (no END class), zero for the op's signature.
    pub allow_end: IntInput<B>,
    /// `[n]`: the slots this step admits (streams at position 0) then `NO_ROW`: their state is
    /// reset inside the step ([`chorus_core::ResetRowsArgs`]).
    pub resets: IntInput<B>,
}

impl<B: LmOps> StepInputs<B> {
    pub fn new(be: &B, n: usize, max_blocks: usize, codebooks: usize) -> Result<Self> {
        Ok(Self {
            slots: IntInput::new(be, n)?,
            start: IntInput::new(be, n)?,
            tables: IntInput::new(be, n * max_blocks)?,
            codes: IntInput::new(be, n * codebooks)?,
            tokens: IntInput::new(be, n)?,
            mode: IntInput::new(be, n)?,
            seeds: IntInput::new(be, 2 * n)?,
            draws: IntInput::new(be, n)?,
            allow_end: IntInput::new(be, n)?,
            resets: IntInput::new(be, n)?,
        })
    }

    /// Program op: every input to the device.
    pub fn stage(&mut self, be: &B) -> Result<()> {
        for i in [
            &mut self.slots,
            &mut self.start,
            &mut self.tables,
            &mut self.codes,
            &mut self.tokens,
            &mut self.mode,
            &mut self.seeds,
            &mut self.draws,
            &mut self.allow_end,
            &mut self.resets,
        ] {
            i.stage(be)?;
        }
        Ok(())
    }
}

/// The outputs of one step, read by the host a step later.
pub struct StepOutputs<B: LmOps> {
    /// `[n]`: each stream's text token.
    pub tokens: B::PinnedInts,
    /// `[n, extra_heads * classes]`: the VAD heads' logits (`None` without VAD heads).
    pub vad: Option<B::PinnedFloats>,
    /// `[n, text_vocab]`: the text logits, when the stage keeps them (traces, tests).
    pub logits: Option<B::PinnedFloats>,
}

impl<B: LmOps> StepOutputs<B> {
    pub fn new(be: &B, n: usize, vad_width: usize, logits_width: Option<usize>) -> Result<Self> {
        Ok(Self {
            tokens: be.pinned_ints(n)?,
            vad: (vad_width > 0)
                .then(|| be.pinned_floats(n * vad_width))
                .transpose()?,
            logits: logits_width.map(|w| be.pinned_floats(n * w)).transpose()?,
        })
    }
}

/// The in-frame encoder's I/O of one bucket half (PCM in).
pub struct AudioIo<B: LmOps> {
    /// Slots, code requests and `[n, FRAME_SAMPLES]` PCM.
    pub staging: B::Staging,
    /// `[n]`: each row's entry in the step's audio table.
    pub select: IntInput<B>,
    /// `[n, num_quantizers]`: the codes the encoder found.
    pub codes: B::PinnedInts,
}
