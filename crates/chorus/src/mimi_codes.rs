//! Audio to Mimi codes frame by frame through Chorus's own streaming encoder, for the commands
//! that start from sound (a TTS context turn, a file to transcribe).

use anyhow::{bail, Context, Result};
use chorus_core::Buckets;
use chorus_mimi::checkpoint::LoadedModel;
use chorus_runtime::bulk::{AudioInput, EncodeBatch, SlotBatch};
use chorus_runtime::device::DeviceKind;
use chorus_runtime::{open_encoder, EncoderSpec};

/// `input` as `[T][n_q]` Mimi codes.
pub fn encode_frames(
    input: AudioInput,
    mimi: &LoadedModel,
    n_q: usize,
    device: DeviceKind,
) -> Result<Vec<Vec<u32>>> {
    let spec = EncoderSpec {
        device,
        precision: None,
        max_slots: 1,
        buckets: Buckets::new(&[1])?,
        threads: None,
        cuda_device: 0,
        chunk_frames: 1,
    };
    let mut enc = open_encoder(mimi, &spec)
        .with_context(|| format!("opening the Mimi encoder of `{}`", mimi.source))?;
    let mut batch = EncodeBatch::new(vec![0], n_q)?;
    batch.admit(0, input);
    loop {
        if let Some((_, file)) = batch.step(enc.as_mut())?.pop() {
            return Ok((0..file.frames)
                .map(|f| {
                    (0..n_q)
                        .map(|q| file.codes[q * file.frames + f] as u32)
                        .collect()
                })
                .collect());
        }
        if batch.is_empty() {
            bail!("no audio frames to encode");
        }
    }
}
