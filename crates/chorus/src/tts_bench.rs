//! `chorus tts-bench`: milliseconds per frame and frames per second of the CSM speech stage for a
//! number of utterances generating together, each with a synthetic text prompt that fills the
//! context. One stage serves every point; each point's utterances are prefilled, stepped, timed
//! and cancelled. `--join` then times the running utterances' frames while one joins them.

use std::time::Instant;

use anyhow::{bail, Result};
use chorus_core::rng::SplitMix64;
use chorus_core::Buckets;
use chorus_csm::prompt::PromptFrame;
use chorus_csm::{CsmModel, TtsOptions, UtteranceEvent, UtteranceRequest};
use chorus_lm::kv::{blocks_for, DEFAULT_BLOCK_SIZE};
use chorus_lm::Sampling;

use chorus_runtime::device::DeviceKind;
use chorus_runtime::tts::{AnyTts, TtsSpec};

use crate::join_bench::{self, JoinRun, JoinStage, STEADY_STEPS, WARMUP_STEPS};

/// Mimi frames per second of audio.
const FRAME_RATE: f64 = 12.5;
/// Untimed frames after the prefill.
const WARMUP_FRAMES: usize = 2;
/// CUDA-event-timed replays of the frame graph per point.
const DEVICE_REPLAYS: usize = 20;

#[derive(clap::Args, Debug)]
pub struct TtsBenchArgs {
    #[arg(long, default_value = "random-small")]
    pub model: String,
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceKind,
    /// Utterances per step, comma-separated.
    #[arg(long, default_value = "1,8")]
    pub utterances: String,
    /// Backbone positions per utterance at which frames are timed: the prompt fills it.
    #[arg(long, default_value_t = 200)]
    pub context: usize,
    /// Timed frames per point.
    #[arg(long, default_value_t = 10)]
    pub frames: usize,
    #[arg(long)]
    pub threads: Option<usize>,
    /// f32 or bf16 (default: f32 on the CPU, bf16 on CUDA).
    #[arg(long, value_parser = crate::decode::parse_precision)]
    pub precision: Option<chorus_core::Precision>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The Mimi model whose decoder runs in every frame (its weights do not change the time).
    #[arg(long, default_value = "random")]
    pub mimi: String,
    /// Time the language model alone: no Mimi decode in the frame.
    #[arg(long)]
    pub no_audio: bool,
    /// After the points: time to first audio of an utterance with a text prompt of this many
    /// tokens (from its admission to its first frame's PCM), alone and beside the largest
    /// point's count less one running utterances.
    #[arg(long)]
    pub ttfa_prompt: Option<usize>,
    /// After the points: for each of these counts of running utterances (at `--context`), time
    /// their frames while one utterance of a `--join-prompt`-frame text prompt joins, prefilled
    /// in chunks inside their frames, and the gap a whole prefill makes instead.
    #[arg(long)]
    pub join: Option<String>,
    /// Prompt frames of the `--join` utterance.
    #[arg(long, default_value_t = 128)]
    pub join_prompt: usize,
    /// Prompt frames a frame prefills for a joining utterance (0: whole prompts; default
    /// `TtsOptions::for_utterances`'s).
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
}

/// Timed admissions per time-to-first-audio figure (the median is printed).
const TTFA_REPEATS: usize = 5;

/// One point's figures.
#[derive(Debug, serde::Serialize)]
pub struct TtsBenchRow {
    pub backend: String,
    pub utterances: usize,
    pub context: usize,
    pub frames: usize,
    /// Wall ms of one utterance's prefill (the points' mean).
    pub prefill_ms: f64,
    /// Wall time of one whole step through the API.
    pub ms_per_frame_median: f64,
    /// CUDA only: median device time of one frame-graph replay.
    pub device_ms_per_frame: Option<f64>,
    pub graph_nodes: Option<usize>,
    pub frames_per_s: f64,
    /// Each utterance's speed over real time (12.5 frames/s).
    pub realtime_factor: f64,
    /// Weight and KV bytes one frame reads, over the device (CUDA) or wall time.
    pub read_gb_per_s: f64,
}

pub fn run(args: TtsBenchArgs) -> Result<()> {
    let counts = Buckets::parse(&args.utterances)?;
    let min_context = WARMUP_FRAMES + args.frames + 4;
    if args.frames == 0 || args.context < min_context {
        bail!("--frames must be positive and --context at least {min_context}");
    }
    let model = crate::load_csm(&args.model)?;
    let largest = counts.largest();
    let mut opts = TtsOptions::for_utterances(largest, args.context)?;
    opts.kv_blocks = 1 + largest * blocks_for(args.context, DEFAULT_BLOCK_SIZE);
    if let Some(chunk) = args.prefill_chunk {
        opts.prefill_chunk = chunk;
    }
    let chunk = opts.prefill_chunk;
    let join_counts = match &args.join {
        Some(j) => Buckets::parse(j)?.sizes().to_vec(),
        None => Vec::new(),
    };
    if let Some(&most) = join_counts.iter().max() {
        // The chunked joiner still runs when the whole-prefilled one joins.
        if most + 2 > largest {
            bail!(
                "--join {most} needs room for two more utterances: add {} to --utterances",
                most + 2
            );
        }
    }
    let spec = TtsSpec {
        device: args.device,
        precision: args.precision,
        threads: args.threads,
        cuda_device: chorus_runtime::device::DEFAULT_CUDA_DEVICE,
    };
    let mimi = if args.no_audio {
        None
    } else {
        Some(crate::load(&args.mimi)?)
    };
    let mut stage = AnyTts::open(&model, mimi.as_ref(), &spec, opts)?;
    if !args.json {
        let audio = if args.no_audio {
            "codes only"
        } else {
            "Mimi decode in every frame"
        };
        println!("{} ({audio})", stage.describe());
        println!(
            "{:>10} {:>8} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6}",
            "utterances",
            "context",
            "prefill ms",
            "ms/frame",
            "device ms",
            "frames/s",
            "x realtime",
            "GB/s read",
            "nodes"
        );
    }
    for &n in counts.sizes() {
        let row = bench_point(&mut stage, &model, n, args.context, args.frames)?;
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{:>10} {:>8} {:>11.1} {:>10.3} {:>10} {:>10.1} {:>10.2} {:>10.0} {:>6}",
                row.utterances,
                row.context,
                row.prefill_ms,
                row.ms_per_frame_median,
                row.device_ms_per_frame
                    .map_or("-".into(), |m| format!("{m:.3}")),
                row.frames_per_s,
                row.realtime_factor,
                row.read_gb_per_s,
                row.graph_nodes.map_or("-".into(), |n| n.to_string())
            );
        }
    }
    if let Some(p) = args.ttfa_prompt {
        if p == 0 || p + 2 > args.context {
            bail!("--ttfa-prompt must be 1..={}", args.context - 2);
        }
        for running in [0, largest - 1] {
            let ms = time_to_first_audio(&mut stage, &model, p, running, args.context)?;
            println!("time to first audio ({p}-token prompt, {running} utterances running): median {ms:.1} ms over {TTFA_REPEATS}");
        }
    }
    for &running in &join_counts {
        bench_join(
            &mut stage,
            &model,
            running,
            (args.context, args.join_prompt, chunk),
        )?;
    }
    Ok(())
}

/// The running utterances' frames while one of a `prompt`-frame text prompt joins `running`
/// utterances at `context`, prefilled `chunk` frames per frame (the shared [`join_bench`]).
fn bench_join(
    stage: &mut AnyTts,
    model: &CsmModel,
    running: usize,
    (context, prompt, chunk): (usize, usize, usize),
) -> Result<()> {
    // Enough frames for the steady steps, the join, its first frame and the whole prefill's step.
    let steps = prompt.div_ceil(chunk.max(1));
    let frames = WARMUP_STEPS + STEADY_STEPS + steps + 8;
    if prompt == 0 || context <= frames + 1 || prompt + JOIN_FRAMES > context {
        bail!(
            "--join: context {context} is too short for a {prompt}-frame join over {frames} frames"
        );
    }
    let c = &model.config;
    let mut rng = SplitMix64::new(running as u64 ^ 0x202);
    let run = JoinRun {
        running: (0..running)
            .map(|u| text_request(c, &mut rng, context - frames, frames, u as u64))
            .collect(),
        joiner: text_request(c, &mut rng, prompt, JOIN_FRAMES, 777),
        whole: text_request(c, &mut rng, prompt, JOIN_FRAMES, 778),
        max_steps: frames,
    };
    let line = join_bench::measure(stage, run, "utterance")?;
    println!("join of a {prompt}-frame utterance (chunks of {chunk}) {line}");
    Ok(())
}

/// Frames of each `--join` utterance.
const JOIN_FRAMES: usize = 4;

impl JoinStage for AnyTts {
    type Request = UtteranceRequest;

    fn admit(&mut self, req: UtteranceRequest, whole: bool) -> Result<u64> {
        Ok(if whole {
            self.add_prefilled(req)?
        } else {
            self.add(req)?
        })
    }

    fn step_for(&mut self, id: u64) -> Result<bool> {
        let mut seen = false;
        self.step(&mut |e| {
            if let UtteranceEvent::Frame { utterance, .. } = e {
                seen |= utterance == id;
            }
        })?;
        Ok(seen)
    }

    fn cancel(&mut self, id: u64) {
        // An utterance that ended already is gone; the others are still running.
        let _ = AnyTts::cancel(self, id);
    }

    fn drain(&mut self) -> Result<()> {
        while self.active() > 0 || self.step(&mut |_| {})? > 0 {}
        Ok(())
    }

    fn device_ms(&self, n: usize, chunk: bool, iters: usize) -> Result<Option<f64>> {
        Ok(if chunk {
            self.device_ms_joining(n, iters)?
        } else {
            AnyTts::device_ms(self, n, iters)?
        })
    }
}

fn text_request(
    c: &chorus_csm::CsmConfig,
    rng: &mut SplitMix64,
    len: usize,
    frames: usize,
    seed: u64,
) -> UtteranceRequest {
    let prompt = (0..len)
        .map(|_| PromptFrame::Text((rng.next_u64() % c.text_vocab_size as u64) as u32))
        .collect();
    UtteranceRequest {
        prompt,
        max_frames: frames,
        sampling: Sampling::Seeded(seed),
        draws: None,
        forced: None,
    }
}

/// Median ms from admitting a `prompt`-token utterance to its first frame's audio (its codes
/// when the stage has no decoder), with `running` utterances generating beside it.
fn time_to_first_audio(
    stage: &mut AnyTts,
    model: &CsmModel,
    prompt: usize,
    running: usize,
    context: usize,
) -> Result<f64> {
    let c = &model.config;
    let mut rng = SplitMix64::new(prompt as u64);
    let mut ids = Vec::new();
    // Long enough to outlive every measurement.
    let frames = context - prompt.max(8);
    for u in 0..running {
        ids.push(stage.add_prefilled(text_request(c, &mut rng, 8, frames, u as u64))?);
    }
    for _ in 0..3 {
        stage.step(&mut |_| {})?;
    }
    let mut ms = Vec::with_capacity(TTFA_REPEATS);
    for r in 0..TTFA_REPEATS {
        let t = Instant::now();
        let id = stage.add(text_request(c, &mut rng, prompt, 2, 1000 + r as u64))?;
        let mut first = None;
        while first.is_none() {
            stage.step(&mut |e| {
                if let UtteranceEvent::Frame { utterance, .. } = e {
                    if utterance == id && first.is_none() {
                        first = Some(t.elapsed().as_secs_f64() * 1e3);
                    }
                }
            })?;
        }
        ms.extend(first);
        let _ = stage.cancel(id);
    }
    for id in ids {
        let _ = stage.cancel(id);
    }
    while stage.active() > 0 || stage.step(&mut |_| {})? > 0 {}
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

fn bench_point(
    stage: &mut AnyTts,
    model: &CsmModel,
    n: usize,
    context: usize,
    frames: usize,
) -> Result<TtsBenchRow> {
    let c = &model.config;
    let max_frames = WARMUP_FRAMES + frames + 1;
    let prompt_len = context - max_frames;
    let mut rng = SplitMix64::new(n as u64 ^ context as u64);
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(n);
    for u in 0..n {
        // Whole: the point times the frames of utterances whose prompts are in.
        ids.push(stage.add_prefilled(text_request(c, &mut rng, prompt_len, max_frames, u as u64))?);
    }
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3 / n as f64;
    for _ in 0..WARMUP_FRAMES {
        stage.step(&mut |_| {})?;
    }
    let mut times = Vec::with_capacity(frames);
    for _ in 0..frames {
        let t = Instant::now();
        stage.step(&mut |_| {})?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let device_ms = stage.device_ms(n, DEVICE_REPLAYS)?;
    let graph_nodes = stage.graph_nodes(n);
    for id in ids {
        // An utterance that drew its end frame is gone already.
        let _ = stage.cancel(id);
    }
    // Drain the frame in flight.
    while stage.active() > 0 || stage.step(&mut |_| {})? > 0 {}
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let ms = device_ms.unwrap_or(median);
    Ok(TtsBenchRow {
        backend: stage.describe(),
        utterances: n,
        context,
        frames,
        prefill_ms,
        ms_per_frame_median: median,
        device_ms_per_frame: device_ms,
        graph_nodes,
        frames_per_s: n as f64 * 1e3 / median,
        realtime_factor: 1e3 / median / FRAME_RATE,
        read_gb_per_s: frame_bytes(model, n, context, stage.bytes_per_weight()) / (ms * 1e-3) / 1e9,
    })
}

/// Bytes one frame reads (`CSM.md` §5): the backbone's linears and codebook-0 head once, the
/// projector and the depth decoder's linears at each of its positions, one level head per level,
/// and each utterance's backbone K and V over its context.
fn frame_bytes(model: &CsmModel, n: usize, context: usize, b: usize) -> f64 {
    let c = &model.config;
    let linears = |d: &chorus_csm::LlamaConfig| {
        let qkv = d.hidden_size * (d.q_width() + 2 * d.kv_width());
        let o = d.q_width() * d.hidden_size;
        let mlp = 3 * d.hidden_size * d.intermediate_size;
        d.num_hidden_layers * (qkv + o + mlp)
    };
    let (bb, dd) = (&c.backbone, &c.depth);
    let v = c.audio_vocab_size;
    let backbone = linears(bb) + v * bb.hidden_size;
    let books = c.num_codebooks;
    let depth =
        books * (linears(dd) + dd.hidden_size * bb.hidden_size) + (books - 1) * v * dd.hidden_size;
    let kv = n * context * bb.num_hidden_layers * 2 * bb.kv_width();
    ((backbone + depth + kv) * b) as f64
}
