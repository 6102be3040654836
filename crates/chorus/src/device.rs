//! Device selection: builds a slot decoder on the CPU or CUDA backend.

use anyhow::{bail, Result};
use chorus_core::{Buckets, FrameDecoder, Precision};
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{DecoderOptions, SlotDecoder};

/// Where decoding runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceKind {
    /// CUDA when a usable GPU is present, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

/// What to build.
#[derive(Clone, Debug)]
pub struct DecoderSpec {
    pub device: DeviceKind,
    /// `None`: the backend's default (f32 on the CPU, bf16 on CUDA).
    pub precision: Option<Precision>,
    pub max_slots: usize,
    pub buckets: Buckets,
    /// CPU threads (`None`: every core).
    pub threads: Option<usize>,
}

/// Resolves `auto` to a concrete device.
pub fn resolve(kind: DeviceKind) -> DeviceKind {
    match kind {
        DeviceKind::Auto if chorus_cuda::cuda_available() => DeviceKind::Cuda,
        DeviceKind::Auto => DeviceKind::Cpu,
        k => k,
    }
}

/// Builds a decoder for `model` per `spec`, warmed up (CUDA graphs captured).
pub fn open_decoder(model: &LoadedModel, spec: &DecoderSpec) -> Result<Box<dyn FrameDecoder>> {
    let opts = DecoderOptions {
        max_slots: spec.max_slots,
        buckets: spec.buckets.clone(),
    };
    match resolve(spec.device) {
        DeviceKind::Cpu => {
            if spec.precision == Some(Precision::Bf16) {
                bail!("the CPU backend computes in f32 only; drop --precision bf16 or use --device cuda");
            }
            let be = CpuBackend::new(spec.threads)?;
            let mut d = SlotDecoder::from_weights(be, &model.config, &model.weights, opts)?;
            d.warmup()?;
            Ok(Box::new(d))
        }
        _ => {
            let be = chorus_cuda::CudaBackend::new(cuda_options(spec))?;
            let mut d = SlotDecoder::from_weights(be, &model.config, &model.weights, opts)?;
            d.warmup()?;
            Ok(Box::new(d))
        }
    }
}

/// CUDA options for a spec (bf16 unless asked otherwise).
pub fn cuda_options(spec: &DecoderSpec) -> chorus_cuda::CudaOptions {
    chorus_cuda::CudaOptions {
        precision: spec.precision.unwrap_or(Precision::Bf16),
        ..Default::default()
    }
}
