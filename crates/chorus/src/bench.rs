//! `chorus bench`: frames per second, real-time streams and real-time factor per batch size.

use crate::decode::parse_precision;
use anyhow::{bail, Result};
use chorus_core::{Buckets, Frame, FrameDecoder, FrameInput, Precision, FRAME_MS, FRAME_SAMPLES};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{DecoderOptions, SlotDecoder};
use chorus_runtime::device::{cuda_options, open_decoder, resolve, DecoderSpec, DeviceKind};
use std::time::{Duration, Instant};

/// Untimed steps before measuring: past the 250-token window (125 frames), so every timed step
/// attends over a full window, as a long-running stream does.
pub(crate) const WARMUP_STEPS: usize = 130;
/// Timed steps at the least, however long they take.
pub(crate) const MIN_STEPS: usize = 10;
/// Distinct random frames cycled through.
const DISTINCT_FRAMES: usize = 64;
/// CUDA-event-timed graph replays per bucket.
pub(crate) const TIMED_REPLAYS: usize = 50;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[arg(long, default_value = "random")]
    pub model: String,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
    /// Batch sizes, comma-separated.
    #[arg(long, default_value = "1,8,32")]
    pub batch: String,
    /// Codebooks per frame.
    #[arg(long, default_value_t = 8)]
    pub n_q: usize,
    /// Seconds of timed steps per batch size.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// CPU threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Benchmark the encoder (80 ms of audio in, `--n-q` codes out) instead of the decoder.
    #[arg(long)]
    pub encode: bool,
    /// Whole files instead of streams: B files of each `--file-seconds` length encoded and then
    /// decoded through the long-chunk paths of the bulk commands.
    #[arg(long)]
    pub whole_file: bool,
    /// File lengths in seconds for `--whole-file`, comma-separated.
    #[arg(long, default_value = "10,60")]
    pub file_seconds: String,
    /// Passes per `--whole-file` cell; the best is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Frames per slot of a `--whole-file` encode step (default: the device's `whole_file_encode_chunk`).
    #[arg(long)]
    pub chunk_frames: Option<usize>,
    /// Frames per slot of a `--whole-file` decode step (default: the device's `whole_file_decode_chunk`).
    #[arg(long)]
    pub decode_chunk_frames: Option<usize>,
}

/// One batch size's figures.
#[derive(Debug, serde::Serialize)]
pub struct BenchRow {
    pub device: String,
    pub backend: String,
    pub precision: String,
    pub batch: usize,
    pub n_q: usize,
    pub steps: usize,
    /// Wall time per step through the whole API (staging, replay, sync, copy-out).
    pub ms_per_step_median: f64,
    pub ms_per_step_p90: f64,
    /// CUDA only: median device time of one graph replay (CUDA events).
    pub device_ms_per_step_median: Option<f64>,
    /// From device time on CUDA, from wall time on the CPU.
    pub frames_per_s: f64,
    pub realtime_streams: f64,
    pub rtf: f64,
    pub state_bytes_per_slot: usize,
}

pub fn run(args: BenchArgs) -> Result<()> {
    let model = crate::load(&args.model)?;
    let batches = Buckets::parse(&args.batch)?;
    if args.n_q == 0 || args.n_q > model.config.num_quantizers {
        bail!(
            "--n-q {} outside 1..={}",
            args.n_q,
            model.config.num_quantizers
        );
    }
    let device = resolve(args.device);
    if args.whole_file {
        return crate::bench_whole::run(&model, device, &batches, &args);
    }
    if !args.json {
        println!(
            "{:>6} {:>10} {:>10} {:>12} {:>10} {:>8}",
            "batch", "ms/step", "p90 ms", "frames/s", "rt streams", "RTF"
        );
    }
    for &b in batches.sizes() {
        if args.encode {
            let row = crate::bench_encode::bench_batch(&model, device, b, &args)?;
            print_row(&row, args.json)?;
            continue;
        }
        let spec = DecoderSpec {
            device,
            precision: args.precision,
            max_slots: b,
            buckets: Buckets::new(&[b])?,
            threads: args.threads,
            chunk_frames: 1,
        };
        let row = if device == DeviceKind::Cuda {
            measure_cuda(&model, &spec, &args)?
        } else {
            let mut dec = open_decoder(&model, &spec)?;
            measure(dec.as_mut(), b, &args)?
        };
        print_row(&row, args.json)?;
    }
    Ok(())
}

fn print_row(row: &BenchRow, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(row)?);
        return Ok(());
    }
    println!(
        "{:>6} {:>10.3} {:>10.3} {:>12.1} {:>10.1} {:>8.4}   [{} {}{}]",
        row.batch,
        row.device_ms_per_step_median
            .unwrap_or(row.ms_per_step_median),
        row.ms_per_step_p90,
        row.frames_per_s,
        row.realtime_streams,
        row.rtf,
        row.backend,
        row.precision,
        if row.device_ms_per_step_median.is_some() {
            ", device time"
        } else {
            ", wall time"
        }
    );
    Ok(())
}

fn measure(dec: &mut dyn FrameDecoder, batch: usize, args: &BenchArgs) -> Result<BenchRow> {
    let card = dec.codebook_size() as u64;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let codes: Vec<u32> = (0..DISTINCT_FRAMES * batch * args.n_q)
        .map(|_| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((rng >> 33) % card) as u32
        })
        .collect();
    let mut pcm = vec![0f32; batch * FRAME_SAMPLES];
    let mut step = |i: usize, dec: &mut dyn FrameDecoder| -> Result<()> {
        let base = (i % DISTINCT_FRAMES) * batch * args.n_q;
        let frames: Vec<Frame<'_>> = (0..batch)
            .map(|s| Frame {
                slot: s,
                input: FrameInput::Codes(&codes[base + s * args.n_q..base + (s + 1) * args.n_q]),
            })
            .collect();
        dec.step(&frames, &mut pcm)?;
        Ok(())
    };
    let timed = time_steps(args.seconds, |i| step(i, dec))?;
    let describe = dec.describe();
    let backend = describe.split_whitespace().next().unwrap_or("?");
    let precision = match (backend, args.precision) {
        (_, Some(p)) => p.name(),
        ("cuda", None) => Precision::Bf16.name(),
        _ => Precision::F32.name(),
    }
    .to_string();
    let state_bytes = dec.state_bytes().total();
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

/// Wall-clock step times past the warm-up.
pub(crate) struct Timed {
    /// Sorted, in milliseconds.
    pub times_ms: Vec<f64>,
    pub total_s: f64,
}

/// Runs `step` for the warm-up, then for at least `seconds` and [`MIN_STEPS`] steps.
pub(crate) fn time_steps(seconds: f64, mut step: impl FnMut(usize) -> Result<()>) -> Result<Timed> {
    for i in 0..WARMUP_STEPS {
        step(i)?;
    }
    let budget = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut times_ms = Vec::new();
    while times_ms.len() < MIN_STEPS || start.elapsed() < budget {
        let t = Instant::now();
        step(times_ms.len())?;
        times_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let total_s = start.elapsed().as_secs_f64();
    times_ms.sort_by(f64::total_cmp);
    Ok(Timed { times_ms, total_s })
}

/// What a row says about the model it timed.
pub(crate) struct RowSource {
    pub describe: String,
    pub precision: String,
    pub n_q: usize,
    pub state_bytes: usize,
}

/// A bench row from wall-clock times of steps of `batch` frames.
pub(crate) fn wall_row(src: RowSource, batch: usize, t: Timed) -> BenchRow {
    let n = t.times_ms.len();
    let median = t.times_ms[n / 2];
    let p90 = t.times_ms[(n * 9 / 10).min(n - 1)];
    let frames_per_s = (batch * n) as f64 / t.total_s;
    let backend = src
        .describe
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string();
    BenchRow {
        device: src.describe,
        backend,
        precision: src.precision,
        batch,
        n_q: src.n_q,
        steps: n,
        ms_per_step_median: median,
        ms_per_step_p90: p90,
        device_ms_per_step_median: None,
        frames_per_s,
        realtime_streams: frames_per_s * FRAME_MS as f64 / 1e3,
        rtf: median / FRAME_MS as f64,
        state_bytes_per_slot: src.state_bytes,
    }
}

/// On CUDA: the wall-time figures, then the median device time of back-to-back graph replays,
/// from which frames per second and real-time streams are computed.
fn measure_cuda(model: &LoadedModel, spec: &DecoderSpec, args: &BenchArgs) -> Result<BenchRow> {
    let be = chorus_cuda::CudaBackend::new(cuda_options(spec))?;
    let opts = DecoderOptions {
        max_slots: spec.max_slots,
        buckets: spec.buckets.clone(),
        chunk_frames: 1,
    };
    let mut dec = SlotDecoder::from_weights(be, &model.config, &model.weights, opts)?;
    dec.warmup()?;
    let mut row = measure(&mut dec, spec.max_slots, args)?;
    let mut times = dec.backend().time_replay(0, TIMED_REPLAYS)?;
    times.sort_by(f32::total_cmp);
    let device_ms = times[times.len() / 2] as f64;
    row.device_ms_per_step_median = Some(device_ms);
    row.frames_per_s = row.batch as f64 * 1e3 / device_ms;
    row.realtime_streams = row.frames_per_s * FRAME_MS as f64 / 1e3;
    row.rtf = device_ms / FRAME_MS as f64;
    Ok(row)
}
