//! The backend-erased face of a slot encoder, as the server and the CLI drive it.

use crate::{Result, StateBytes};

/// One stream's input for one encode step.
#[derive(Clone, Copy, Debug)]
pub struct AudioFrame<'a> {
    pub slot: usize,
    /// [`crate::FRAME_SAMPLES`] mono samples at the model's rate.
    pub pcm: &'a [f32],
    /// Codebooks to quantise (1 <= n_q <= the model's codebooks).
    pub n_q: usize,
}

/// A streaming encoder of `max_slots` independent streams: 80 ms of audio in, codes out.
pub trait FrameEncoder {
    /// Number of streams it holds state for.
    fn max_slots(&self) -> usize;
    /// The most frames one step takes.
    fn largest_batch(&self) -> usize;
    /// Codebooks of the model: `n_q` may be at most this.
    fn max_codebooks(&self) -> usize;
    /// Entries per codebook: every code is below it.
    fn codebook_size(&self) -> usize;
    /// Length of a latent frame.
    fn latent_dim(&self) -> usize;
    /// Per-stream state.
    fn state_bytes(&self) -> StateBytes;
    /// `cpu`, `cuda` and the precision, for reports.
    fn describe(&self) -> String;
    /// Encodes one frame for each entry of `frames` (distinct slots): row `i` of `codes`
    /// (`[frames, max_codebooks()]`) gets its frame's `n_q` codes first (the rest are zero), and
    /// row `i` of `latents` (`[frames, latent_dim()]`), when given, the pre-quantisation latent.
    /// Validates everything first: on error no slot's state has changed.
    fn step(
        &mut self,
        frames: &[AudioFrame<'_>],
        codes: &mut [u32],
        latents: Option<&mut [f32]>,
    ) -> Result<()>;
    /// Returns a slot to the zero state.
    fn reset(&mut self, slot: usize) -> Result<()>;
}
