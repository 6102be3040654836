//! Device selection: builds a slot decoder on the CPU or CUDA backend.

use chorus_core::{Buckets, Error, FrameDecoder, Precision, Result};
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{DecoderOptions, SlotDecoder};

const OP_OPEN: &str = "open_decoder";
const OP_PARSE: &str = "DeviceKind::parse";
/// The CUDA device of a one-device decoder.
pub const DEFAULT_CUDA_DEVICE: usize = 0;
/// Refusal of bf16 on the CPU, shared by the decoder and the music stage.
pub const CPU_F32_ONLY: &str =
    "the CPU backend computes in f32 only; drop --precision bf16 or use --device cuda";

/// Where decoding runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum DeviceKind {
    /// CUDA when a usable GPU is present, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

impl DeviceKind {
    /// Parses `auto`, `cpu` or `cuda`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Self::Auto),
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda),
            other => Err(Error::input(
                OP_PARSE,
                format!("unknown device `{other}`: expected auto, cpu or cuda"),
            )),
        }
    }
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
    /// Frames per slot of a whole-sequence step (1: streaming only); see
    /// [`chorus_mimi::DecoderOptions::chunk_frames`].
    pub chunk_frames: usize,
}

/// Resolves `auto` to a concrete device.
pub fn resolve(kind: DeviceKind) -> DeviceKind {
    match kind {
        DeviceKind::Auto if chorus_cuda::cuda_available() => DeviceKind::Cuda,
        DeviceKind::Auto => DeviceKind::Cpu,
        k => k,
    }
}

/// Frames per whole-file decode step on `kind` (`auto` resolved).
pub fn whole_file_decode_chunk(kind: DeviceKind) -> usize {
    match resolve(kind) {
        DeviceKind::Cpu => chorus_core::CPU_WHOLE_FILE_DECODE_CHUNK,
        _ => chorus_core::WHOLE_FILE_DECODE_CHUNK,
    }
}

/// Frames per whole-file encode step on `kind` (`auto` resolved).
pub fn whole_file_encode_chunk(kind: DeviceKind) -> usize {
    match resolve(kind) {
        DeviceKind::Cpu => chorus_core::CPU_WHOLE_FILE_ENCODE_CHUNK,
        _ => chorus_core::WHOLE_FILE_ENCODE_CHUNK,
    }
}

/// Builds a decoder for `model` per `spec`, warmed up (CUDA graphs captured); CUDA uses device 0.
pub fn open_decoder(model: &LoadedModel, spec: &DecoderSpec) -> Result<Box<dyn FrameDecoder>> {
    open_decoder_on(model, spec, DEFAULT_CUDA_DEVICE)
}

/// Like [`open_decoder`], on CUDA device `cuda_device` when the spec resolves to CUDA (the
/// weights are uploaded from the one host copy, so several devices share one load from disk).
pub fn open_decoder_on(
    model: &LoadedModel,
    spec: &DecoderSpec,
    cuda_device: usize,
) -> Result<Box<dyn FrameDecoder>> {
    let opts = DecoderOptions {
        max_slots: spec.max_slots,
        buckets: spec.buckets.clone(),
        chunk_frames: spec.chunk_frames,
    };
    match resolve(spec.device) {
        DeviceKind::Cpu => {
            if spec.precision == Some(Precision::Bf16) {
                return Err(Error::config(OP_OPEN, CPU_F32_ONLY));
            }
            let be = CpuBackend::new(spec.threads)?;
            let mut d = SlotDecoder::from_weights(be, &model.config, &model.weights, opts)?;
            d.warmup()?;
            Ok(Box::new(d))
        }
        _ => {
            let be = chorus_cuda::CudaBackend::new(chorus_cuda::CudaOptions {
                device: cuda_device,
                ..cuda_options(spec)
            })?;
            let mut d = SlotDecoder::from_weights(be, &model.config, &model.weights, opts)?;
            d.warmup()?;
            Ok(Box::new(d))
        }
    }
}

/// CUDA options for a spec (bf16 unless asked otherwise), on device 0.
pub fn cuda_options(spec: &DecoderSpec) -> chorus_cuda::CudaOptions {
    chorus_cuda::CudaOptions {
        precision: spec.precision.unwrap_or(Precision::Bf16),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices_and_names_the_bad_one() {
        assert_eq!(DeviceKind::parse("cuda").unwrap(), DeviceKind::Cuda);
        assert_eq!(DeviceKind::parse("auto").unwrap(), DeviceKind::Auto);
        let e = DeviceKind::parse("tpu").unwrap_err().to_string();
        assert!(e.contains("`tpu`"), "{e}");
    }

    #[test]
    fn cpu_refuses_bf16() {
        let model = chorus_mimi::random::random_model(
            &chorus_mimi::MimiConfig::default(),
            chorus_mimi::random::RANDOM_MODEL_SEED,
        )
        .unwrap();
        let spec = DecoderSpec {
            device: DeviceKind::Cpu,
            precision: Some(Precision::Bf16),
            max_slots: 1,
            buckets: Buckets::new(&[1]).unwrap(),
            threads: Some(1),
            chunk_frames: 1,
        };
        let e = open_decoder(&model, &spec).err().unwrap().to_string();
        assert!(e.contains("f32 only"), "{e}");
    }
}
