//! Builds the music semantic stage on the chosen device.

use anyhow::{bail, Result};
use chorus_cpu::CpuBackend;
use chorus_music::{MusicModel, SemanticStage, StageOptions};

use crate::device::{resolve, DeviceKind};

/// A stage for `songs` songs of up to `max_context` positions each. The music stage runs on the
/// CPU backend; its CUDA ops are not written yet, and asking for them is a clear error.
pub fn open_stage(
    model: &MusicModel,
    device: DeviceKind,
    songs: usize,
    max_context: usize,
    threads: Option<usize>,
) -> Result<SemanticStage<CpuBackend>> {
    if resolve(device) == DeviceKind::Cuda {
        bail!("the music semantic stage runs on the CPU backend only so far (--device cpu); its CUDA ops are not implemented yet");
    }
    let opts = StageOptions::for_songs(songs, max_context)?;
    Ok(SemanticStage::new(CpuBackend::new(threads)?, model, opts)?)
}
