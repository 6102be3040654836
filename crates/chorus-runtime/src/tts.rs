//! Builds the CSM speech stage on the chosen device.

use chorus_core::{Error, Precision, Result};
use chorus_cpu::CpuBackend;
use chorus_csm::{CsmModel, TtsOptions, TtsStage, UtteranceEvent, UtteranceId, UtteranceRequest};
use chorus_cuda::{CudaBackend, CudaOptions};
use chorus_mimi::checkpoint::LoadedModel;

use crate::device::{resolve, DeviceKind, CPU_F32_ONLY};
use crate::music::{graph_nodes_of, replay_ms_of};

/// The stage on either backend.
pub enum AnyTts {
    Cpu(Box<TtsStage<CpuBackend>>),
    Cuda(Box<TtsStage<CudaBackend>>),
}

/// What to build.
pub struct TtsSpec {
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
            AnyTts::Cpu($s) => $e,
            AnyTts::Cuda($s) => $e,
        }
    };
}

impl AnyTts {
    /// Builds the stage, with `mimi` decoding every frame's audio in the frame (`None`: codes
    /// only); on CUDA every bucket's frame graph is captured before it returns.
    pub fn open(
        model: &CsmModel,
        mimi: Option<&LoadedModel>,
        spec: &TtsSpec,
        opts: TtsOptions,
    ) -> Result<Self> {
        match resolve(spec.device) {
            DeviceKind::Cuda => {
                let be = CudaBackend::new(CudaOptions {
                    device: spec.cuda_device,
                    precision: spec.precision.unwrap_or(Precision::Bf16),
                    ..CudaOptions::default()
                })?;
                let mut st = TtsStage::new(be, model, mimi, opts)?;
                st.warmup()?;
                Ok(Self::Cuda(Box::new(st)))
            }
            _ => {
                if spec.precision == Some(Precision::Bf16) {
                    return Err(Error::config("AnyTts::open", CPU_F32_ONLY));
                }
                let be = CpuBackend::new(spec.threads)?;
                Ok(Self::Cpu(Box::new(TtsStage::new(be, model, mimi, opts)?)))
            }
        }
    }

    pub fn add(&mut self, req: UtteranceRequest) -> Result<UtteranceId> {
        each!(self, s => s.add(req))
    }

    /// See [`TtsStage::add_prefilled`].
    pub fn add_prefilled(&mut self, req: UtteranceRequest) -> Result<UtteranceId> {
        each!(self, s => s.add_prefilled(req))
    }

    /// Utterances whose prompt is still being prefilled in chunks.
    pub fn joining(&self) -> usize {
        each!(self, s => s.joining())
    }

    pub fn step(&mut self, sink: &mut dyn FnMut(UtteranceEvent<'_>)) -> Result<usize> {
        each!(self, s => s.step(sink))
    }

    pub fn cancel(&mut self, id: UtteranceId) -> Result<usize> {
        each!(self, s => s.cancel(id))
    }

    pub fn active(&self) -> usize {
        each!(self, s => s.active())
    }

    /// Bytes of one stored weight (4 on the CPU, 2 in bf16).
    pub fn bytes_per_weight(&self) -> usize {
        use chorus_core::{Backend, BufRole};
        each!(self, s => s.backend().bytes_per_element(BufRole::Weight))
    }

    /// The device, in words.
    pub fn describe(&self) -> String {
        use chorus_core::Backend;
        each!(self, s => s.backend().device_description())
    }

    /// CUDA only: nodes of the frame graph of the bucket holding `n` utterances.
    pub fn graph_nodes(&self, n: usize) -> Option<usize> {
        let AnyTts::Cuda(s) = self else { return None };
        graph_nodes_of(s.backend(), &s.bucket_keys(), n)
    }

    /// CUDA only: median device ms of `iters` back-to-back replays of the bucket holding `n`.
    pub fn device_ms(&self, n: usize, iters: usize) -> Result<Option<f64>> {
        let AnyTts::Cuda(s) = self else {
            return Ok(None);
        };
        replay_ms_of(s.backend(), &s.bucket_keys(), n, iters)
    }

    /// CUDA only: like [`AnyTts::device_ms`], of the frame graph that also prefills a prompt
    /// chunk (the frame the running utterances see while one joins).
    pub fn device_ms_joining(&self, n: usize, iters: usize) -> Result<Option<f64>> {
        let AnyTts::Cuda(s) = self else {
            return Ok(None);
        };
        replay_ms_of(s.backend(), &s.chunk_bucket_keys(), n, iters)
    }
}
