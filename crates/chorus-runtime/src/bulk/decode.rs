//! Bulk decoding: many code files side by side on one slot decoder, each file its own slot, in
//! the steps `chorus decode` takes for one file (chunks of `chunk_frames()` frames, the last one
//! padded past the file's end), so each file's PCM equals its single-file decode.

use chorus_core::codes::CodesBatch;
use chorus_core::{Error, Frame, FrameDecoder, FrameInput, Result, FRAME_SAMPLES};

use super::slots::SlotFiles;
use super::SlotBatch;

const OP_INPUT: &str = "DecodeInput::new";

/// One stream's codes, validated against the model.
#[derive(Clone, Debug)]
pub struct DecodeInput {
    pub n_q: usize,
    pub frames: usize,
    /// `[n_q, frames]` row-major.
    pub codes: Vec<u32>,
}

impl DecodeInput {
    /// The one stream of `batch`; a batch of several streams is refused, naming `origin`.
    pub fn new(batch: CodesBatch, origin: &str) -> Result<Self> {
        if batch.streams != 1 {
            return Err(Error::input(
                OP_INPUT,
                format!(
                    "{origin}: holds {} streams; a bulk decode takes one per file ([n_q, T])",
                    batch.streams
                ),
            ));
        }
        Ok(Self {
            n_q: batch.n_q,
            frames: batch.frames,
            codes: batch.codes,
        })
    }

    /// The codes of frame `t`, codebook order.
    fn frame(&self, t: usize) -> impl Iterator<Item = u32> + '_ {
        (0..self.n_q).map(move |q| self.codes[q * self.frames + t])
    }
}

/// A file in a slot: its codes, the next frame to decode, and the PCM so far.
struct Decoding {
    input: DecodeInput,
    next: usize,
    pcm: Vec<f32>,
}

impl Decoding {
    fn left(&self) -> usize {
        self.input.frames - self.next
    }
}

/// Files held in the slots of one decoder, advanced together.
pub struct DecodeBatch {
    files: SlotFiles<Decoding>,
    /// Scratch of one step: codes in, PCM out.
    codes: Vec<u32>,
    pcm: Vec<f32>,
    frames_done: u64,
}

impl DecodeBatch {
    /// A batch that may use decoder slots `slots` (distinct).
    pub fn new(slots: Vec<usize>) -> Result<Self> {
        Ok(Self {
            files: SlotFiles::new(slots)?,
            codes: Vec::new(),
            pcm: Vec::new(),
            frames_done: 0,
        })
    }

    /// Decodes the next frames of every held file: with a chunked decoder one chunk step (grouped
    /// by n_q), a file's last chunk padded with code 0 past its end (the decoder is causal: the
    /// padding changes none of the file's PCM, and the slot is reset before its next file), else
    /// one frame step; each from the zero state for a file new to its slot; returns the files
    /// that finished with their PCM. An error is the device's (inputs were checked when read):
    /// the run should stop.
    pub fn step(&mut self, dec: &mut dyn FrameDecoder) -> Result<Vec<(usize, Vec<f32>)>> {
        for slot in self.files.take_fresh() {
            dec.reset(slot)?;
        }
        let (k, width) = (dec.chunk_frames(), dec.largest_batch().max(1));
        let mut held: Vec<_> = self
            .files
            .held_mut()
            .filter(|h| h.item.left() > 0)
            .collect();
        let (mut chunked, mut single): (Vec<_>, Vec<_>) = held.drain(..).partition(|_| k > 1);
        chunked.sort_by_key(|h| h.item.input.n_q);
        for same_nq in chunked.chunk_by_mut(|a, b| a.item.input.n_q == b.item.input.n_q) {
            for group in same_nq.chunks_mut(width) {
                let n_q = group[0].item.input.n_q;
                self.codes.clear();
                for h in group.iter() {
                    let real = k.min(h.item.left());
                    for f in 0..real {
                        self.codes.extend(h.item.input.frame(h.item.next + f));
                    }
                    self.codes.resize(self.codes.len() + (k - real) * n_q, 0);
                }
                let slots: Vec<usize> = group.iter().map(|h| h.slot).collect();
                self.pcm.resize(group.len() * k * FRAME_SAMPLES, 0.0);
                dec.step_chunk(&slots, &self.codes, n_q, &mut self.pcm)?;
                for (h, pcm) in group
                    .iter_mut()
                    .zip(self.pcm.chunks_exact(k * FRAME_SAMPLES))
                {
                    let real = k.min(h.item.left());
                    h.item.pcm.extend_from_slice(&pcm[..real * FRAME_SAMPLES]);
                    h.item.next += real;
                    self.frames_done += real as u64;
                }
            }
        }
        for group in single.chunks_mut(width) {
            let n_q_max = group.iter().map(|h| h.item.input.n_q).max().unwrap_or(0);
            self.codes.clear();
            for h in group.iter() {
                self.codes.extend(h.item.input.frame(h.item.next));
                // Rows of the widest n_q, so each frame's codes are one slice.
                self.codes
                    .resize(self.codes.len() + n_q_max - h.item.input.n_q, 0);
            }
            let frames: Vec<Frame<'_>> = group
                .iter()
                .zip(self.codes.chunks_exact(n_q_max.max(1)))
                .map(|(h, row)| Frame {
                    slot: h.slot,
                    input: FrameInput::Codes(&row[..h.item.input.n_q]),
                })
                .collect();
            self.pcm.resize(group.len() * FRAME_SAMPLES, 0.0);
            dec.step(&frames, &mut self.pcm)?;
            for (h, pcm) in group.iter_mut().zip(self.pcm.chunks_exact(FRAME_SAMPLES)) {
                h.item.pcm.extend_from_slice(pcm);
                h.item.next += 1;
            }
            self.frames_done += group.len() as u64;
        }
        let done = self.files.release(|f| f.left() == 0);
        Ok(done.into_iter().map(|(id, f)| (id, f.pcm)).collect())
    }
}

impl SlotBatch for DecodeBatch {
    type Input = DecodeInput;

    fn free(&self) -> usize {
        self.files.free()
    }

    fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    fn admit(&mut self, id: usize, input: DecodeInput) {
        let pcm = Vec::with_capacity(input.frames * FRAME_SAMPLES);
        self.files.admit(
            id,
            Decoding {
                input,
                next: 0,
                pcm,
            },
        );
    }

    fn frames_done(&self) -> u64 {
        self.frames_done
    }
}
