//! Builds a warmed-up Mimi slot encoder on the CPU or CUDA backend.

use chorus_core::{Buckets, Error, FrameEncoder, Precision, Result};
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{EncoderOptions, SlotEncoder};

use crate::device::{resolve, DeviceKind, CPU_F32_ONLY};

const OP_OPEN: &str = "open_encoder";

/// What to build.
#[derive(Clone, Debug)]
pub struct EncoderSpec {
    pub device: DeviceKind,
    /// `None`: the backend's default (f32 on the CPU, bf16 on CUDA).
    pub precision: Option<Precision>,
    pub max_slots: usize,
    pub buckets: Buckets,
    /// CPU threads (`None`: every core).
    pub threads: Option<usize>,
    /// The CUDA device when the spec resolves to CUDA.
    pub cuda_device: usize,
    /// Frames per slot of a whole-file step (1: streaming only); see
    /// [`chorus_mimi::EncoderOptions::chunk_frames`].
    pub chunk_frames: usize,
}

/// Builds an encoder for `model` per `spec`, warmed up (CUDA graphs captured). A checkpoint
/// without the encoder side is a clear error.
pub fn open_encoder(
    model: &LoadedModel,
    spec: &EncoderSpec,
) -> Result<Box<dyn FrameEncoder + Send>> {
    chorus_mimi::encoder::prepare::encoder_of(&model.weights)?;
    let opts = EncoderOptions {
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
            let mut e = SlotEncoder::from_weights(be, &model.config, &model.weights, opts)?;
            e.warmup()?;
            Ok(Box::new(e))
        }
        _ => {
            let be = chorus_cuda::CudaBackend::new(chorus_cuda::CudaOptions {
                device: spec.cuda_device,
                precision: spec.precision.unwrap_or(Precision::Bf16),
                ..Default::default()
            })?;
            let mut e = SlotEncoder::from_weights(be, &model.config, &model.weights, opts)?;
            e.warmup()?;
            Ok(Box::new(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_encoder_opens_and_refuses_bf16() {
        let model = chorus_mimi::random::random_model(
            &chorus_mimi::random::small_config(),
            chorus_mimi::random::RANDOM_MODEL_SEED,
        )
        .unwrap();
        let mut spec = EncoderSpec {
            device: DeviceKind::Cpu,
            precision: None,
            max_slots: 2,
            buckets: Buckets::new(&[1, 2]).unwrap(),
            threads: Some(1),
            cuda_device: 0,
            chunk_frames: 1,
        };
        let enc = open_encoder(&model, &spec).unwrap();
        assert_eq!(enc.max_slots(), 2);
        spec.precision = Some(Precision::Bf16);
        let e = open_encoder(&model, &spec).err().unwrap().to_string();
        assert!(e.contains("f32 only"), "{e}");
    }
}
