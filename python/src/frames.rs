//! Frames from Python: one frame or a block of frames of one stream, checked in full before the
//! decoder sees any of it, and the jobs that decode them on the decoder thread.

use std::sync::Arc;

use chorus_core::codes::{decode_range, CodesBatch, DecodeRange, StreamCodes};
use chorus_core::{Error, Frame, FrameDecoder, FrameInput, Result, FRAME_SAMPLES};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

const OP: &str = "Decoder.frames";

/// What frames must respect.
#[derive(Clone, Copy)]
pub struct Limits {
    pub codebook_size: usize,
    pub max_codebooks: usize,
    pub latent_dim: usize,
}

/// One frame of one stream, copied out of Python.
pub enum Input {
    Codes(Vec<u32>),
    Latent(Vec<f32>),
}

impl Input {
    pub fn as_frame(&self, slot: usize) -> Frame<'_> {
        Frame {
            slot,
            input: match self {
                Input::Codes(c) => FrameInput::Codes(c),
                Input::Latent(l) => FrameInput::Latent(l),
            },
        }
    }
}

/// Codes `[n_q]` (int64) or a latent `[latent_dim]` (float32): frame `row` of a step.
pub fn read_frame(row: usize, value: &Bound<'_, PyAny>, lim: Limits) -> Result<Input> {
    let mut block = read_block(value, lim)?;
    match block.len() {
        1 => Ok(block.remove(0)),
        _ => Err(Error::input(
            OP,
            format!(
                "frame {row}: a step takes one frame per stream, found {}",
                block.len()
            ),
        )),
    }
}

/// Codes `[n_q]` or `[n_q, k]` (int64), or latents `[latent_dim]` or `[latent_dim, k]` (float32):
/// `k` frames, every code and value checked.
pub fn read_block(value: &Bound<'_, PyAny>, lim: Limits) -> Result<Vec<Input>> {
    if let Ok(a) = value.extract::<PyReadonlyArrayDyn<'_, i64>>() {
        let (n_q, k) = columns(a.shape(), "codes", "n_q")?;
        if n_q == 0 || n_q > lim.max_codebooks {
            return Err(Error::input(
                OP,
                format!(
                    "codes have {n_q} codebooks; the model takes 1..={}",
                    lim.max_codebooks
                ),
            ));
        }
        let view = a.as_array();
        let flat: Vec<i64> = view.iter().copied().collect();
        let mut out = Vec::with_capacity(k);
        for f in 0..k {
            let mut codes = Vec::with_capacity(n_q);
            for q in 0..n_q {
                let c = flat[q * k + f];
                if c < 0 || c as u64 >= lim.codebook_size as u64 {
                    return Err(Error::CodeOutOfRangeAt {
                        op: OP,
                        stream: 0,
                        frame: f,
                        codebook: q,
                        code: c,
                        cardinality: lim.codebook_size,
                    });
                }
                codes.push(c as u32);
            }
            out.push(Input::Codes(codes));
        }
        return Ok(out);
    }
    if let Ok(a) = value.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        let (dim, k) = columns(a.shape(), "latents", "latent_dim")?;
        if dim != lim.latent_dim {
            return Err(Error::input(
                OP,
                format!(
                    "latents have shape {:?}, expected [{}] or [{}, k]",
                    a.shape(),
                    lim.latent_dim,
                    lim.latent_dim
                ),
            ));
        }
        let flat: Vec<f32> = a.as_array().iter().copied().collect();
        if let Some(i) = flat.iter().position(|v| !v.is_finite()) {
            return Err(Error::input(
                OP,
                format!("latent value {} of frame {} is not finite", i / k, i % k),
            ));
        }
        return Ok((0..k)
            .map(|f| Input::Latent((0..dim).map(|d| flat[d * k + f]).collect()))
            .collect());
    }
    Err(Error::input(
        OP,
        "expected an int64 codes array or a float32 latent array",
    ))
}

/// `[rows]` or `[rows, k]` as `(rows, k)`.
fn columns(shape: &[usize], what: &str, rows: &str) -> Result<(usize, usize)> {
    match *shape {
        [r] => Ok((r, 1)),
        [r, k] if k > 0 => Ok((r, k)),
        _ => Err(Error::input(
            OP,
            format!("{what} have shape {shape:?}, expected [{rows}] or [{rows}, k] with k >= 1"),
        )),
    }
}

/// A block of frames of one stream (all codes of one width, or all latents, as
/// [`read_block`] makes them), decoded in one job: whole chunks of the decoder's `chunk_frames`
/// per step for codes, the rest frame by frame.
pub fn decode_block(d: &mut dyn FrameDecoder, slot: usize, block: &[Input]) -> Result<Vec<f32>> {
    let mut out = vec![0f32; block.len() * FRAME_SAMPLES];
    let k = d.chunk_frames();
    let mut done = 0;
    if let (true, Some(Input::Codes(first))) = (k > 1, block.first()) {
        let n_q = first.len();
        let mut codes = Vec::with_capacity(k * n_q);
        while done + k <= block.len() {
            codes.clear();
            for f in &block[done..done + k] {
                if let Input::Codes(c) = f {
                    codes.extend_from_slice(c);
                }
            }
            if codes.len() != k * n_q {
                break;
            }
            let at = done * FRAME_SAMPLES;
            d.step_chunk(&[slot], &codes, n_q, &mut out[at..at + k * FRAME_SAMPLES])?;
            done += k;
        }
    }
    for (f, input) in block.iter().enumerate().skip(done) {
        let at = f * FRAME_SAMPLES;
        d.step(&[input.as_frame(slot)], &mut out[at..at + FRAME_SAMPLES])?;
    }
    Ok(out)
}

/// Frames `frames` of the streams `group`, stream `group[i]` in `slots[i]`.
pub struct ChunkJob {
    pub batch: Arc<CodesBatch>,
    pub group: Vec<usize>,
    pub slots: Vec<usize>,
    pub frames: std::ops::Range<usize>,
}

impl ChunkJob {
    /// PCM `[group, frames, 1920]`: whole chunks of the decoder's `chunk_frames` per step, the
    /// last one padded past the sequences' end when the job reaches it (the slots are reset
    /// before they decode again), otherwise the rest frame by frame.
    pub fn run(&self, d: &mut dyn FrameDecoder) -> Result<Vec<f32>> {
        let all = self.batch.streams();
        let group: Vec<StreamCodes<'_>> = self.group.iter().map(|&s| all[s]).collect();
        let range = DecodeRange {
            slots: &self.slots,
            frames: self.frames.clone(),
            ends_streams: self.frames.end == self.batch.frames,
        };
        let pcm = decode_range(d, &group, &range, || ())?;
        Ok(pcm.concat())
    }
}
