//! `chorus bench --encode`: encoder frames per second and real-time streams per batch size, with
//! the same table and JSON rows as the decoder's bench.

use crate::bench::{time_steps, wall_row, BenchArgs, BenchRow, RowSource, TIMED_REPLAYS};
use anyhow::Result;
use chorus_core::{AudioFrame, Buckets, FrameEncoder, Precision, FRAME_MS, FRAME_SAMPLES};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{EncoderOptions, SlotEncoder};
use chorus_runtime::{open_encoder, DeviceKind, EncoderSpec};

/// Distinct audio frames cycled through.
const DISTINCT_FRAMES: usize = 16;

/// One batch size's encoder figures.
pub fn bench_batch(
    model: &LoadedModel,
    device: DeviceKind,
    batch: usize,
    args: &BenchArgs,
) -> Result<BenchRow> {
    let spec = EncoderSpec {
        device,
        precision: args.precision,
        max_slots: batch,
        buckets: Buckets::new(&[batch])?,
        threads: args.threads,
        cuda_device: 0,
        chunk_frames: 1,
    };
    if device != DeviceKind::Cuda {
        let mut enc = open_encoder(model, &spec)?;
        return measure(enc.as_mut(), batch, args);
    }
    let be = chorus_cuda::CudaBackend::new(chorus_cuda::CudaOptions {
        precision: args.precision.unwrap_or(Precision::Bf16),
        ..Default::default()
    })?;
    let opts = EncoderOptions {
        max_slots: batch,
        buckets: spec.buckets.clone(),
        chunk_frames: 1,
    };
    let mut enc = SlotEncoder::from_weights(be, &model.config, &model.weights, opts)?;
    enc.warmup()?;
    let mut row = measure(&mut enc, batch, args)?;
    let mut times = enc.backend().time_replay(0, TIMED_REPLAYS)?;
    times.sort_by(f32::total_cmp);
    let device_ms = times[times.len() / 2] as f64;
    row.device_ms_per_step_median = Some(device_ms);
    row.frames_per_s = batch as f64 * 1e3 / device_ms;
    row.realtime_streams = row.frames_per_s * FRAME_MS as f64 / 1e3;
    row.rtf = device_ms / FRAME_MS as f64;
    Ok(row)
}

/// A speech-band test signal: a few tones and seeded noise, different per frame.
fn signal() -> Vec<f32> {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    (0..DISTINCT_FRAMES * FRAME_SAMPLES)
        .map(|i| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let noise = (rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            let t = i as f32 / 24_000.0;
            0.3 * (t * 220.0 * std::f32::consts::TAU).sin()
                + 0.1 * (t * 1375.0 * std::f32::consts::TAU).sin()
                + 0.05 * noise
        })
        .collect()
}

fn measure(enc: &mut dyn FrameEncoder, batch: usize, args: &BenchArgs) -> Result<BenchRow> {
    let audio = signal();
    let nq = enc.max_codebooks();
    let mut codes = vec![0u32; batch * nq];
    let mut step = |i: usize, enc: &mut dyn FrameEncoder| -> Result<()> {
        let base = (i % DISTINCT_FRAMES) * FRAME_SAMPLES;
        let frames: Vec<AudioFrame<'_>> = (0..batch)
            .map(|s| AudioFrame {
                slot: s,
                pcm: &audio[base..base + FRAME_SAMPLES],
                n_q: args.n_q,
            })
            .collect();
        enc.step(&frames, &mut codes, None)?;
        Ok(())
    };
    let timed = time_steps(args.seconds, |i| step(i, enc))?;
    let describe = enc.describe();
    let precision = describe
        .split_whitespace()
        .nth(1)
        .unwrap_or("?")
        .to_string();
    let state_bytes = enc.state_bytes().total();
    Ok(wall_row(
        RowSource {
            describe,
            precision,
            n_q: args.n_q,
            state_bytes,
        },
        batch,
        timed,
    ))
}
