//! The single-stream face of the slot decoder, after the Phonon design's
//! `forward(latent, reset) -> pcm`: one slot in a bucket of one, through the same program (and,
//! on CUDA, the same captured graph) as the batched path, with the state kept on the device.

use crate::{DecoderOptions, MimiConfig, MimiWeights, SlotDecoder};
use chorus_core::{Buckets, Frame, FrameDecoder, FrameInput, LmOps, Result, FRAME_SAMPLES};

/// The one slot a single-stream decoder uses.
const SLOT: usize = 0;

/// Decodes one stream, one frame per call.
pub struct StreamDecoder<B: LmOps> {
    inner: SlotDecoder<B>,
    pcm: Vec<f32>,
}

impl<B: LmOps> StreamDecoder<B> {
    /// Builds and warms up a one-slot decoder.
    pub fn new(be: B, cfg: &MimiConfig, weights: &MimiWeights) -> Result<Self> {
        let opts = DecoderOptions {
            max_slots: 1,
            buckets: Buckets::new(&[1])?,
            chunk_frames: 1,
        };
        let mut inner = SlotDecoder::from_weights(be, cfg, weights, opts)?;
        inner.warmup()?;
        inner.reset(SLOT)?;
        Ok(Self {
            inner,
            pcm: vec![0.0; FRAME_SAMPLES],
        })
    }

    /// Decodes one frame (codes or a latent); `reset` first returns the stream to the zero
    /// state, so the frame starts a new utterance. Returns the frame's 1920 samples.
    pub fn decode(&mut self, input: FrameInput<'_>, reset: bool) -> Result<&[f32]> {
        if reset {
            self.inner.reset(SLOT)?;
        }
        self.inner
            .step(&[Frame { slot: SLOT, input }], &mut self.pcm)?;
        Ok(&self.pcm)
    }

    /// The underlying one-slot decoder.
    pub fn slot_decoder(&self) -> &SlotDecoder<B> {
        &self.inner
    }
}
