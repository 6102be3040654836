//! `chorus._chorus.Decoder`: the Mimi slot decoder behind an owner thread.
//!
//! Streams are slots leased from a pool; a whole-sequence decode leases the free slots for the
//! time it runs. Every call validates its input on the calling thread, then hands one job to the
//! decoder thread with the GIL released; long decodes go in chunks so Ctrl-C is seen between them.

use std::sync::Arc;

use chorus_core::codes::CodesBatch;
use chorus_core::{
    Buckets, Frame, FrameDecoder, HostTensor, Precision, DEFAULT_BUCKETS, FRAME_SAMPLES,
    WHOLE_FILE_DECODE_CHUNK,
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
use crate::frames::{decode_block, read_block, read_frame, ChunkJob, Limits};
use crate::slots::SlotTable;

/// Frames decoded per job of a whole-sequence decode (whole long-chunk steps on every device):
/// Ctrl-C is checked between jobs.
const DECODE_CHUNK_FRAMES: usize = 2 * WHOLE_FILE_DECODE_CHUNK;
/// Output sample rate of Mimi.
pub const SAMPLE_RATE: usize = 24_000;

type Dec = Box<dyn FrameDecoder>;

/// What Python reads off a decoder without a round trip to its thread.
struct Info {
    max_slots: usize,
    largest_batch: usize,
    /// What frames must respect.
    limits: Limits,
    describe: String,
    source: String,
    random: bool,
}

/// The Mimi slot decoder.
#[pyclass(module = "chorus._chorus", name = "Decoder", frozen)]
pub struct PyDecoder {
    actor: Actor<Dec>,
    slots: Arc<SlotTable>,
    info: Info,
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
            chunk_frames: chorus_runtime::whole_file_decode_chunk(args.device),
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
            slots: Arc::new(SlotTable::new(max_slots, "Decoder.slots")),
            info: Info {
                max_slots,
                largest_batch,
                limits: Limits {
                    codebook_size,
                    max_codebooks,
                    latent_dim,
                },
                describe,
                source,
                random,
            },
        })
    }
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
            self.info.limits.codebook_size,
            self.info.limits.max_codebooks,
        )
        .py_err()?;
        let want = batch.streams.min(self.info.largest_batch);
        let table = self.slots.clone();
        let lease = py.detach(|| table.lease(want)).py_err()?;
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

    /// Takes a free slot for a new stream, reset to the zero state: `(slot, generation)`.
    fn open_slot(&self, py: Python<'_>) -> PyResult<(usize, u64)> {
        self.slots.open_reset(py, |slot| {
            self.call(py, move |d| d.reset(slot))
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
        self.call(py, move |d| {
            table.check(slot, generation)?;
            d.reset(slot)
        })?
        .py_err()
    }

    /// One step over several open streams: `frames` is `[(slot, generation, codes int64 [n_q]
    /// or latent float32 [latent_dim])]`; returns PCM `[len(frames), 1920]`.
    fn step<'py>(
        &self,
        py: Python<'py>,
        frames: Vec<(usize, u64, Bound<'py, PyAny>)>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let mut inputs = Vec::with_capacity(frames.len());
        for (row, (slot, generation, value)) in frames.iter().enumerate() {
            self.slots.check(*slot, *generation).py_err()?;
            let input = read_frame(row, value, self.info.limits).py_err()?;
            inputs.push((*slot, *generation, input));
        }
        let n = inputs.len();
        let table = self.slots.clone();
        let pcm = self
            .call(py, move |d| {
                // Checked again in order with other jobs: a stream closed meanwhile is refused.
                for (slot, generation, _) in &inputs {
                    table.check(*slot, *generation)?;
                }
                let frames: Vec<Frame<'_>> = inputs
                    .iter()
                    .map(|(slot, _, i)| i.as_frame(*slot))
                    .collect();
                let mut pcm = vec![0f32; frames.len() * FRAME_SAMPLES];
                d.step(&frames, &mut pcm).map(|()| pcm)
            })?
            .py_err()?;
        PyArray1::from_vec(py, pcm).reshape([n, FRAME_SAMPLES])
    }

    /// The next frames of one stream in one call: codes `[n_q]` / `[n_q, k]` (int64) or latents
    /// `[latent_dim]` / `[latent_dim, k]` (float32), all checked before any is decoded; returns
    /// `k * 1920` samples.
    fn stream_decode<'py>(
        &self,
        py: Python<'py>,
        slot: usize,
        generation: u64,
        block: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        self.slots.check(slot, generation).py_err()?;
        let block = read_block(block, self.info.limits).py_err()?;
        let table = self.slots.clone();
        let pcm = self
            .call(py, move |d| {
                table.check(slot, generation)?;
                decode_block(d.as_mut(), slot, &block)
            })?
            .py_err()?;
        Ok(PyArray1::from_vec(py, pcm))
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
        self.info.limits.codebook_size
    }
    #[getter]
    fn num_quantizers(&self) -> usize {
        self.info.limits.max_codebooks
    }
    #[getter]
    fn latent_dim(&self) -> usize {
        self.info.limits.latent_dim
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
        self.slots.streams()
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
}
