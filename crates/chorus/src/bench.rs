//! `chorus bench`: frames per second, real-time streams and real-time factor per batch size.

use crate::decode::parse_precision;
use crate::device::{open_decoder, resolve, DecoderSpec, DeviceKind};
use anyhow::{bail, Result};
use chorus_core::{Buckets, Frame, FrameDecoder, FrameInput, Precision, FRAME_MS, FRAME_SAMPLES};
use std::time::{Duration, Instant};

/// Untimed steps before measuring.
const WARMUP_STEPS: usize = 3;
/// Timed steps at the least, however long they take.
const MIN_STEPS: usize = 10;
/// Distinct random frames cycled through.
const DISTINCT_FRAMES: usize = 64;

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
    pub ms_per_step_median: f64,
    pub ms_per_step_p90: f64,
    pub frames_per_s: f64,
    pub realtime_streams: f64,
    pub rtf: f64,
    pub state_bytes_per_slot: usize,
}

pub fn run(args: BenchArgs) -> Result<()> {
    let model = crate::load(&args.model)?;
    if model.is_random() {
        eprintln!("note: random weights: the decoded audio is noise; timings are representative");
    }
    let batches = Buckets::parse(&args.batch)?;
    if args.n_q == 0 || args.n_q > model.config.num_quantizers {
        bail!("--n-q {} outside 1..={}", args.n_q, model.config.num_quantizers);
    }
    let device = resolve(args.device);
    if !args.json {
        println!(
            "{:>6} {:>10} {:>10} {:>12} {:>10} {:>8}",
            "batch", "ms/step", "p90 ms", "frames/s", "rt streams", "RTF"
        );
    }
    for &b in batches.sizes() {
        let spec = DecoderSpec {
            device,
            precision: args.precision,
            max_slots: b,
            buckets: Buckets::new(&[b])?,
            threads: args.threads,
        };
        let mut dec = open_decoder(&model, &spec)?;
        let row = measure(dec.as_mut(), b, &args)?;
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{:>6} {:>10.3} {:>10.3} {:>12.1} {:>10.1} {:>8.4}   [{} {}]",
                row.batch,
                row.ms_per_step_median,
                row.ms_per_step_p90,
                row.frames_per_s,
                row.realtime_streams,
                row.rtf,
                row.backend,
                row.precision
            );
        }
    }
    Ok(())
}

fn measure(dec: &mut dyn FrameDecoder, batch: usize, args: &BenchArgs) -> Result<BenchRow> {
    let card = dec.codebook_size() as u64;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let codes: Vec<u32> = (0..DISTINCT_FRAMES * batch * args.n_q)
        .map(|_| {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
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
    for i in 0..WARMUP_STEPS {
        step(i, dec)?;
    }
    let budget = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < MIN_STEPS || start.elapsed() < budget {
        let t = Instant::now();
        step(times.len(), dec)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let total = start.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let p90 = times[(times.len() * 9 / 10).min(times.len() - 1)];
    let frames_per_s = (batch * times.len()) as f64 / total;
    let describe = dec.describe();
    let backend = describe.split_whitespace().next().unwrap_or("?").to_string();
    let precision = describe
        .split(['(', ',', ')'])
        .nth(1)
        .unwrap_or("?")
        .trim()
        .to_string();
    Ok(BenchRow {
        device: describe,
        backend,
        precision,
        batch,
        n_q: args.n_q,
        steps: times.len(),
        ms_per_step_median: median,
        ms_per_step_p90: p90,
        frames_per_s,
        realtime_streams: frames_per_s * FRAME_MS as f64 / 1e3,
        rtf: median / FRAME_MS as f64,
        state_bytes_per_slot: dec.state_bytes().total(),
    })
}
