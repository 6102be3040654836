//! `chorus decode`: a codes file to WAV or `.npy`; a folder of them with `--codes-dir` (see
//! `dataset`).

use crate::audio_out::{write_streams, WavFormat};
use crate::codes_file::read_codes;
use crate::dataset::BulkOptions;
use anyhow::Result;
use chorus_core::codes::decode_streams;
use chorus_core::{Buckets, Precision};
use chorus_runtime::device::{open_decoder, DecoderSpec, DeviceKind};
use std::path::PathBuf;

/// Frames above which a progress bar is drawn.
const PROGRESS_MIN_FRAMES: usize = 64;

#[derive(clap::Args, Debug)]
pub struct DecodeArgs {
    /// Model: `kyutai/mimi` (HF repo id), a directory, a `.safetensors` file, or `random`.
    #[arg(long, default_value = "kyutai/mimi")]
    pub model: String,
    /// Codes: `.npy` integer array `[n_q, T]` or `[B, n_q, T]`, or `.safetensors`.
    #[arg(
        long,
        required_unless_present = "codes_dir",
        conflicts_with = "codes_dir",
        requires = "out"
    )]
    pub codes: Option<PathBuf>,
    /// Output: `.wav` (one file per stream) or `.npy` (float32 `[B, samples]`).
    #[arg(long, conflicts_with = "out_dir")]
    pub out: Option<PathBuf>,
    /// Decode every codes `.npy` (`[n_q, T]`) under this folder to WAV (needs --out-dir).
    #[arg(long, requires = "out_dir")]
    pub codes_dir: Option<PathBuf>,
    #[command(flatten)]
    pub bulk: BulkOptions,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
    /// `f32` or `bf16` (CUDA only).
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// Write 32-bit float WAV instead of 16-bit.
    #[arg(long)]
    pub float: bool,
}

pub fn parse_precision(s: &str) -> std::result::Result<Precision, String> {
    Precision::parse(s).map_err(|e| e.to_string())
}

pub fn run(args: DecodeArgs) -> Result<()> {
    let (Some(codes), Some(out)) = (&args.codes, &args.out) else {
        return crate::dataset::decode::run_decode(&args, &args.bulk);
    };
    let model = crate::load(&args.model)?;
    let batch = read_codes(
        codes,
        model.config.codebook_size,
        model.config.num_quantizers,
    )?;
    let spec = DecoderSpec {
        device: args.device,
        precision: args.precision,
        max_slots: batch.streams,
        buckets: Buckets::new(&[batch.streams])?,
        threads: None,
        chunk_frames: chorus_runtime::whole_file_decode_chunk(args.device),
    };
    let mut dec = open_decoder(&model, &spec)?;
    eprintln!(
        "decoding {} stream(s) x {} frames, n_q = {} on {}",
        batch.streams,
        batch.frames,
        batch.n_q,
        dec.describe()
    );
    let bar = progress(batch.frames);
    let streams = decode_streams(dec.as_mut(), &batch.streams(), || {
        if let Some(b) = &bar {
            b.inc(1);
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let format = if args.float {
        WavFormat::Float32
    } else {
        WavFormat::Pcm16
    };
    for p in write_streams(out, &streams, format)? {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

fn progress(frames: usize) -> Option<indicatif::ProgressBar> {
    if frames < PROGRESS_MIN_FRAMES {
        return None;
    }
    let bar = indicatif::ProgressBar::new(frames as u64);
    let style =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} frames {per_sec} eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    Some(bar)
}
