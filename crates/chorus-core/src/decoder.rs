//! The backend-erased face of a slot decoder, as the engine and the CLI drive it.

use crate::{Result, FRAME_SAMPLES};

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

/// What a finished pipelined step reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepDone {
    /// Rows of PCM written.
    pub rows: usize,
    /// Seconds the device spent on the step (CUDA events; on the CPU, the program's run time).
    pub device_seconds: f64,
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
    /// Steps [`FrameDecoder::launch_step`] can hold queued at once (0: it is not supported,
    /// use [`FrameDecoder::step`]).
    fn pipeline_depth(&self) -> usize {
        0
    }
    /// Validates and queues one step like [`FrameDecoder::step`] without waiting for it: the
    /// caller prepares the next step while the device runs this one. At most
    /// `pipeline_depth()` steps may be queued; [`FrameDecoder::finish_step`] takes them back in
    /// order. On error nothing was queued and no slot's state has changed.
    fn launch_step(&mut self, _frames: &[Frame<'_>]) -> Result<()> {
        Err(crate::Error::input(
            "FrameDecoder::launch_step",
            "this decoder has no pipelined steps (pipeline_depth() is 0)",
        ))
    }
    /// Waits for the oldest queued step and writes its PCM, `[rows, FRAME_SAMPLES]`, into the
    /// front of `pcm`.
    fn finish_step(&mut self, _pcm: &mut [f32]) -> Result<StepDone> {
        Err(crate::Error::input(
            "FrameDecoder::finish_step",
            "no step is queued",
        ))
    }
    /// Frames per slot that [`FrameDecoder::step_chunk`] takes in one step (1: frame by frame).
    fn chunk_frames(&self) -> usize {
        1
    }
    /// Decodes `chunk_frames()` consecutive frames of codes for each of `slots` (distinct), as that
    /// many [`FrameDecoder::step`]s would. `codes` is `[slots, chunk_frames, n_q]`; `pcm` gets
    /// `[slots, chunk_frames * FRAME_SAMPLES]`. Validates everything first.
    fn step_chunk(
        &mut self,
        slots: &[usize],
        codes: &[u32],
        n_q: usize,
        pcm: &mut [f32],
    ) -> Result<()> {
        let k = self.chunk_frames();
        if n_q == 0
            || codes.len() != slots.len() * k * n_q
            || pcm.len() != slots.len() * k * FRAME_SAMPLES
        {
            return Err(crate::Error::input(
                "FrameDecoder::step_chunk",
                format!(
                    "{} codes and {} samples for {} slots x {k} frames x n_q {n_q}",
                    codes.len(),
                    pcm.len(),
                    slots.len()
                ),
            ));
        }
        validate_chunk(
            self.max_slots(),
            self.codebook_size(),
            self.max_codebooks(),
            slots,
            codes,
            n_q,
        )?;
        let mut out = vec![0f32; slots.len() * FRAME_SAMPLES];
        for f in 0..k {
            let frames: Vec<Frame<'_>> = slots
                .iter()
                .enumerate()
                .map(|(i, &slot)| Frame {
                    slot,
                    input: FrameInput::Codes(&codes[(i * k + f) * n_q..(i * k + f + 1) * n_q]),
                })
                .collect();
            self.step(&frames, &mut out)?;
            for (i, o) in out.chunks(FRAME_SAMPLES).enumerate() {
                let at = (i * k + f) * FRAME_SAMPLES;
                pcm[at..at + FRAME_SAMPLES].copy_from_slice(o);
            }
        }
        Ok(())
    }
}

/// The checks of a chunk step: distinct slots below `max_slots`, `1 <= n_q <= max_codebooks`, and
/// every code below `cardinality` (`codes` is `[slots, frames, n_q]`).
pub fn validate_chunk(
    max_slots: usize,
    cardinality: usize,
    max_codebooks: usize,
    slots: &[usize],
    codes: &[u32],
    n_q: usize,
) -> Result<()> {
    const OP: &str = "FrameDecoder::step_chunk";
    if slots.is_empty() || n_q == 0 || n_q > max_codebooks {
        return Err(crate::Error::input(
            OP,
            format!(
                "{} slots with n_q {n_q}: need at least one slot and 1..={max_codebooks} codebooks",
                slots.len()
            ),
        ));
    }
    for (i, &s) in slots.iter().enumerate() {
        if s >= max_slots {
            return Err(crate::Error::UnknownSlot {
                op: OP,
                slot: s,
                max_slots,
            });
        }
        if slots[..i].contains(&s) {
            return Err(crate::Error::input(
                OP,
                format!("slot {s} appears twice in one step"),
            ));
        }
    }
    let per_slot = codes.len() / slots.len();
    if let Some(i) = codes.iter().position(|&c| c as usize >= cardinality) {
        return Err(crate::Error::CodeOutOfRangeAt {
            op: OP,
            stream: i / per_slot,
            frame: (i % per_slot) / n_q,
            codebook: i % n_q,
            code: i64::from(codes[i]),
            cardinality,
        });
    }
    Ok(())
}
