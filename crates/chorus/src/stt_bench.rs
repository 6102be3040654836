//! `chorus stt-bench`: milliseconds per step and real-time streams of the Kyutai STT stage for a
//! number of streams stepping together, each first stepped through `--fill` positions so the
//! attention reads a full window. One stage serves every point; each point's streams are added,
//! filled, timed and cancelled. With `--mimi` the streams push PCM and every step runs Mimi's
//! encoder too, in the same program.

use std::time::Instant;

use anyhow::{bail, Result};
use chorus_core::rng::SplitMix64;
use chorus_core::{Buckets, FRAME_SAMPLES};
use chorus_runtime::device::DeviceKind;
use chorus_runtime::{AnyStt, SttSpec};
use chorus_stt::config::FRAME_RATE;
use chorus_stt::{StreamRequest, SttOptions};

/// CUDA-event-timed replays of the step graph per point.
const DEVICE_REPLAYS: usize = 20;
/// Seed of the synthetic codes.
const CODES_SEED: u64 = 0x7374_742d_6265_6e63;

#[derive(clap::Args, Debug)]
pub struct SttBenchArgs {
    #[arg(long, default_value = "random-small")]
    pub model: String,
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceKind,
    /// Streams per step, comma-separated.
    #[arg(long, default_value = "1,8")]
    pub streams: String,
    /// Untimed positions per stream before the timed steps (default: the model's window, so
    /// every timed step attends over a full window).
    #[arg(long)]
    pub fill: Option<usize>,
    /// Timed steps per point.
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    #[arg(long)]
    pub threads: Option<usize>,
    /// f32 or bf16 (default: f32 on the CPU, bf16 on CUDA).
    #[arg(long, value_parser = crate::decode::parse_precision)]
    pub precision: Option<chorus_core::Precision>,
    /// Streams push PCM (seeded noise) through this Mimi codec's encoder inside the step
    /// (`kyutai/mimi`, `random`, ...); without it they push codes.
    #[arg(long)]
    pub mimi: Option<String>,
    /// How the streams' KV rings are stored: `bf16` (the backend's own type) or `fp8`.
    #[arg(long, default_value = "bf16", value_parser = crate::music::parse_kv_cache)]
    pub kv_cache: chorus_lm::KvCache,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One point's figures.
#[derive(Debug, serde::Serialize)]
pub struct SttBenchRow {
    pub backend: String,
    /// `codes`, or `pcm` (Mimi's encoder in the step).
    pub input: &'static str,
    pub streams: usize,
    /// Positions each stream had run before the timed steps.
    pub fill: usize,
    pub steps: usize,
    /// Wall time of one whole step through the API.
    pub ms_per_step_median: f64,
    /// CUDA only: median device time of one step-graph replay.
    pub device_ms_per_step: Option<f64>,
    pub graph_nodes: Option<usize>,
    /// Stream-steps per second (wall).
    pub steps_per_s: f64,
    /// Each stream's speed over real time (12.5 steps/s).
    pub realtime_factor: f64,
    /// Weight and KV bytes one step reads, over the device time (CUDA) or wall time.
    pub read_gb_per_s: f64,
}

pub fn run(args: SttBenchArgs) -> Result<()> {
    let counts = Buckets::parse(&args.streams)?;
    if args.steps == 0 {
        bail!("--steps must be positive");
    }
    let model = crate::load_stt(&args.model)?;
    let fill = args.fill.unwrap_or(model.config.sliding_window);
    let mut opts = SttOptions::for_streams(counts.largest())?;
    opts.max_frames = fill + args.steps + 1;
    opts.kv_cache = args.kv_cache;
    let spec = SttSpec {
        device: args.device,
        precision: args.precision,
        threads: args.threads,
        cuda_device: chorus_runtime::device::DEFAULT_CUDA_DEVICE,
    };
    let mimi = args.mimi.as_deref().map(crate::load).transpose()?;
    let mut stage = AnyStt::open(&model, mimi.as_ref(), &spec, opts)?;
    if !args.json {
        println!("{}", stage.describe());
        println!(
            "{:>8} {:>6} {:>10} {:>10} {:>12} {:>10} {:>10} {:>6}",
            "streams",
            "fill",
            "ms/step",
            "device ms",
            "steps/s",
            "x realtime",
            "GB/s read",
            "nodes"
        );
    }
    let books = model.config.num_codebooks;
    let mut rng = SplitMix64::new(CODES_SEED);
    for &n in counts.sizes() {
        let ids = (0..n)
            .map(|_| stage.add(StreamRequest::default()))
            .collect::<chorus_stt::Result<Vec<_>>>()?;
        let mut frame = vec![0u32; books];
        let mut pcm = vec![0f32; FRAME_SAMPLES];
        for &id in &ids {
            for _ in 0..fill + args.steps {
                if mimi.is_some() {
                    for x in pcm.iter_mut() {
                        *x = ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2;
                    }
                    stage.push_pcm(id, &pcm)?;
                } else {
                    for c in frame.iter_mut() {
                        *c = (rng.next_u64() % 2048) as u32;
                    }
                    stage.push_frame(id, &frame)?;
                }
            }
        }
        // Position 0 and the fill, untimed.
        for _ in 0..=fill {
            stage.step(&mut |_| {})?;
        }
        let mut ms = Vec::with_capacity(args.steps);
        for _ in 0..args.steps {
            let t = Instant::now();
            stage.step(&mut |_| {})?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        let device = stage.device_ms(n, DEVICE_REPLAYS)?;
        let per_step = device.unwrap_or(median);
        let row = SttBenchRow {
            backend: stage.describe(),
            input: if mimi.is_some() { "pcm" } else { "codes" },
            streams: n,
            fill,
            steps: args.steps,
            ms_per_step_median: median,
            device_ms_per_step: device,
            graph_nodes: stage.graph_nodes(n),
            steps_per_s: n as f64 * 1e3 / median,
            realtime_factor: 1e3 / (per_step * f64::from(FRAME_RATE)),
            read_gb_per_s: step_bytes(
                &model.config,
                n,
                fill,
                stage.bytes_per_weight(),
                args.kv_cache,
            ) / (per_step * 1e-3)
                / 1e9,
        };
        for id in ids {
            stage.cancel(id)?;
        }
        // The last launched step is read before the next point starts.
        stage.step(&mut |_| {})?;
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{:>8} {:>6} {:>10.3} {:>10} {:>12.1} {:>10.2} {:>10.0} {:>6}",
                row.streams,
                row.fill,
                row.ms_per_step_median,
                row.device_ms_per_step
                    .map_or("-".into(), |m| format!("{m:.3}")),
                row.steps_per_s,
                row.realtime_factor,
                row.read_gb_per_s,
                row.graph_nodes.map_or("-".into(), |g| g.to_string()),
            );
        }
    }
    Ok(())
}

/// Bytes one step reads: every weight it multiplies by (each layer's projections and gated FFN,
/// the text head; the gathered embedding rows aside) plus each stream's K and V over the
/// positions its window holds after `fill` (8-bit rings: a byte per value and an f32 scale per
/// head vector).
fn step_bytes(
    c: &chorus_stt::SttConfig,
    streams: usize,
    fill: usize,
    bytes_per_weight: usize,
    kv: chorus_lm::KvCache,
) -> f64 {
    let h = c.hidden_size;
    let layer = h * (c.q_width() + 2 * c.kv_width()) + c.q_width() * h + 3 * c.ffn_hidden * h;
    let weights = (c.num_hidden_layers * layer + c.text_vocab * h) * bytes_per_weight;
    let keys = (fill + 1).min(c.sliding_window);
    let per_vector = match kv {
        chorus_lm::KvCache::Native => c.head_dim * bytes_per_weight,
        chorus_lm::KvCache::Fp8 => c.head_dim + 4,
    };
    let kv_bytes = streams * c.num_hidden_layers * keys * 2 * c.num_key_value_heads * per_vector;
    (weights + kv_bytes) as f64
}
