//! Bulk encoding: many audio files side by side on one slot encoder, each file its own slot, one
//! frame of every held file per step.

use std::path::Path;

use chorus_core::{AudioFrame, Error, FrameEncoder, Result, FRAME_SAMPLES};

use super::slots::SlotFiles;
use super::SlotBatch;

const OP_READ: &str = "read_audio_input";
const OP_STEP: &str = "EncodeBatch::step";

/// One file's audio, ready for the encoder: 24 kHz mono, padded with silence to whole frames.
#[derive(Clone, Debug)]
pub struct AudioInput {
    /// `frames * FRAME_SAMPLES` samples.
    pub samples: Vec<f32>,
    pub frames: usize,
    /// Seconds of audio before the padding.
    pub seconds: f64,
    /// `Some(what is missing)` for a cut-short file read with `allow_truncated`.
    pub truncated: Option<String>,
    /// What the source was: its format, rate and channel count.
    pub format: String,
    pub source_rate: u32,
    pub source_channels: usize,
}

/// Decodes an audio file (WAV, FLAC, MP3, Ogg Vorbis or Opus; any rate and channel count) to
/// 24 kHz mono whole frames, as `chorus encode` reads it: the last partial frame is padded with
/// silence, and a cut-short file is refused unless `allow_truncated`.
pub fn read_audio_input(
    path: &Path,
    allow_truncated: bool,
    progress: Option<&mut dyn FnMut(chorus_audio::Progress)>,
) -> Result<AudioInput> {
    let name = path.display().to_string();
    let audio = chorus_audio::read_audio_file(path, progress).map_err(|e| match e {
        chorus_audio::Error::Io { source, .. } => Error::io(OP_READ, name.clone(), source),
        other => Error::input(OP_READ, other.to_string()),
    })?;
    let seconds = audio.duration_secs();
    if let (Some(missing), false) = (&audio.incomplete, allow_truncated) {
        return Err(Error::input(
            OP_READ,
            format!(
                "{name}: the file is cut short or damaged ({missing}); pass --allow-truncated \
                 (Python: allow_truncated=True) to encode the {seconds:.2} s that decoded"
            ),
        ));
    }
    if let Some(i) = audio.samples.iter().position(|v| !v.is_finite()) {
        return Err(Error::input(
            OP_READ,
            format!("{name}: sample {i} decodes to {}", audio.samples[i]),
        ));
    }
    let frames = audio.samples.len().div_ceil(FRAME_SAMPLES);
    let mut samples = audio.samples;
    samples.resize(frames * FRAME_SAMPLES, 0.0);
    Ok(AudioInput {
        samples,
        frames,
        seconds,
        truncated: audio.incomplete,
        format: audio.format,
        source_rate: audio.source_rate,
        source_channels: audio.source_channels,
    })
}

/// A finished file's codes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedFile {
    pub n_q: usize,
    pub frames: usize,
    /// `[n_q, frames]` row-major, what `chorus encode` writes.
    pub codes: Vec<i64>,
}

/// A file in a slot: its audio, the next frame to encode, and the codes so far.
struct Encoding {
    samples: Vec<f32>,
    frames: usize,
    next: usize,
    codes: Vec<i64>,
}

/// Files held in the slots of one encoder, advanced together.
pub struct EncodeBatch {
    n_q: usize,
    files: SlotFiles<Encoding>,
    /// One step's codes, `[rows, max_codebooks]` (a chunk step's: `[rows, chunk, n_q]`).
    rows: Vec<u32>,
    /// One chunk step's audio, `[rows, chunk * FRAME_SAMPLES]`.
    pcm: Vec<f32>,
    frames_done: u64,
}

impl EncodeBatch {
    /// A batch that may use encoder slots `slots` (distinct), quantising to `n_q` codebooks.
    pub fn new(slots: Vec<usize>, n_q: usize) -> Result<Self> {
        if n_q == 0 {
            return Err(Error::config("EncodeBatch::new", "n_q must be at least 1"));
        }
        Ok(Self {
            n_q,
            files: SlotFiles::new(slots)?,
            rows: Vec::new(),
            pcm: Vec::new(),
            frames_done: 0,
        })
    }

    /// Encodes the next frames of every held file (in steps of at most the encoder's largest
    /// batch): with a chunked encoder one chunk step, a file's last chunk padded with silence
    /// (the model is causal: padding after a file's end changes none of its codes, and the slot
    /// is reset before its next file), else one frame step; each from the zero state for a file
    /// new to its slot; returns the files that finished.
    /// An error is the device's (inputs were checked when read): the run should stop.
    pub fn step(&mut self, enc: &mut dyn FrameEncoder) -> Result<Vec<(usize, EncodedFile)>> {
        for slot in self.files.take_fresh() {
            enc.reset(slot)?;
        }
        let (n_q, nq_max) = (self.n_q, enc.max_codebooks());
        if n_q > nq_max {
            return Err(Error::input(
                OP_STEP,
                format!("n_q {n_q} above the model's {nq_max}"),
            ));
        }
        let (k, width) = (enc.chunk_frames(), enc.largest_batch().max(1));
        let mut held: Vec<_> = self
            .files
            .held_mut()
            .filter(|h| h.item.next < h.item.frames)
            .collect();
        let (mut chunked, mut single): (Vec<_>, Vec<_>) = held.drain(..).partition(|_| k > 1);
        for group in chunked.chunks_mut(width) {
            self.pcm.clear();
            for h in group.iter() {
                let at = h.item.next * FRAME_SAMPLES;
                let end = h.item.samples.len().min(at + k * FRAME_SAMPLES);
                self.pcm.extend_from_slice(&h.item.samples[at..end]);
                self.pcm
                    .resize(self.pcm.len() + at + k * FRAME_SAMPLES - end, 0.0);
            }
            let slots: Vec<usize> = group.iter().map(|h| h.slot).collect();
            self.rows.resize(group.len() * k * n_q, 0);
            enc.step_chunk(&slots, &self.pcm, n_q, &mut self.rows, None)?;
            for (h, rows) in group.iter_mut().zip(self.rows.chunks_exact(k * n_q)) {
                let f = &mut h.item;
                let real = k.min(f.frames - f.next);
                for (t, row) in rows.chunks_exact(n_q).take(real).enumerate() {
                    for (q, &c) in row.iter().enumerate() {
                        f.codes[q * f.frames + f.next + t] = i64::from(c);
                    }
                }
                f.next += real;
                self.frames_done += real as u64;
            }
        }
        for group in single.chunks_mut(width) {
            let frames: Vec<AudioFrame<'_>> = group
                .iter()
                .map(|h| {
                    let at = h.item.next * FRAME_SAMPLES;
                    AudioFrame {
                        slot: h.slot,
                        pcm: &h.item.samples[at..at + FRAME_SAMPLES],
                        n_q,
                    }
                })
                .collect();
            self.rows.resize(frames.len() * nq_max, 0);
            enc.step(&frames, &mut self.rows, None)?;
            for (h, row) in group.iter_mut().zip(self.rows.chunks_exact(nq_max)) {
                let f = &mut h.item;
                for (q, &c) in row[..n_q].iter().enumerate() {
                    f.codes[q * f.frames + f.next] = i64::from(c);
                }
                f.next += 1;
            }
            self.frames_done += group.len() as u64;
        }
        let done = self.files.release(|f| f.next == f.frames);
        Ok(done
            .into_iter()
            .map(|(id, f)| {
                let out = EncodedFile {
                    n_q,
                    frames: f.frames,
                    codes: f.codes,
                };
                (id, out)
            })
            .collect())
    }
}

impl SlotBatch for EncodeBatch {
    type Input = AudioInput;

    fn free(&self) -> usize {
        self.files.free()
    }

    fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    fn admit(&mut self, id: usize, input: AudioInput) {
        let mut samples = input.samples;
        // Whole frames, whatever the caller built.
        samples.resize(input.frames * FRAME_SAMPLES, 0.0);
        let item = Encoding {
            samples,
            frames: input.frames,
            next: 0,
            codes: vec![0; self.n_q * input.frames],
        };
        self.files.admit(id, item);
    }

    fn frames_done(&self) -> u64 {
        self.frames_done
    }
}
