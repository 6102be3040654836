//! `chorus._chorus.Encoder`: the Mimi slot encoder behind an owner thread.
//!
//! Whole signals: a call encodes `[B, T]` audio as B streams side by side (long chunk steps of
//! each, from the zero state, on slots leased for the call), the last chunk padded with silence
//! past the signal's end as `chorus encode` does; long signals go in jobs so Ctrl-C is seen
//! between them.
//! Streams: a stream holds a slot and encodes whole frames as they come (whole chunks, then frame
//! steps; a piece is never padded, so the slot goes on from its last frame). Input is checked on
//! the calling thread; slot ownership again on the encoder thread, in order with other jobs.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use chorus_core::{
    AudioFrame, Buckets, Error, FrameEncoder, Precision, Result, DEFAULT_BUCKETS, FRAME_SAMPLES,
    WHOLE_FILE_ENCODE_CHUNK,
};
use chorus_mimi::checkpoint::load_model;
use chorus_runtime::{open_encoder, DeviceKind, EncoderSpec};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::actor::Actor;
use crate::encode_files::{encode_files, FilesJob};
use crate::errors::IntoPy;
use crate::mimi::SAMPLE_RATE;
use crate::slots::SlotTable;

/// Frames encoded per job (whole long-chunk steps): Ctrl-C is checked between jobs.
const ENCODE_CHUNK_FRAMES: usize = 2 * WHOLE_FILE_ENCODE_CHUNK;
/// The CUDA device an encoder opens on when CUDA is chosen.
const CUDA_DEVICE: usize = 0;

type Enc = Box<dyn FrameEncoder + Send>;

/// The Mimi slot encoder.
#[pyclass(module = "chorus._chorus", name = "Encoder", frozen)]
pub struct PyEncoder {
    actor: Actor<Enc>,
    slots: Arc<SlotTable>,
    /// Rows encoded side by side at most.
    width: usize,
    max_slots: usize,
    max_codebooks: usize,
    codebook_size: usize,
    latent_dim: usize,
    describe: String,
    source: String,
    /// Where the encoder runs (`auto` resolved), for the bulk readers' default.
    kind: DeviceKind,
}

/// One job: frames `frames` of rows `rows` of the audio, row `rows.start + i` on `slots[i]`.
struct EncodeJob {
    audio: Arc<Vec<f32>>,
    samples: usize,
    rows: Range<usize>,
    slots: Vec<usize>,
    frames: Range<usize>,
    n_q: usize,
    latents: bool,
    /// The job's frames end its signals and the slots are reset before they encode again, so
    /// the last chunk may be padded with silence past them. A stream's piece is never this: its
    /// slot goes on from exactly the piece's last frame.
    ends_signal: bool,
}

/// Codes `[rows, frames, n_q]` and, when asked, latents `[rows, frames, latent_dim]`.
struct EncodedChunk {
    codes: Vec<u32>,
    latents: Vec<f32>,
}

impl EncodeJob {
    /// Frames `t..t + n` of each row into `pcm` (`[rows, n * FRAME_SAMPLES]`), the signal's end
    /// padded with silence.
    fn fill(&self, t: usize, n: usize, pcm: &mut [f32]) {
        self.fill_padded(t, n, n, pcm);
    }

    /// Frames `t..t + real` of each row into rows of `width` frames of `pcm`, silence after the
    /// signal's end and after `real` frames.
    fn fill_padded(&self, t: usize, real: usize, width: usize, pcm: &mut [f32]) {
        let len = width * FRAME_SAMPLES;
        let start = t * FRAME_SAMPLES;
        let end = self.samples.min(start + real * FRAME_SAMPLES);
        for (i, r) in self.rows.clone().enumerate() {
            let src = &self.audio[r * self.samples + start..r * self.samples + end];
            let dst = &mut pcm[i * len..(i + 1) * len];
            dst[..src.len()].copy_from_slice(src);
            dst[src.len()..].fill(0.0);
        }
    }

    fn run(&self, enc: &mut dyn FrameEncoder) -> Result<EncodedChunk> {
        let (rows, frames) = (self.rows.len(), self.frames.len());
        let (width, dim) = (enc.max_codebooks(), enc.latent_dim());
        let mut out = EncodedChunk {
            codes: vec![0; rows * frames * self.n_q],
            latents: vec![0.0; if self.latents { rows * frames * dim } else { 0 }],
        };
        // Long chunks (the same codes as frame steps); the last one is padded past the signal
        // with silence only where the job ends its signals (the model is causal: padding after
        // the end changes none of their codes), otherwise the rest goes frame by frame so that
        // the state stays the stream's for the next job.
        let c = enc.chunk_frames();
        let mut done = 0;
        if c > 1 && (frames >= c || self.ends_signal) {
            let mut pcm = vec![0f32; rows * c * FRAME_SAMPLES];
            let mut codes = vec![0u32; rows * c * self.n_q];
            let mut lat = vec![0f32; if self.latents { rows * c * dim } else { 0 }];
            while frames - done >= c || (self.ends_signal && done < frames) {
                let real = c.min(frames - done);
                self.fill_padded(self.frames.start + done, real, c, &mut pcm);
                let l = self.latents.then_some(&mut lat[..]);
                enc.step_chunk(&self.slots, &pcm, self.n_q, &mut codes, l)?;
                for i in 0..rows {
                    let (src, at) = (i * c * self.n_q, (i * frames + done) * self.n_q);
                    let n = real * self.n_q;
                    out.codes[at..at + n].copy_from_slice(&codes[src..src + n]);
                    if self.latents {
                        let (src, at) = (i * c * dim, (i * frames + done) * dim);
                        let n = real * dim;
                        out.latents[at..at + n].copy_from_slice(&lat[src..src + n]);
                    }
                }
                done += real;
            }
        }
        // Each row's frame, the last one padded with silence.
        let mut pcm = vec![0f32; rows * FRAME_SAMPLES];
        let mut step_codes = vec![0u32; rows * width];
        let mut step_latents = vec![0f32; rows * dim];
        for (k, t) in self.frames.clone().enumerate().skip(done) {
            self.fill(t, 1, &mut pcm);
            let batch: Vec<AudioFrame<'_>> = (0..rows)
                .map(|i| AudioFrame {
                    slot: self.slots[i],
                    pcm: &pcm[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES],
                    n_q: self.n_q,
                })
                .collect();
            let lat = self.latents.then_some(&mut step_latents[..]);
            enc.step(&batch, &mut step_codes, lat)?;
            for i in 0..rows {
                let at = (i * frames + k) * self.n_q;
                out.codes[at..at + self.n_q]
                    .copy_from_slice(&step_codes[i * width..i * width + self.n_q]);
                if self.latents {
                    let at = (i * frames + k) * dim;
                    out.latents[at..at + dim]
                        .copy_from_slice(&step_latents[i * dim..(i + 1) * dim]);
                }
            }
        }
        Ok(out)
    }
}

#[pymethods]
impl PyEncoder {
    /// Loads `model` (`kyutai/mimi`, a path, or `random`) and builds the encoder on `device`.
    #[new]
    #[pyo3(signature = (model="kyutai/mimi", device="auto", precision=None, max_streams=16, threads=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: &str,
        precision: Option<&str>,
        max_streams: usize,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let requested = DeviceKind::parse(device).py_err()?;
        let spec = EncoderSpec {
            device: requested,
            precision: precision.map(Precision::parse).transpose().py_err()?,
            max_slots: max_streams,
            buckets: Buckets::new(DEFAULT_BUCKETS)
                .and_then(|b| b.capped(max_streams.max(1)))
                .py_err()?,
            threads,
            cuda_device: CUDA_DEVICE,
            chunk_frames: chorus_runtime::whole_file_encode_chunk(requested),
        };
        let name = model.to_owned();
        let kind = py.detach(|| chorus_runtime::resolve(spec.device));
        let (actor, info, source) = py
            .detach(move || -> Result<_> {
                let loaded = load_model(&name)?;
                let source = loaded.source.clone();
                let actor =
                    Actor::spawn("chorus-mimi-encoder", move || open_encoder(&loaded, &spec))?;
                let info = actor.call(|e: &mut Enc| {
                    (
                        e.max_slots(),
                        e.largest_batch(),
                        e.max_codebooks(),
                        e.codebook_size(),
                        e.latent_dim(),
                        e.describe(),
                    )
                })?;
                Ok((actor, info, source))
            })
            .py_err()?;
        let (max_slots, largest_batch, max_codebooks, codebook_size, latent_dim, describe) = info;
        Ok(Self {
            actor,
            slots: Arc::new(SlotTable::new(max_slots, "Encoder.slots")),
            width: max_slots.min(largest_batch).max(1),
            max_slots,
            max_codebooks,
            codebook_size,
            latent_dim,
            describe,
            source,
            kind,
        })
    }

    /// Encodes audio files into codes `[n_q, F]` (int64) each, many side by side (one slot each),
    /// as `chorus encode --audio-dir` does; a file that cannot be read gives its error message.
    #[pyo3(signature = (paths, n_q, allow_truncated=false, readers=None))]
    fn encode_files<'py>(
        &self,
        py: Python<'py>,
        paths: Vec<PathBuf>,
        n_q: usize,
        allow_truncated: bool,
        readers: Option<usize>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.check_n_q("Encoder.encode_files", n_q)?;
        let job = FilesJob {
            paths,
            n_q,
            allow_truncated,
            readers: readers.unwrap_or_else(|| chorus_runtime::bulk::default_readers(self.kind)),
            width: self.width,
        };
        encode_files(py, &self.actor, &self.slots, job)?
            .into_iter()
            .map(|r| match r {
                Ok(f) => Ok(PyArray1::from_vec(py, f.codes)
                    .reshape([f.n_q, f.frames])?
                    .into_any()),
                Err(msg) => Ok(msg.into_pyobject(py)?.into_any()),
            })
            .collect()
    }

    /// Encodes float32 audio `[B, T]` (24 kHz mono) into codes `[B, n_q, F]` (int64, F = T / 1920
    /// rounded up) and, when `latents`, the pre-quantisation latents `[B, F, latent_dim]`.
    #[pyo3(signature = (audio, n_q, latents=false))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        audio: PyReadonlyArray2<'py, f32>,
        n_q: usize,
        latents: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>)> {
        const OP: &str = "Encoder.encode";
        self.check_n_q(OP, n_q)?;
        let (streams, samples) = (audio.shape()[0], audio.shape()[1]);
        let data: Vec<f32> = audio.as_array().iter().copied().collect();
        check_finite(OP, &data, samples)?;
        let frames = samples.div_ceil(FRAME_SAMPLES);
        let dim = self.latent_dim;
        let mut codes = vec![0i64; streams * n_q * frames];
        let mut lat = vec![0f32; if latents { streams * frames * dim } else { 0 }];
        let audio = Arc::new(data);
        let table = self.slots.clone();
        let lease = py
            .detach(|| table.lease(streams.min(self.width)))
            .py_err()?;
        let width = lease.slots.len();
        for first in (0..streams).step_by(width) {
            let rows = first..streams.min(first + width);
            let slots = lease.slots[..rows.len()].to_vec();
            let reset = slots.clone();
            self.call(py, move |e| reset.iter().try_for_each(|&s| e.reset(s)))?
                .py_err()?;
            for t0 in (0..frames).step_by(ENCODE_CHUNK_FRAMES) {
                let t1 = frames.min(t0 + ENCODE_CHUNK_FRAMES);
                let job = EncodeJob {
                    audio: audio.clone(),
                    samples,
                    rows: rows.clone(),
                    slots: slots.clone(),
                    frames: t0..t1,
                    n_q,
                    latents,
                    ends_signal: t1 == frames,
                };
                let chunk = self.call(py, move |e| job.run(e.as_mut()))?.py_err()?;
                let k = t1 - t0;
                for (i, r) in rows.clone().enumerate() {
                    for t in 0..k {
                        for q in 0..n_q {
                            codes[(r * n_q + q) * frames + t0 + t] =
                                i64::from(chunk.codes[(i * k + t) * n_q + q]);
                        }
                    }
                    if latents {
                        let src = &chunk.latents[i * k * dim..(i + 1) * k * dim];
                        let at = (r * frames + t0) * dim;
                        lat[at..at + k * dim].copy_from_slice(src);
                    }
                }
                py.check_signals()?;
            }
        }
        drop(lease);
        let codes = PyArray1::from_vec(py, codes)
            .reshape([streams, n_q, frames])?
            .into_any();
        let lat = if latents {
            Some(
                PyArray1::from_vec(py, lat)
                    .reshape([streams, frames, dim])?
                    .into_any(),
            )
        } else {
            None
        };
        Ok((codes, lat))
    }

    /// Takes a free slot for a new stream, reset to the zero state: `(slot, generation)`.
    fn open_slot(&self, py: Python<'_>) -> PyResult<(usize, u64)> {
        self.slots.open_reset(py, |slot| {
            self.call(py, move |e| e.reset(slot))
                .and_then(|r| r.py_err())
        })
    }

    /// Returns a stream's slot to the pool.
    fn close_slot(&self, slot: usize, generation: u64) -> PyResult<()> {
        self.slots.close(slot, generation).py_err()
    }

    /// Returns an open stream to the zero state.
    fn reset(&self, py: Python<'_>, slot: usize, generation: u64) -> PyResult<()> {
        let table = self.slots.clone();
        self.call(py, move |e| {
            table.check(slot, generation)?;
            e.reset(slot)
        })?
        .py_err()
    }

    /// The next whole frames of one stream: float32 `[k * 1920]` samples in, codes `[n_q, k]`
    /// (int64) and, when `latents`, latents `[k, latent_dim]` out.
    #[pyo3(signature = (slot, generation, pcm, n_q, latents=false))]
    fn stream_encode<'py>(
        &self,
        py: Python<'py>,
        slot: usize,
        generation: u64,
        pcm: PyReadonlyArray1<'py, f32>,
        n_q: usize,
        latents: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>)> {
        const OP: &str = "Encoder.stream_encode";
        self.slots.check(slot, generation).py_err()?;
        self.check_n_q(OP, n_q)?;
        let data: Vec<f32> = pcm.as_array().iter().copied().collect();
        if !data.len().is_multiple_of(FRAME_SAMPLES) {
            return Err(Error::input(
                OP,
                format!(
                    "{} samples are not whole frames of {FRAME_SAMPLES}",
                    data.len()
                ),
            ))
            .py_err();
        }
        check_finite(OP, &data, data.len())?;
        let frames = data.len() / FRAME_SAMPLES;
        let dim = self.latent_dim;
        let job = EncodeJob {
            audio: Arc::new(data),
            samples: frames * FRAME_SAMPLES,
            rows: 0..1,
            slots: vec![slot],
            frames: 0..frames,
            n_q,
            latents,
            ends_signal: false,
        };
        let table = self.slots.clone();
        let chunk = self
            .call(py, move |e| {
                // Checked again in order with other jobs: a stream closed meanwhile is refused.
                table.check(slot, generation)?;
                job.run(e.as_mut())
            })?
            .py_err()?;
        // [frames, n_q] -> [n_q, frames].
        let mut codes = vec![0i64; n_q * frames];
        for t in 0..frames {
            for q in 0..n_q {
                codes[q * frames + t] = i64::from(chunk.codes[t * n_q + q]);
            }
        }
        let codes = PyArray1::from_vec(py, codes)
            .reshape([n_q, frames])?
            .into_any();
        let lat = if latents {
            Some(
                PyArray1::from_vec(py, chunk.latents)
                    .reshape([frames, dim])?
                    .into_any(),
            )
        } else {
            None
        };
        Ok((codes, lat))
    }

    #[getter]
    fn max_streams(&self) -> usize {
        self.max_slots
    }
    /// Streams open now.
    #[getter]
    fn open_streams(&self) -> usize {
        self.slots.streams()
    }
    #[getter]
    fn num_quantizers(&self) -> usize {
        self.max_codebooks
    }
    #[getter]
    fn codebook_size(&self) -> usize {
        self.codebook_size
    }
    #[getter]
    fn latent_dim(&self) -> usize {
        self.latent_dim
    }
    #[getter]
    fn frame_samples(&self) -> usize {
        FRAME_SAMPLES
    }
    #[getter]
    fn sample_rate(&self) -> usize {
        SAMPLE_RATE
    }
    #[getter]
    fn device(&self) -> &str {
        &self.describe
    }
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }
}

/// Refuses non-finite audio, naming the row (of `row_len` samples) and sample.
fn check_finite(op: &'static str, data: &[f32], row_len: usize) -> PyResult<()> {
    match data.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(at) => Err(Error::input(
            op,
            format!(
                "audio row {} sample {} is {} (audio must be finite)",
                at / row_len.max(1),
                at % row_len.max(1),
                data[at]
            ),
        ))
        .py_err(),
    }
}

impl PyEncoder {
    fn check_n_q(&self, op: &'static str, n_q: usize) -> PyResult<()> {
        if n_q == 0 || n_q > self.max_codebooks {
            return Err(Error::input(
                op,
                format!("n_q {n_q} is outside 1..={}", self.max_codebooks),
            ))
            .py_err();
        }
        Ok(())
    }

    /// Runs `f` on the encoder thread with the GIL released.
    fn call<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Enc) -> R + Send + 'static,
    ) -> PyResult<R> {
        py.detach(|| self.actor.call(f)).py_err()
    }
}
