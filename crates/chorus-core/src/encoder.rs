//! The backend-erased face of a slot encoder, as the server and the CLI drive it.

use crate::{Error, Result, StateBytes, FRAME_SAMPLES};

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
    /// Frames per slot that [`FrameEncoder::step_chunk`] takes in one step (1: frame by frame).
    fn chunk_frames(&self) -> usize {
        1
    }
    /// Encodes `chunk_frames()` consecutive frames of audio for each of `slots` (distinct), as
    /// that many [`FrameEncoder::step`]s would, leaving each slot's state as they would. `pcm` is
    /// `[slots, chunk_frames * FRAME_SAMPLES]`; `codes` gets `[slots, chunk_frames, n_q]` and
    /// `latents`, when given, `[slots, chunk_frames, latent_dim()]`. Validates everything first:
    /// on error no slot's state has changed.
    fn step_chunk(
        &mut self,
        slots: &[usize],
        pcm: &[f32],
        n_q: usize,
        codes: &mut [u32],
        mut latents: Option<&mut [f32]>,
    ) -> Result<()> {
        let k = self.chunk_frames();
        let dims = ChunkDims {
            max_slots: self.max_slots(),
            max_codebooks: self.max_codebooks(),
            latent_dim: self.latent_dim(),
            frames: k,
        };
        validate_audio_chunk(
            &dims,
            (slots, pcm, n_q),
            (codes.len(), latents.as_ref().map(|l| l.len())),
        )?;
        let (nq, dim) = (self.max_codebooks(), self.latent_dim());
        let mut out = vec![0u32; slots.len() * nq];
        let mut lat = vec![0f32; slots.len() * dim];
        for f in 0..k {
            let frames: Vec<AudioFrame<'_>> = slots
                .iter()
                .enumerate()
                .map(|(i, &slot)| {
                    let at = (i * k + f) * FRAME_SAMPLES;
                    AudioFrame {
                        slot,
                        pcm: &pcm[at..at + FRAME_SAMPLES],
                        n_q,
                    }
                })
                .collect();
            self.step(&frames, &mut out, Some(&mut lat))?;
            for (i, row) in out.chunks_exact(nq).enumerate() {
                let at = (i * k + f) * n_q;
                codes[at..at + n_q].copy_from_slice(&row[..n_q]);
            }
            if let Some(l) = latents.as_deref_mut() {
                for (i, row) in lat.chunks_exact(dim).enumerate() {
                    let at = (i * k + f) * dim;
                    l[at..at + dim].copy_from_slice(row);
                }
            }
        }
        Ok(())
    }
}

const OP_CHUNK: &str = "FrameEncoder::step_chunk";

/// An encoder's sizes as a chunk step sees them.
#[derive(Clone, Copy, Debug)]
pub struct ChunkDims {
    pub max_slots: usize,
    pub max_codebooks: usize,
    pub latent_dim: usize,
    /// Frames per slot of one chunk step.
    pub frames: usize,
}

/// Checks a chunk step's `(slots, pcm, n_q)` and the lengths of its `(codes, latents)` outputs:
/// slots known and distinct, `pcm` exactly `[slots, frames * FRAME_SAMPLES]` and finite,
/// `1 <= n_q <= max_codebooks`, codes `[slots, frames, n_q]`, latents `[slots, frames, dim]`.
pub fn validate_audio_chunk(
    dims: &ChunkDims,
    (slots, pcm, n_q): (&[usize], &[f32], usize),
    (codes, latents): (usize, Option<usize>),
) -> Result<()> {
    let ChunkDims {
        max_slots,
        max_codebooks,
        latent_dim,
        frames,
    } = *dims;
    if slots.is_empty() || n_q == 0 || n_q > max_codebooks {
        return Err(Error::input(
            OP_CHUNK,
            format!(
                "{} slots with n_q {n_q}: need at least one slot and 1..={max_codebooks} codebooks",
                slots.len()
            ),
        ));
    }
    for (i, &s) in slots.iter().enumerate() {
        if s >= max_slots {
            return Err(Error::UnknownSlot {
                op: OP_CHUNK,
                slot: s,
                max_slots,
            });
        }
        if slots[..i].contains(&s) {
            return Err(Error::input(
                OP_CHUNK,
                format!("slot {s} appears twice in one step"),
            ));
        }
    }
    let len = frames * FRAME_SAMPLES;
    if pcm.len() != slots.len() * len {
        return Err(Error::input(
            OP_CHUNK,
            format!(
                "{} samples for {} slots x {frames} frames of {FRAME_SAMPLES}",
                pcm.len(),
                slots.len()
            ),
        ));
    }
    if codes != slots.len() * frames * n_q {
        return Err(Error::input(
            OP_CHUNK,
            format!(
                "codes buffer holds {codes} values, expected {} slots x {frames} frames x n_q {n_q}",
                slots.len()
            ),
        ));
    }
    if let Some(len) = latents.filter(|&l| l != slots.len() * frames * latent_dim) {
        return Err(Error::input(
            OP_CHUNK,
            format!(
                "latents buffer holds {len} values, expected {} slots x {frames} frames x {latent_dim}",
                slots.len()
            ),
        ));
    }
    if let Some(i) = pcm.iter().position(|v| !v.is_finite()) {
        return Err(Error::input(
            OP_CHUNK,
            format!(
                "slot {} (row {}): sample {} is not finite",
                slots[i / len],
                i / len,
                i % len
            ),
        ));
    }
    Ok(())
}
