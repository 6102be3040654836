//! `chorus encode`: an audio file (WAV, FLAC, MP3, Ogg Vorbis or Ogg Opus, any rate and channel
//! count) to Mimi codes `[n_q, T]` in `.npy`, frame by frame through the streaming encoder; a
//! whole folder or list of files with `--audio-dir`/`--list` (see `dataset`).

use crate::dataset::BulkOptions;
use crate::decode::parse_precision;
use anyhow::{bail, Context, Result};
use chorus_core::{AudioFrame, Buckets, Precision, FRAME_SAMPLES};
use chorus_runtime::bulk::{read_audio_input, AudioInput};
use chorus_runtime::{open_encoder, DeviceKind, EncoderSpec};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

/// Frames above which a progress bar is drawn.
const PROGRESS_MIN_FRAMES: usize = 64;
/// Source bytes above which decoding the file draws a progress bar.
const PROGRESS_MIN_BYTES: u64 = 4 << 20;
/// The one stream a file is encoded as.
const SLOT: usize = 0;

#[derive(clap::Args, Debug)]
pub struct EncodeArgs {
    /// Model: `kyutai/mimi` (HF repo id), a directory, a `.safetensors` file, or `random`.
    #[arg(long, default_value = "kyutai/mimi")]
    pub model: String,
    /// Audio: WAV, FLAC, MP3, Ogg Vorbis or Ogg Opus; any sample rate (resampled to 24 kHz),
    /// several channels mixed to mono.
    #[arg(long, required_unless_present_any = ["audio_dir", "list"], conflicts_with_all = ["audio_dir", "list"], requires = "out")]
    pub audio: Option<PathBuf>,
    /// Output codes: `.npy` int64 `[n_q, T]` (what `chorus decode --codes` reads).
    #[arg(long, conflicts_with = "out_dir")]
    pub out: Option<PathBuf>,
    /// Encode every audio file under this folder (needs --out-dir).
    #[arg(long, conflicts_with = "list", requires = "out_dir")]
    pub audio_dir: Option<PathBuf>,
    /// Encode the audio files listed in this file, one path per line (needs --out-dir).
    #[arg(long, requires = "out_dir")]
    pub list: Option<PathBuf>,
    /// With --list: the folder that relative paths start from and that outputs mirror (default:
    /// the list's folder).
    #[arg(long, requires = "list")]
    pub root: Option<PathBuf>,
    #[command(flatten)]
    pub bulk: BulkOptions,
    /// Codebooks per frame (1..=32).
    #[arg(long, default_value_t = 8)]
    pub n_q: usize,
    /// Also write the pre-quantisation latents, float32 `[T, hidden]`, to this `.npy`.
    #[arg(long, conflicts_with = "out_dir")]
    pub latents: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
    /// `f32` or `bf16` (CUDA only).
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// Encode what decoded from a file that is cut short, instead of refusing it.
    #[arg(long)]
    pub allow_truncated: bool,
}

pub fn run(args: EncodeArgs) -> Result<()> {
    let (Some(audio_path), Some(out)) = (&args.audio, &args.out) else {
        return crate::dataset::encode::run_encode(&args, &args.bulk);
    };
    let model = crate::load(&args.model)?;
    let nq_max = model.config.num_quantizers;
    if args.n_q == 0 || args.n_q > nq_max {
        bail!("--n-q {} outside 1..={nq_max}", args.n_q);
    }
    // Whole frames: the tail is padded with silence (transformers pads each conv's input instead,
    // so only a last partial frame can differ from `MimiModel.encode` on the unpadded signal).
    let audio = read(audio_path, args.allow_truncated)?;
    let (frames, samples) = (audio.frames, &audio.samples);
    let spec = EncoderSpec {
        device: args.device,
        precision: args.precision,
        max_slots: 1,
        buckets: Buckets::new(&[1])?,
        threads: None,
        cuda_device: 0,
        chunk_frames: chorus_runtime::whole_file_encode_chunk(args.device),
    };
    let mut enc = open_encoder(&model, &spec)?;
    eprintln!(
        "encoding {} ({}, {} Hz, {} channel(s)): {frames} frames, n_q = {} on {}",
        audio_path.display(),
        audio.format,
        audio.source_rate,
        audio.source_channels,
        args.n_q,
        enc.describe()
    );
    let bar = (frames >= PROGRESS_MIN_FRAMES).then(|| frame_bar(frames as u64));
    let dim = enc.latent_dim();
    let mut codes = vec![0i64; args.n_q * frames];
    let mut latents = Vec::with_capacity(if args.latents.is_some() {
        frames * dim
    } else {
        0
    });
    // The file in long chunk steps, the last one padded with silence: the model is causal, so
    // the padding changes none of the file's codes (the same codes as frame steps).
    let k = enc.chunk_frames();
    let mut chunk_codes = vec![0u32; k * args.n_q];
    let mut chunk_lat = vec![0f32; k * dim];
    let mut chunk_pcm = vec![0f32; k * FRAME_SAMPLES];
    let mut t = 0;
    while k > 1 && t < frames {
        let real = k.min(frames - t);
        let src = &samples[t * FRAME_SAMPLES..(t + real) * FRAME_SAMPLES];
        chunk_pcm[..src.len()].copy_from_slice(src);
        chunk_pcm[src.len()..].fill(0.0);
        let lat = args.latents.is_some().then_some(&mut chunk_lat[..]);
        enc.step_chunk(&[SLOT], &chunk_pcm, args.n_q, &mut chunk_codes, lat)?;
        for (f, row) in chunk_codes.chunks_exact(args.n_q).take(real).enumerate() {
            for (q, &c) in row.iter().enumerate() {
                codes[q * frames + t + f] = i64::from(c);
            }
        }
        if args.latents.is_some() {
            latents.extend_from_slice(&chunk_lat[..real * dim]);
        }
        t += real;
        if let Some(b) = &bar {
            b.inc(real as u64);
        }
    }
    let mut row = vec![0u32; nq_max];
    let mut lat = vec![0f32; dim];
    for (t, pcm) in samples.chunks_exact(FRAME_SAMPLES).enumerate().skip(t) {
        let frame = AudioFrame {
            slot: SLOT,
            pcm,
            n_q: args.n_q,
        };
        enc.step(&[frame], &mut row, Some(&mut lat))?;
        for q in 0..args.n_q {
            codes[q * frames + t] = i64::from(row[q]);
        }
        if args.latents.is_some() {
            latents.extend_from_slice(&lat);
        }
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let bytes = chorus_core::npy::write_npy_i64(&[args.n_q, frames], &codes);
    std::fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))?;
    if let Some(path) = &args.latents {
        let bytes = chorus_core::npy::write_npy_f32(&[frames, dim], &latents);
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("wrote {} ([{}, {frames}] codes)", out.display(), args.n_q);
    Ok(())
}

/// Decodes the input file as a bulk run does (`read_audio_input`), with a progress bar for large
/// files; a cut-short file is an error unless `--allow-truncated`.
fn read(path: &Path, allow_truncated: bool) -> Result<AudioInput> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    let bar = (size >= PROGRESS_MIN_BYTES).then(|| {
        let b = ProgressBar::new(size);
        b.set_style(
            ProgressStyle::with_template("reading {bar:40} {bytes}/{total_bytes}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    });
    let mut report = |p: chorus_audio::Progress| {
        if let Some(b) = &bar {
            b.set_position(p.bytes_done);
        }
    };
    let audio = read_audio_input(path, allow_truncated, Some(&mut report))
        .with_context(|| format!("decoding {}", path.display()))?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(missing) = &audio.truncated {
        eprintln!(
            "warning: {}: {missing}; encoding the {:.2} s that decoded",
            path.display(),
            audio.seconds
        );
    }
    Ok(audio)
}

fn frame_bar(frames: u64) -> ProgressBar {
    let b = ProgressBar::new(frames);
    b.set_style(
        ProgressStyle::with_template("encoding {bar:40} {pos}/{len} frames ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}
