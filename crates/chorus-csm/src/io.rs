//! Per-frame integer I/O of a bucket of utterances: pinned host copies the scheduler fills and
//! device copies the frame program reads, and the pinned outputs it writes.

use chorus_core::{LmOps, Result, FRAME_SAMPLES};
use chorus_lm::IntInput;

/// The inputs of one frame for a bucket of `n` utterances.
pub struct FrameInputs<B: LmOps> {
    /// `[n]`: state slot of each utterance (padding: the dummy slot).
    pub slots: IntInput<B>,
    /// `[n]`: the backbone position this frame's codes are fed back at (`P + f`).
    pub start: IntInput<B>,
    /// `[n, max_blocks]`.
    pub tables: IntInput<B>,
    /// `[n]`: [`chorus_core::lm_ops::DrawMode`].
    pub mode: IntInput<B>,
    /// `[n, 2]`: each utterance's 64-bit noise seed, low word first.
    pub seeds: IntInput<B>,
    /// `[n]`: index of the frame's first draw (`codebooks * f`).
    pub draws: IntInput<B>,
    /// `[n]`: unused by CSM's draws (no END class), kept zero for the op's signature.
    pub allow_end: IntInput<B>,
    /// `[n, 2]`: each utterance's temperature (f32 bits) and top-k (`CfgDrawArgs::row_sampling`).
    pub sampling: IntInput<B>,
    /// `[n, codebooks]`: forced codes, or -1 where the draw decides; the draws fill it.
    pub codes: IntInput<B>,
}

impl<B: LmOps> FrameInputs<B> {
    /// Inputs for `n` utterances with block tables of `max_blocks`.
    pub fn new(be: &B, n: usize, max_blocks: usize, codebooks: usize) -> Result<Self> {
        Ok(Self {
            slots: IntInput::new(be, n)?,
            start: IntInput::new(be, n)?,
            tables: IntInput::new(be, n * max_blocks)?,
            mode: IntInput::new(be, n)?,
            seeds: IntInput::new(be, 2 * n)?,
            draws: IntInput::new(be, n)?,
            allow_end: IntInput::new(be, n)?,
            sampling: IntInput::new(be, 2 * n)?,
            codes: IntInput::new(be, n * codebooks)?,
        })
    }

    /// Program op: every input to the device.
    pub fn stage(&mut self, be: &B) -> Result<()> {
        for i in [
            &mut self.slots,
            &mut self.start,
            &mut self.tables,
            &mut self.mode,
            &mut self.seeds,
            &mut self.draws,
            &mut self.allow_end,
            &mut self.sampling,
            &mut self.codes,
        ] {
            i.stage(be)?;
        }
        Ok(())
    }
}

/// The outputs of one frame, read by the host a frame later.
pub struct FrameOutputs<B: LmOps> {
    /// `[n, codebooks]`.
    pub codes: B::PinnedInts,
    /// `[n, FRAME_SAMPLES]`: the frame's audio, when the stage decodes.
    pub pcm: Option<B::PinnedFloats>,
}

impl<B: LmOps> FrameOutputs<B> {
    /// Outputs for `n` utterances; `pcm`: the stage decodes Mimi in the frame.
    pub fn new(be: &B, n: usize, codebooks: usize, pcm: bool) -> Result<Self> {
        Ok(Self {
            codes: be.pinned_ints(n * codebooks)?,
            pcm: pcm
                .then(|| be.pinned_floats(n * FRAME_SAMPLES))
                .transpose()?,
        })
    }
}
