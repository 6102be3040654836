//! Per-step integer I/O: a pinned host copy and a device copy of each input, and the pinned
//! outputs, with the copies the program makes at its start and end.

use chorus_core::{LmOps, Result};
pub use chorus_lm::IntInput;

/// The inputs of one frame for a bucket of `songs` songs (`rows = 2 songs`).
pub struct FrameInputs<B: LmOps> {
    /// `[songs]`: state slot of each song (padding: the dummy slot).
    pub slots: IntInput<B>,
    /// `[rows]`: position the feedback embedding is written at (`P + f`).
    pub start: IntInput<B>,
    /// `[rows, max_blocks]`.
    pub tables: IntInput<B>,
    /// `[songs]`: [`chorus_core::lm_ops::DrawMode`].
    pub mode: IntInput<B>,
    /// `[songs, 2]`.
    pub seeds: IntInput<B>,
    /// `[songs]`: `8 f`.
    pub draws: IntInput<B>,
    /// `[songs]`.
    pub allow_end: IntInput<B>,
    /// `[songs, 8]`: forced codes, or -1 where the draw decides; the draws fill it.
    pub codes: IntInput<B>,
}

impl<B: LmOps> FrameInputs<B> {
    /// Inputs for `songs` songs with block tables of `max_blocks`.
    pub fn new(be: &B, songs: usize, max_blocks: usize, levels: usize) -> Result<Self> {
        let rows = 2 * songs;
        Ok(Self {
            slots: IntInput::new(be, songs)?,
            start: IntInput::new(be, rows)?,
            tables: IntInput::new(be, rows * max_blocks)?,
            mode: IntInput::new(be, songs)?,
            seeds: IntInput::new(be, 2 * songs)?,
            draws: IntInput::new(be, songs)?,
            allow_end: IntInput::new(be, songs)?,
            codes: IntInput::new(be, songs * levels)?,
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
            &mut self.codes,
        ] {
            i.stage(be)?;
        }
        Ok(())
    }
}

/// The outputs of one frame, read by the host after the step.
pub struct FrameOutputs<B: LmOps> {
    /// `[songs, 8]`.
    pub codes: B::PinnedInts,
    /// `[songs, 8 * hidden]`.
    pub hiddens: B::PinnedFloats,
}

impl<B: LmOps> FrameOutputs<B> {
    /// Outputs for `songs` songs.
    pub fn new(be: &B, songs: usize, levels: usize, hidden: usize) -> Result<Self> {
        Ok(Self {
            codes: be.pinned_ints(songs * levels)?,
            hiddens: be.pinned_floats(songs * levels * hidden)?,
        })
    }
}
