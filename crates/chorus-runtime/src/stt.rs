//! Builds the Kyutai STT stream stage on the chosen device.

use chorus_core::{Error, Precision, Result};
use chorus_cpu::CpuBackend;
use chorus_cuda::{CudaBackend, CudaOptions};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_stt::{StreamEvent, StreamId, StreamRequest, SttModel, SttOptions, SttStage};

use crate::device::{resolve, DeviceKind, CPU_F32_ONLY};
use crate::music::{graph_nodes_of, replay_ms_of};

/// The stage on either backend.
pub enum AnyStt {
    Cpu(Box<SttStage<CpuBackend>>),
    Cuda(Box<SttStage<CudaBackend>>),
}

/// What to build.
pub struct SttSpec {
    pub device: DeviceKind,
    /// `None`: f32 on the CPU, bf16 on CUDA.
    pub precision: Option<Precision>,
    pub threads: Option<usize>,
    /// The CUDA device ordinal (on CUDA only).
    pub cuda_device: usize,
}

macro_rules! each {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            AnyStt::Cpu($s) => $e,
            AnyStt::Cuda($s) => $e,
        }
    };
}

impl AnyStt {
    /// Builds the stage (with `mimi`'s encoder inside the step: PCM in; without: Mimi codes in);
    /// on CUDA every bucket's step graph is captured before it returns.
    pub fn open(
        model: &SttModel,
        mimi: Option<&LoadedModel>,
        spec: &SttSpec,
        opts: SttOptions,
    ) -> Result<Self> {
        fn build<B: chorus_core::LmOps>(
            be: B,
            model: &SttModel,
            mimi: Option<&LoadedModel>,
            opts: SttOptions,
        ) -> Result<SttStage<B>> {
            match mimi {
                Some(m) => SttStage::with_encoder(be, model, m, opts),
                None => SttStage::new(be, model, opts),
            }
        }
        match resolve(spec.device) {
            DeviceKind::Cuda => {
                let be = CudaBackend::new(CudaOptions {
                    device: spec.cuda_device,
                    precision: spec.precision.unwrap_or(Precision::Bf16),
                    ..CudaOptions::default()
                })?;
                let mut st = build(be, model, mimi, opts)?;
                st.warmup()?;
                Ok(Self::Cuda(Box::new(st)))
            }
            _ => {
                if spec.precision == Some(Precision::Bf16) {
                    return Err(Error::config("AnyStt::open", CPU_F32_ONLY));
                }
                let be = CpuBackend::new(spec.threads)?;
                Ok(Self::Cpu(Box::new(build(be, model, mimi, opts)?)))
            }
        }
    }

    pub fn add(&mut self, req: StreamRequest) -> Result<StreamId> {
        each!(self, s => s.add(req))
    }

    pub fn push_frame(&mut self, id: StreamId, codes: &[u32]) -> Result<()> {
        each!(self, s => s.push_frame(id, codes))
    }

    /// 24 kHz mono samples, any number (a stage opened with Mimi).
    pub fn push_pcm(&mut self, id: StreamId, samples: &[f32]) -> Result<()> {
        each!(self, s => s.push_pcm(id, samples))
    }

    /// Samples stream `id` has pushed and the stage has not yet stepped.
    pub fn buffered_samples(&self, id: StreamId) -> Option<usize> {
        each!(self, s => s.buffered_samples(id))
    }

    pub fn end(&mut self, id: StreamId) -> Result<()> {
        each!(self, s => s.end(id))
    }

    pub fn step(&mut self, sink: &mut dyn FnMut(StreamEvent<'_>)) -> Result<usize> {
        each!(self, s => s.step(sink))
    }

    pub fn drain(&mut self, sink: &mut dyn FnMut(StreamEvent<'_>)) -> Result<()> {
        each!(self, s => s.drain(sink))
    }

    pub fn active(&self) -> usize {
        each!(self, s => s.active())
    }

    pub fn cancel(&mut self, id: StreamId) -> Result<usize> {
        each!(self, s => s.cancel(id))
    }

    /// CUDA only: nodes of the step graph of the bucket holding `n` streams.
    pub fn graph_nodes(&self, n: usize) -> Option<usize> {
        let AnyStt::Cuda(s) = self else { return None };
        graph_nodes_of(s.backend(), &s.bucket_keys(), n)
    }

    /// CUDA only: median device ms of `iters` back-to-back replays of the bucket holding `n`.
    pub fn device_ms(&self, n: usize, iters: usize) -> Result<Option<f64>> {
        let AnyStt::Cuda(s) = self else {
            return Ok(None);
        };
        replay_ms_of(s.backend(), &s.bucket_keys(), n, iters)
    }

    /// Silence frames to push before `end` so that the last words come out.
    pub fn flush_frames(&self) -> usize {
        each!(self, s => s.flush_frames())
    }

    /// The device, in words.
    pub fn describe(&self) -> String {
        use chorus_core::Backend;
        each!(self, s => s.backend().device_description())
    }

    /// Bytes of one stored weight (4 on the CPU, 2 in bf16).
    pub fn bytes_per_weight(&self) -> usize {
        use chorus_core::{Backend, BufRole};
        each!(self, s => s.backend().bytes_per_element(BufRole::Weight))
    }
}
