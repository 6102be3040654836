//! Peer benchmark: streaming Mimi decode throughput of the `moshi` crate (0.6.4, candle) on CPU.
//!
//! The model is the crate's own `Mimi` built from `Config::v0_1(Some(8))`; its weights are
//! deterministic pseudo-random tensors of the real shapes (no checkpoint needed), so the work per
//! step matches the released model. Each batch size gets a fresh streaming state, a warm-up long
//! enough to fill the decoder transformer's KV window, then a timed run of `decode_step` calls.
//! One JSON line per batch size goes to stdout; progress goes to stderr.

mod cpu_load;
mod weights;

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use moshi::mimi::{Config, Mimi};
use moshi::streaming::{StreamMask, StreamTensor};

const PEER: &str = "moshi-0.6.4";
/// Codebooks decoded per frame, as in the Chorus benchmarks.
const N_Q: usize = 8;
/// Mimi codebook size (`Config::v0_1` quantizer_bins).
const CODEBOOK_SIZE: u32 = 2048;
/// PCM samples produced per 12.5 Hz frame at 24 kHz.
const SAMPLES_PER_FRAME: usize = 1920;
/// Mimi frames per second of audio.
const FRAME_RATE: f64 = 12.5;
/// Distinct random code frames cycled through during a run (pre-built so no allocation is timed).
const CODE_FRAMES: usize = 64;
/// Warm-up frames: the decoder transformer keeps a 250-step window at 25 Hz, i.e. 125 frames,
/// so 150 frames reach the steady state that a long-lived stream sees.
const DEFAULT_WARMUP: usize = 150;
const DEFAULT_MIN_SECS: f64 = 5.0;
const DEFAULT_MIN_STEPS: usize = 100;
const DEFAULT_BATCHES: &[usize] = &[1, 8];
const SEED: u64 = 0x4d49_4d49;

struct Args {
    batches: Vec<usize>,
    warmup: usize,
    min_secs: f64,
    min_steps: usize,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        batches: DEFAULT_BATCHES.to_vec(),
        warmup: DEFAULT_WARMUP,
        min_secs: DEFAULT_MIN_SECS,
        min_steps: DEFAULT_MIN_STEPS,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--batches" => {
                args.batches = value
                    .split(',')
                    .map(|b| b.trim().parse::<usize>())
                    .collect::<std::result::Result<_, _>>()
                    .context("--batches takes a comma-separated list of integers")?
            }
            "--warmup" => args.warmup = value.parse()?,
            "--min-secs" => args.min_secs = value.parse()?,
            "--min-steps" => args.min_steps = value.parse()?,
            _ => bail!("unknown flag {flag} (known: --batches, --warmup, --min-secs, --min-steps)"),
        }
    }
    if args.batches.contains(&0) || args.min_steps == 0 {
        bail!("batch sizes and --min-steps must be positive");
    }
    Ok(args)
}

/// Random code frames of shape [batch, N_Q, 1], u32 as the crate's quantizer expects.
fn code_frames(batch: usize, dev: &Device, seed: u64) -> Result<Vec<StreamTensor>> {
    let mut rng = weights::SplitMix64::new(seed);
    (0..CODE_FRAMES)
        .map(|_| {
            let codes: Vec<u32> = (0..batch * N_Q)
                .map(|_| (rng.next_u64() % u64::from(CODEBOOK_SIZE)) as u32)
                .collect();
            Ok(StreamTensor::from_tensor(Tensor::from_vec(
                codes,
                (batch, N_Q, 1),
                dev,
            )?))
        })
        .collect()
}

/// Decodes `steps` frames; returns the last PCM tensor produced.
fn run_steps(
    mimi: &mut Mimi,
    frames: &[StreamTensor],
    start: usize,
    steps: usize,
) -> Result<Option<Tensor>> {
    let mask = StreamMask::empty();
    let mut last = None;
    for i in 0..steps {
        let pcm = mimi.decode_step(&frames[(start + i) % frames.len()], &mask)?;
        if let Some(t) = pcm.as_option() {
            last = Some(t.clone());
        }
    }
    Ok(last)
}

fn bench_batch(mimi: &mut Mimi, batch: usize, args: &Args, dev: &Device) -> Result<()> {
    let frames = code_frames(batch, dev, SEED ^ batch as u64)?;
    mimi.reset_state();
    let t0 = Instant::now();
    run_steps(mimi, &frames, 0, args.warmup)?;
    eprintln!(
        "batch {batch}: warm-up {} frames in {:.2} s",
        args.warmup,
        t0.elapsed().as_secs_f64()
    );

    let min_time = Duration::from_secs_f64(args.min_secs);
    let mut steps = 0usize;
    let mut last = None;
    // Per-step times: the median resists short bursts of load from other processes.
    let mut step_ms = Vec::with_capacity(args.min_steps * 4);
    let load = cpu_load::Sampler::start();
    let start = Instant::now();
    while steps < args.min_steps || start.elapsed() < min_time {
        let t0 = Instant::now();
        if let Some(t) = run_steps(mimi, &frames, args.warmup + steps, 1)? {
            last = Some(t);
        }
        step_ms.push(1e3 * t0.elapsed().as_secs_f64());
        steps += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let (own_cores, background_cores) = match load.cores(secs) {
        Some((own, others)) => (format!("{own:.2}"), format!("{others:.2}")),
        None => ("null".to_string(), "null".to_string()),
    };

    let pcm = last.context("decode_step produced no PCM during the timed run")?;
    let dims = pcm.dims().to_vec();
    if dims != [batch, 1, SAMPLES_PER_FRAME] {
        bail!("unexpected PCM shape {dims:?} for batch {batch}");
    }
    let max_abs = pcm
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_dtype(DType::F32)?
        .to_scalar::<f32>()?;
    if !max_abs.is_finite() {
        bail!("non-finite PCM output (max |x| = {max_abs})");
    }

    step_ms.sort_by(f64::total_cmp);
    let p50_ms = step_ms[step_ms.len() / 2];
    let min_ms = step_ms[0];
    let frames_per_s = (batch * steps) as f64 / secs;
    println!(
        "{{\"peer\":\"{PEER}\",\"device\":\"cpu\",\"batch\":{batch},\"n_q\":{N_Q},\
         \"frames_per_s\":{frames_per_s:.2},\"ms_per_step\":{:.3},\
         \"p50_ms\":{p50_ms:.3},\"min_ms\":{min_ms:.3},\"threads\":{},\
         \"steps\":{steps},\"warmup_steps\":{},\"secs\":{secs:.3},\"x_realtime\":{:.2},\
         \"own_cores\":{own_cores},\"background_cores\":{background_cores}}}",
        1e3 * secs / steps as f64,
        candle_core::utils::get_num_threads(),
        args.warmup,
        frames_per_s / FRAME_RATE,
    );
    Ok(())
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let dev = Device::Cpu;
    eprintln!(
        "candle threads {} (rayon pool {}), avx {}, f16c {}, mkl {}",
        candle_core::utils::get_num_threads(),
        rayon::current_num_threads(),
        candle_core::utils::with_avx(),
        candle_core::utils::with_f16c(),
        candle_core::utils::has_mkl(),
    );
    let cfg = Config::v0_1(Some(N_Q));
    let vb = VarBuilder::from_backend(
        Box::new(weights::RandomWeights::new(SEED)),
        DType::F32,
        dev.clone(),
    );
    let t0 = Instant::now();
    let mut mimi = Mimi::new(cfg, vb)?;
    eprintln!("model built in {:.2} s", t0.elapsed().as_secs_f64());
    for &batch in &args.batches {
        bench_batch(&mut mimi, batch, &args, &dev)?;
    }
    Ok(())
}
