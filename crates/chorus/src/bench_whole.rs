//! `chorus bench --whole-file`: whole files through the long-chunk paths of the bulk data-set
//! commands (`EncodeBatch` with `whole_file_encode_chunk`-frame encode steps, `DecodeBatch` with
//! `whole_file_decode_chunk`-frame decode steps): B files of S seconds side by side, encoded and then
//! decoded from the zero state, best wall time of `--repeats` passes.

use crate::bench::BenchArgs;
use anyhow::{bail, Result};
use chorus_core::{Buckets, FRAME_SAMPLES};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_runtime::bulk::{AudioInput, DecodeBatch, DecodeInput, EncodeBatch, SlotBatch};
use chorus_runtime::device::{open_decoder, DecoderSpec, DeviceKind};
use chorus_runtime::{open_encoder, EncoderSpec};
use std::time::Instant;

/// Frames per second of Mimi (12.5 Hz).
const FRAME_RATE: f64 = 12.5;

/// One (op, batch, file length) cell.
#[derive(Debug, serde::Serialize)]
pub struct WholeRow {
    pub op: &'static str,
    pub device: String,
    pub batch: usize,
    pub seconds: f64,
    pub n_q: usize,
    /// Best wall time of one pass over the B files.
    pub ms_best: f64,
    pub frames_per_s: f64,
    /// Seconds of audio per second of wall time.
    pub realtime_factor: f64,
}

/// Runs every (batch, file length) cell, encode then decode.
pub fn run(
    model: &LoadedModel,
    device: DeviceKind,
    batches: &Buckets,
    args: &BenchArgs,
) -> Result<()> {
    let lengths = parse_seconds(&args.file_seconds)?;
    if !args.json {
        println!(
            "{:>7} {:>6} {:>8} {:>10} {:>12} {:>10}",
            "op", "batch", "seconds", "best ms", "frames/s", "x realtime"
        );
    }
    for &b in batches.sizes() {
        let enc_spec = EncoderSpec {
            device,
            precision: args.precision,
            max_slots: b,
            buckets: Buckets::new(&[b])?,
            threads: args.threads,
            cuda_device: 0,
            chunk_frames: args
                .chunk_frames
                .unwrap_or_else(|| chorus_runtime::whole_file_encode_chunk(device)),
        };
        let mut enc = open_encoder(model, &enc_spec)?;
        let dec_spec = DecoderSpec {
            device,
            precision: args.precision,
            max_slots: b,
            buckets: Buckets::new(&[b])?,
            threads: args.threads,
            chunk_frames: args
                .decode_chunk_frames
                .unwrap_or_else(|| chorus_runtime::whole_file_decode_chunk(device)),
        };
        let mut dec = open_decoder(model, &dec_spec)?;
        for &secs in &lengths {
            let frames = (secs * FRAME_RATE).round() as usize;
            let audio: Vec<AudioInput> = (0..b).map(|i| signal(i, frames)).collect();
            let mut codes = Vec::new();
            let enc_ms = best_of(args.repeats, || {
                let mut batch = EncodeBatch::new((0..b).collect(), args.n_q)?;
                for (i, a) in audio.iter().enumerate() {
                    batch.admit(i, a.clone());
                }
                let mut out = Vec::new();
                while !batch.is_empty() {
                    out.extend(batch.step(enc.as_mut())?);
                }
                codes = out;
                Ok(())
            })?;
            let row = cell(
                "encode",
                enc.describe(),
                (b, secs, frames),
                args.n_q,
                enc_ms,
            );
            print_row(&row, args.json)?;
            let inputs: Vec<DecodeInput> = codes
                .iter()
                .map(|(_, f)| {
                    let c: Vec<u32> = f.codes.iter().map(|&c| c as u32).collect();
                    DecodeInput {
                        n_q: f.n_q,
                        frames: f.frames,
                        codes: c,
                    }
                })
                .collect();
            let dec_ms = best_of(args.repeats, || {
                let mut batch = DecodeBatch::new((0..b).collect())?;
                for (i, d) in inputs.iter().enumerate() {
                    batch.admit(i, d.clone());
                }
                while !batch.is_empty() {
                    batch.step(dec.as_mut())?;
                }
                Ok(())
            })?;
            let row = cell(
                "decode",
                dec.describe(),
                (b, secs, frames),
                args.n_q,
                dec_ms,
            );
            print_row(&row, args.json)?;
        }
    }
    Ok(())
}

fn parse_seconds(list: &str) -> Result<Vec<f64>> {
    let v: Vec<f64> = list
        .split(',')
        .map(|s| s.trim().parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--file-seconds `{list}`: {e}"))?;
    if v.is_empty() || v.iter().any(|&s| !s.is_finite() || s * FRAME_RATE < 1.0) {
        bail!("--file-seconds `{list}`: each length must be at least one 80 ms frame");
    }
    Ok(v)
}

/// Best wall time in ms of `repeats` runs of `f` (at least one).
fn best_of(repeats: usize, mut f: impl FnMut() -> chorus_core::Result<()>) -> Result<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(best)
}

fn cell(
    op: &'static str,
    device: String,
    (batch, seconds, frames): (usize, f64, usize),
    n_q: usize,
    ms: f64,
) -> WholeRow {
    let frames_per_s = (batch * frames) as f64 * 1e3 / ms;
    WholeRow {
        op,
        device,
        batch,
        seconds,
        n_q,
        ms_best: ms,
        frames_per_s,
        realtime_factor: frames_per_s / FRAME_RATE,
    }
}

fn print_row(row: &WholeRow, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(row)?);
    } else {
        println!(
            "{:>7} {:>6} {:>8.1} {:>10.1} {:>12.1} {:>10.1}   [{}]",
            row.op,
            row.batch,
            row.seconds,
            row.ms_best,
            row.frames_per_s,
            row.realtime_factor,
            row.device
        );
    }
    Ok(())
}

/// File `i` of `frames` frames: tones and seeded noise, different per file.
fn signal(i: usize, frames: usize) -> AudioInput {
    let mut rng = 0x2545_f491_4f6c_dd1du64 ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let samples = (0..frames * FRAME_SAMPLES)
        .map(|n| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let noise = (rng >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            let t = n as f32 / 24_000.0;
            let f = 180.0 + 20.0 * i as f32;
            0.3 * (t * f * std::f32::consts::TAU).sin() + 0.05 * noise
        })
        .collect();
    AudioInput {
        samples,
        frames,
        seconds: frames as f64 / FRAME_RATE,
        truncated: None,
        format: "bench".into(),
        source_rate: 24_000,
        source_channels: 1,
    }
}
