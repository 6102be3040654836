//! `chorus._chorus.Decoder`: the Mimi slot decoder behind an owner thread.
//!
//! Streams are slots leased from a pool; a whole-sequence decode leases the free slots for the
//! time it runs. Every call validates its input on the calling thread, then hands one job to the
//! decoder thread with the GIL released; long decodes go in chunks so Ctrl-C is seen between them.

use std::sync::{Arc, Mutex, MutexGuard};

use chorus_core::codes::CodesBatch;
use chorus_core::{
    Buckets, Error, Frame, FrameDecoder, FrameInput, HostTensor, Precision, DEFAULT_BUCKETS,
    FRAME_SAMPLES, WHOLE_SEQUENCE_CHUNK,
};
use chorus_mimi::checkpoint::source::MemorySource;
use chorus_mimi::checkpoint::{load_model, load_source, LoadedModel};
use chorus_mimi::MimiConfig;
use chorus_runtime::{open_decoder, DecoderSpec, DeviceKind};
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::actor::Actor;
use crate::errors::IntoPy;

/// Frames decoded per job of a whole-sequence decode: Ctrl-C is checked between jobs.
const DECODE_CHUNK_FRAMES: usize = 64;
/// Output sample rate of Mimi.
pub const SAMPLE_RATE: usize = 24_000;

const OP_STEP: &str = "Decoder.step";
const OP_DECODE: &str = "Decoder.decode";
const OP_SLOTS: &str = "Decoder.slots";

type Dec = Box<dyn FrameDecoder>;

/// What Python reads off a decoder without a round trip to its thread.
struct Info {
    max_slots: usize,
    largest_batch: usize,
    codebook_size: usize,
    max_codebooks: usize,
    latent_dim: usize,
    describe: String,
    source: String,
    random: bool,
}

/// The Mimi slot decoder.
#[pyclass(module = "chorus._chorus", name = "Decoder", frozen)]
pub struct PyDecoder {
    actor: Actor<Dec>,
    /// `true` for slots held by an open stream or a running decode.
    held: Mutex<Vec<bool>>,
    info: Info,
}

/// Slots leased by a whole-sequence decode, returned however it ends.
struct Lease<'a> {
    held: &'a Mutex<Vec<bool>>,
    slots: Vec<usize>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut held = lock(self.held);
        for &s in &self.slots {
            held[s] = false;
        }
    }
}

fn lock(m: &Mutex<Vec<bool>>) -> MutexGuard<'_, Vec<bool>> {
    // A panic while holding this lock cannot leave the flags half-written: recover them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct OpenArgs {
    device: DeviceKind,
    precision: Option<Precision>,
    max_streams: usize,
    threads: Option<usize>,
}

impl OpenArgs {
    fn parse(
        device: &str,
        precision: Option<&str>,
        max_streams: usize,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        Ok(Self {
            device: DeviceKind::parse(device).py_err()?,
            precision: precision.map(Precision::parse).transpose().py_err()?,
            max_streams,
            threads,
        })
    }
}

impl PyDecoder {
    fn open(py: Python<'_>, model: LoadedModel, args: OpenArgs) -> PyResult<Self> {
        let spec = DecoderSpec {
            device: args.device,
            precision: args.precision,
            max_slots: args.max_streams,
            buckets: Buckets::new(DEFAULT_BUCKETS)
                .and_then(|b| b.capped(args.max_streams.max(1)))
                .py_err()?,
            threads: args.threads,
            chunk_frames: WHOLE_SEQUENCE_CHUNK,
        };
        let source = model.source.clone();
        let random = model.is_random();
        let (actor, info) = py
            .detach(move || -> chorus_core::Result<_> {
                let actor = Actor::spawn("chorus-mimi", move || open_decoder(&model, &spec))?;
                let info = actor.call(|d: &mut Dec| {
                    (
                        d.max_slots(),
                        d.largest_batch(),
                        d.codebook_size(),
                        d.max_codebooks(),
                        d.latent_dim(),
                        d.describe(),
                    )
                })?;
                Ok((actor, info))
            })
            .py_err()?;
        let (max_slots, largest_batch, codebook_size, max_codebooks, latent_dim, describe) = info;
        Ok(Self {
            actor,
            held: Mutex::new(vec![false; max_slots]),
            info: Info {
                max_slots,
                largest_batch,
                codebook_size,
                max_codebooks,
                latent_dim,
                describe,
                source,
                random,
            },
        })
    }

    fn check_open(&self, slot: usize) -> PyResult<()> {
        match lock(&self.held).get(slot) {
            Some(true) => Ok(()),
            _ => Err(Error::input(
                OP_SLOTS,
                format!("slot {slot} is not an open stream"),
            ))
            .py_err(),
        }
    }
}

/// One frame of one stream, copied out of Python.
enum Input {
    Codes(Vec<u32>),
    Latent(Vec<f32>),
}

#[pymethods]
impl PyDecoder {
    /// Loads `model` (`kyutai/mimi`, a path, or `random`) and builds the decoder on `device`.
    #[new]
    #[pyo3(signature = (model="kyutai/mimi", device="auto", precision=None, max_streams=64, threads=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        device: &str,
        precision: Option<&str>,
        max_streams: usize,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let args = OpenArgs::parse(device, precision, max_streams, threads)?;
        let spec = model.to_owned();
        let loaded = py.detach(move || load_model(&spec)).py_err()?;
        Self::open(py, loaded, args)
    }

    /// Builds a decoder from in-memory float32 tensors (either checkpoint layout) and an HF
    /// `config.json` text.
    #[staticmethod]
    #[pyo3(signature = (config_json, tensors, source, device="auto", precision=None, max_streams=64, threads=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments, mirrored one to one.
    fn from_tensors(
        py: Python<'_>,
        config_json: &str,
        tensors: &Bound<'_, PyDict>,
        source: &str,
        device: &str,
        precision: Option<&str>,
        max_streams: usize,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let args = OpenArgs::parse(device, precision, max_streams, threads)?;
        let config = MimiConfig::from_json(config_json, source).py_err()?;
        let mut host = Vec::with_capacity(tensors.len());
        for (name, value) in tensors.iter() {
            let name: String = name.extract()?;
            let arr: PyReadonlyArrayDyn<'_, f32> = value.extract().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "tensor `{name}` must be a float32 numpy array"
                ))
            })?;
            let shape = arr.shape().to_vec();
            let data = arr.as_array().iter().copied().collect();
            host.push((name.clone(), HostTensor::new(shape, data).py_err()?));
        }
        let src = MemorySource::new(source, host);
        let source = source.to_owned();
        let loaded = py
            .detach(move || load_source(src, config, source))
            .py_err()?;
        Self::open(py, loaded, args)
    }

    /// Decodes whole sequences `[B, n_q, T]` into float32 PCM `[B, T * 1920]`.
    fn decode<'py>(
        &self,
        py: Python<'py>,
        codes: PyReadonlyArrayDyn<'py, i64>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let shape = codes.shape().to_vec();
        let values: Vec<i64> = codes.as_array().iter().copied().collect();
        let batch = CodesBatch::from_array(
            "codes",
            &shape,
            &values,
            self.info.codebook_size,
            self.info.max_codebooks,
        )
        .py_err()?;
        let lease = self.lease(batch.streams)?;
        let batch = Arc::new(batch);
        let (streams, frames) = (batch.streams, batch.frames);
        let mut out = vec![0f32; streams * frames * FRAME_SAMPLES];
        for first in (0..streams).step_by(lease.slots.len()) {
            let group: Vec<usize> = (first..streams.min(first + lease.slots.len())).collect();
            let slots = lease.slots[..group.len()].to_vec();
            let reset = slots.clone();
            self.call(py, move |d| reset.iter().try_for_each(|&s| d.reset(s)))?
                .py_err()?;
            for t0 in (0..frames).step_by(DECODE_CHUNK_FRAMES) {
                let t1 = frames.min(t0 + DECODE_CHUNK_FRAMES);
                let job = ChunkJob {
                    batch: batch.clone(),
                    group: group.clone(),
                    slots: slots.clone(),
                    frames: t0..t1,
                };
                let pcm = self.call(py, move |d| job.run(d.as_mut()))?.py_err()?;
                for (i, &s) in group.iter().enumerate() {
                    let rows =
                        &pcm[i * (t1 - t0) * FRAME_SAMPLES..(i + 1) * (t1 - t0) * FRAME_SAMPLES];
                    let base = s * frames * FRAME_SAMPLES + t0 * FRAME_SAMPLES;
                    out[base..base + rows.len()].copy_from_slice(rows);
                }
                py.check_signals()?;
            }
        }
        drop(lease);
        PyArray1::from_vec(py, out).reshape([streams, frames * FRAME_SAMPLES])
    }

    /// Takes a free slot for a new stream, reset to the zero state.
    fn open_slot(&self, py: Python<'_>) -> PyResult<usize> {
        let slot = {
            let mut held = lock(&self.held);
            let Some(slot) = held.iter().position(|h| !h) else {
                return Err(Error::input(
                    OP_SLOTS,
                    format!(
                        "all {} streams are open; close one or raise max_streams",
                        held.len()
                    ),
                ))
                .py_err();
            };
            held[slot] = true;
            slot
        };
        if let Err(e) = self
            .call(py, move |d| d.reset(slot))
            .and_then(|r| r.py_err())
        {
            lock(&self.held)[slot] = false;
            return Err(e);
        }
        Ok(slot)
    }

    /// Returns a stream's slot to the pool.
    fn close_slot(&self, slot: usize) -> PyResult<()> {
        self.check_open(slot)?;
        lock(&self.held)[slot] = false;
        Ok(())
    }

    /// Returns an open stream to the zero state.
    fn reset(&self, py: Python<'_>, slot: usize) -> PyResult<()> {
        self.check_open(slot)?;
        self.call(py, move |d| d.reset(slot))?.py_err()
    }

    /// One step over several open streams: `frames` is `[(slot, codes int64 [n_q] or latent
    /// float32 [latent_dim])]`; returns PCM `[len(frames), 1920]`.
    fn step<'py>(
        &self,
        py: Python<'py>,
        frames: Vec<(usize, Bound<'py, PyAny>)>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let mut inputs = Vec::with_capacity(frames.len());
        for (row, (slot, value)) in frames.iter().enumerate() {
            self.check_open(*slot)?;
            inputs.push((*slot, self.read_input(row, value)?));
        }
        let n = inputs.len();
        let pcm = self
            .call(py, move |d| {
                let frames: Vec<Frame<'_>> = inputs
                    .iter()
                    .map(|(slot, input)| Frame {
                        slot: *slot,
                        input: match input {
                            Input::Codes(c) => FrameInput::Codes(c),
                            Input::Latent(l) => FrameInput::Latent(l),
                        },
                    })
                    .collect();
                let mut pcm = vec![0f32; frames.len() * FRAME_SAMPLES];
                d.step(&frames, &mut pcm).map(|()| pcm)
            })?
            .py_err()?;
        PyArray1::from_vec(py, pcm).reshape([n, FRAME_SAMPLES])
    }

    #[getter]
    fn max_streams(&self) -> usize {
        self.info.max_slots
    }
    #[getter]
    fn largest_batch(&self) -> usize {
        self.info.largest_batch
    }
    #[getter]
    fn codebook_size(&self) -> usize {
        self.info.codebook_size
    }
    #[getter]
    fn num_quantizers(&self) -> usize {
        self.info.max_codebooks
    }
    #[getter]
    fn latent_dim(&self) -> usize {
        self.info.latent_dim
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
        &self.info.describe
    }
    #[getter]
    fn source(&self) -> &str {
        &self.info.source
    }
    #[getter]
    fn is_random(&self) -> bool {
        self.info.random
    }
    /// Streams open now.
    #[getter]
    fn open_streams(&self) -> usize {
        lock(&self.held).iter().filter(|&&h| h).count()
    }
}

impl PyDecoder {
    /// Runs `f` on the decoder thread with the GIL released.
    fn call<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Dec) -> R + Send + 'static,
    ) -> PyResult<R> {
        py.detach(|| self.actor.call(f)).py_err()
    }

    /// Leases up to `want` free slots (at least one), at most one batch.
    fn lease(&self, want: usize) -> PyResult<Lease<'_>> {
        let mut held = lock(&self.held);
        let cap = want.min(self.info.largest_batch);
        let slots: Vec<usize> = (0..held.len()).filter(|&s| !held[s]).take(cap).collect();
        if slots.is_empty() {
            return Err(Error::input(
                OP_DECODE,
                format!(
                    "all {} slots are held by open streams; close a stream or raise max_streams",
                    held.len()
                ),
            ))
            .py_err();
        }
        for &s in &slots {
            held[s] = true;
        }
        Ok(Lease {
            held: &self.held,
            slots,
        })
    }

    fn read_input(&self, row: usize, value: &Bound<'_, PyAny>) -> PyResult<Input> {
        if let Ok(a) = value.extract::<PyReadonlyArrayDyn<'_, i64>>() {
            if a.ndim() != 1 {
                return Err(Error::input(
                    OP_STEP,
                    format!(
                        "frame {row}: codes have shape {:?}, expected [n_q]",
                        a.shape()
                    ),
                ))
                .py_err();
            }
            let mut codes = Vec::with_capacity(a.len());
            for (q, &c) in a.as_array().iter().enumerate() {
                if c < 0 || c as u64 >= self.info.codebook_size as u64 {
                    return Err(Error::CodeOutOfRange {
                        op: OP_STEP,
                        row,
                        codebook: q,
                        code: c,
                        cardinality: self.info.codebook_size,
                    })
                    .py_err();
                }
                codes.push(c as u32);
            }
            return Ok(Input::Codes(codes));
        }
        if let Ok(a) = value.extract::<PyReadonlyArrayDyn<'_, f32>>() {
            if a.shape() != [self.info.latent_dim] {
                return Err(Error::input(
                    OP_STEP,
                    format!(
                        "frame {row}: latent has shape {:?}, expected [{}]",
                        a.shape(),
                        self.info.latent_dim
                    ),
                ))
                .py_err();
            }
            return Ok(Input::Latent(a.as_array().iter().copied().collect()));
        }
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "frame {row}: expected an int64 codes array or a float32 latent array"
        )))
    }
}

/// Frames `frames` of the streams `group`, stream `group[i]` in `slots[i]`.
struct ChunkJob {
    batch: Arc<CodesBatch>,
    group: Vec<usize>,
    slots: Vec<usize>,
    frames: std::ops::Range<usize>,
}

impl ChunkJob {
    /// PCM `[group, frames, 1920]`: whole chunks of the decoder's `chunk_frames` per step, the
    /// rest frame by frame.
    fn run(&self, d: &mut dyn FrameDecoder) -> chorus_core::Result<Vec<f32>> {
        let (g, len, n_q) = (self.group.len(), self.frames.len(), self.batch.n_q);
        let k = d.chunk_frames();
        let mut out = vec![0f32; g * len * FRAME_SAMPLES];
        let mut frame = Vec::with_capacity(n_q);
        let mut done = 0;
        if k > 1 {
            let mut codes = vec![0u32; g * k * n_q];
            let mut pcm = vec![0f32; g * k * FRAME_SAMPLES];
            while done + k <= len {
                for (i, &s) in self.group.iter().enumerate() {
                    for f in 0..k {
                        self.batch
                            .frame(s, self.frames.start + done + f, &mut frame);
                        codes[(i * k + f) * n_q..(i * k + f + 1) * n_q].copy_from_slice(&frame);
                    }
                }
                d.step_chunk(&self.slots, &codes, n_q, &mut pcm)?;
                for i in 0..g {
                    let dst = (i * len + done) * FRAME_SAMPLES;
                    let src = &pcm[i * k * FRAME_SAMPLES..(i + 1) * k * FRAME_SAMPLES];
                    out[dst..dst + src.len()].copy_from_slice(src);
                }
                done += k;
            }
        }
        let mut pcm = vec![0f32; g * FRAME_SAMPLES];
        let mut codes: Vec<Vec<u32>> = vec![Vec::with_capacity(n_q); g];
        for f in done..len {
            let t = self.frames.start + f;
            for (c, &s) in codes.iter_mut().zip(&self.group) {
                self.batch.frame(s, t, c);
            }
            let frames: Vec<Frame<'_>> = codes
                .iter()
                .zip(&self.slots)
                .map(|(c, &slot)| Frame {
                    slot,
                    input: FrameInput::Codes(c),
                })
                .collect();
            d.step(&frames, &mut pcm)?;
            for i in 0..g {
                let dst = (i * len + f) * FRAME_SAMPLES;
                out[dst..dst + FRAME_SAMPLES]
                    .copy_from_slice(&pcm[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES]);
            }
        }
        Ok(out)
    }
}
