//! The backend-erased face of a slot decoder, as the engine and the CLI drive it.

use crate::Result;

/// One stream's input for one frame.
#[derive(Clone, Copy, Debug)]
pub enum FrameInput<'a> {
    /// `n_q` codes (1 <= n_q <= the model's codebooks), codebook order.
    Codes(&'a [u32]),
    /// One latent vector of the model's hidden size, added after the quantizer.
    Latent(&'a [f32]),
}

/// One frame of one stream.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub slot: usize,
    pub input: FrameInput<'a>,
}

/// Bytes of per-stream state, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateBytes {
    /// Causal-conv histories and transposed-conv tails.
    pub conv: usize,
    /// KV rings of every transformer layer.
    pub kv: usize,
    /// Position counter.
    pub index: usize,
}

impl StateBytes {
    /// The sum of every kind.
    pub fn total(&self) -> usize {
        self.conv + self.kv + self.index
    }
}

/// A streaming decoder of `max_slots` independent streams.
pub trait FrameDecoder {
    /// Number of streams it holds state for.
    fn max_slots(&self) -> usize;
    /// The most frames one step takes.
    fn largest_batch(&self) -> usize;
    /// Entries per codebook: codes must be below it.
    fn codebook_size(&self) -> usize;
    /// Codebooks of the model: `n_q` may be at most this.
    fn max_codebooks(&self) -> usize;
    /// Length of a latent frame.
    fn latent_dim(&self) -> usize;
    /// Per-stream state.
    fn state_bytes(&self) -> StateBytes;
    /// `cpu`, `cuda` and the precision, for reports.
    fn describe(&self) -> String;
    /// Decodes one frame for each entry of `frames` (distinct slots) into
    /// `pcm[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES]`. Validates everything first: on error no
    /// slot's state has changed.
    fn step(&mut self, frames: &[Frame<'_>], pcm: &mut [f32]) -> Result<()>;
    /// Returns a slot to the zero state.
    fn reset(&mut self, slot: usize) -> Result<()>;
}
