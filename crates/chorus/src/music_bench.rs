//! `chorus music-bench`: milliseconds per frame and frames per second for a number of songs
//! decoding together, over song counts at one context and over contexts at one song count. One
//! stage serves every point (the weights are uploaded once); each point's songs are prefilled
//! with synthetic prompts that fill the context, stepped, timed and cancelled.

use std::time::Instant;

use anyhow::{bail, Result};
use chorus_core::rng::SplitMix64;
use chorus_core::Buckets;
use chorus_lm::kv::{blocks_for, DEFAULT_BLOCK_SIZE};
use chorus_music::config::{DRAWS_PER_FRAME, FRAME_RATE};
use chorus_music::prompt::PromptIds;
use chorus_music::prompt::CFG_FILLER;
use chorus_music::{MusicModel, Sampling, SongEvent, SongRequest};

use chorus_runtime::device::DeviceKind;
use chorus_runtime::music::{AnyStage, StageSpec};

use crate::join_bench::{self, JoinRun, JoinStage, STEADY_STEPS, WARMUP_STEPS};

/// Base-vocabulary ids drawn for synthetic prompts (below Qwen2's added tokens).
const BASE_VOCAB: u64 = 151_643;
/// Untimed frames after the prefill.
const WARMUP_FRAMES: usize = 2;
/// CUDA-event-timed replays of the frame graph per point.
const DEVICE_REPLAYS: usize = 20;

#[derive(clap::Args, Debug)]
pub struct MusicBenchArgs {
    #[arg(long, default_value = "random-small")]
    pub model: String,
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceKind,
    /// Songs per step, comma-separated (timed at `--context`).
    #[arg(long, default_value = "1,8,32")]
    pub songs: String,
    /// Context length (positions per row) at which frames are timed: the prompt fills it.
    #[arg(long, default_value_t = 1000)]
    pub context: usize,
    /// Further contexts, comma-separated, timed with `--context-songs` songs.
    #[arg(long)]
    pub contexts: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub context_songs: usize,
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
    /// CUDA: a song's codes do not depend on the songs sharing its steps (every product and
    /// attention split summed in one order per row; slower from 2 songs, docs/PERFORMANCE.md).
    #[arg(long)]
    pub batch_invariant: bool,
    /// After the points: time the prefill of one song with a prompt of this many tokens per row
    /// on the warm stage (median of `PREFILL_REPEATS`), then, on CUDA, each of its ops.
    #[arg(long)]
    pub prefill_tokens: Option<usize>,
    /// CUDA: after each point's timed frames, run one more frame op by op and print each op's
    /// device time (kernels one at a time: no overlap, unlike the graph).
    #[arg(long)]
    pub profile_frame: bool,
    /// With `--prefill-tokens`: for each of these counts of running songs (at `--context`), time
    /// their frames while one song of that prompt joins, prefilled in chunks inside their frames,
    /// and the gap a whole prefill makes instead.
    #[arg(long)]
    pub join_songs: Option<String>,
    /// Prompt tokens per row a frame prefills for a joining song (0: whole prompts).
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
    /// The LM's KV cache: `bf16` (the backend's storage type) or `fp8` (E4M3, a scale per head).
    #[arg(long, default_value = "bf16", value_parser = crate::music::parse_kv_cache)]
    pub kv_cache: chorus_music::KvCache,
    /// Instead of the points: one song of `--prefill-tokens` (default 300) prompt tokens for this
    /// many frames on a bf16 and an fp8 KV cache, teacher-forced with the bf16 run's codes
    /// (relative L2 of hiddens and logits over the frames), then free-running (the share of
    /// identical codes).
    #[arg(long)]
    pub kv_accuracy: Option<usize>,
}

/// Prompt tokens of the `--kv-accuracy` song by default.
const KV_ACCURACY_PROMPT: usize = 300;

/// Timed prefills per `--prefill-tokens` measurement.
const PREFILL_REPEATS: usize = 5;

/// One point's figures.
#[derive(Debug, serde::Serialize)]
pub struct MusicBenchRow {
    pub backend: String,
    pub songs: usize,
    pub context: usize,
    pub frames: usize,
    pub prefill_ms_per_song: f64,
    /// Wall time of one whole step through the API (staging, replay, sync, outputs read).
    pub ms_per_frame_median: f64,
    pub ms_per_frame_mean: f64,
    /// CUDA only: median device time of one frame-graph replay (CUDA events).
    pub device_ms_per_frame: Option<f64>,
    /// CUDA only: nodes (kernels and copies) of the frame graph.
    pub graph_nodes: Option<usize>,
    /// Frames per second over all songs (wall time).
    pub frames_per_s: f64,
    /// Each song's speed over real time (25 frames/s).
    pub realtime_factor: f64,
    /// Weight and KV bytes one frame reads, over the device time (CUDA) or wall time.
    pub read_gb_per_s: f64,
}

pub fn run(args: MusicBenchArgs) -> Result<()> {
    let counts = Buckets::parse(&args.songs)?;
    let mut points: Vec<(usize, usize)> =
        counts.sizes().iter().map(|&s| (s, args.context)).collect();
    if let Some(c) = &args.contexts {
        for ctx in c.split(',').map(|x| x.trim().parse::<usize>()) {
            points.push((args.context_songs, ctx?));
        }
    }
    let min_context = WARMUP_FRAMES + args.frames + 4;
    if args.frames == 0 || points.iter().any(|&(_, c)| c < min_context) {
        bail!("--frames must be positive and every context at least {min_context}");
    }
    let model = crate::load_music(&args.model)?;
    let max_songs = points.iter().map(|p| p.0).max().unwrap_or(1);
    let max_context = points.iter().map(|p| p.1).max().unwrap_or(1) + 1;
    let kv_blocks = 1 + points
        .iter()
        .map(|&(s, c)| 2 * s * blocks_for(c + 1, DEFAULT_BLOCK_SIZE))
        .max()
        .unwrap_or(0);
    let spec = StageSpec {
        device: args.device,
        precision: args.precision,
        songs: max_songs,
        max_context,
        threads: args.threads,
        batch_invariant: args.batch_invariant,
        prefill_chunk: args.prefill_chunk,
        kv_cache: args.kv_cache,
    };
    let join_counts = match &args.join_songs {
        Some(j) if args.prefill_tokens.is_none() => {
            bail!("--join-songs {j} needs --prefill-tokens (the joining song's prompt)")
        }
        Some(j) => Buckets::parse(j)?.sizes().to_vec(),
        None => Vec::new(),
    };
    if let Some(&most) = join_counts.iter().max() {
        // The chunked joiner still runs when the whole-prefilled one joins.
        if most + 2 > max_songs {
            bail!(
                "--join-songs {most} needs room for two more songs: add {} to --songs",
                most + 2
            );
        }
    }
    if let Some(frames) = args.kv_accuracy {
        let tokens = args.prefill_tokens.unwrap_or(KV_ACCURACY_PROMPT);
        return crate::kv_accuracy::run(&model, &spec, tokens, frames);
    }
    let mut stage = AnyStage::open_sized(&model, &spec, kv_blocks, max_context)?;
    if !args.json {
        println!("{}", stage.describe());
        println!(
            "{:>6} {:>8} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>6}",
            "songs",
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
    for &(songs, context) in &points {
        let row = bench_point(
            &mut stage,
            &model,
            (songs, context, args.frames),
            args.profile_frame,
        )?;
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{:>6} {:>8} {:>12.1} {:>12.3} {:>12} {:>12.1} {:>10.2} {:>10.0} {:>6}",
                row.songs,
                row.context,
                row.prefill_ms_per_song,
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
    if let Some(tokens) = args.prefill_tokens {
        if tokens < 3 || tokens >= max_context {
            bail!("--prefill-tokens must be 3..{max_context} (the largest context)");
        }
        bench_prefill(&mut stage, tokens)?;
        for &running in &join_counts {
            bench_join(&mut stage, running, args.context, tokens)?;
        }
    }
    Ok(())
}

/// The running songs' frames while a song of `tokens` prompt tokens joins `running` songs at
/// `context`: in chunks inside their frames (wall ms per step, and on CUDA the device ms of the
/// frame graph that carries a chunk), against the gap of a whole prefill between two frames.
fn bench_join(stage: &mut AnyStage, running: usize, context: usize, tokens: usize) -> Result<()> {
    // Enough frames for the steady steps, the join, its first frame and the whole prefill's step.
    let frames = WARMUP_STEPS + STEADY_STEPS + tokens.div_ceil(16) + 8;
    if context <= frames + 3 || tokens + frames + 1 > context {
        bail!("--join-songs: context {context} is too short for a {tokens}-token join over {frames} frames");
    }
    let mut rng = SplitMix64::new(running as u64 ^ 0x101);
    let running_songs = (0..running)
        .map(|s| synthetic_song(&mut rng, context - frames - 2, s as u64, frames))
        .collect();
    let run = JoinRun {
        running: running_songs,
        joiner: synthetic_song(&mut rng, tokens, 777, 4),
        whole: synthetic_song(&mut rng, tokens, 778, 4),
        max_steps: frames,
    };
    let line = join_bench::measure(stage, run, "song")?;
    println!("join of a {tokens}-token song {line}");
    Ok(())
}

impl JoinStage for AnyStage {
    type Request = SongRequest;

    fn admit(&mut self, req: SongRequest, whole: bool) -> Result<u64> {
        Ok(if whole {
            self.add_song_prefilled(req)?
        } else {
            self.add_song(req)?
        })
    }

    fn step_for(&mut self, id: u64) -> Result<bool> {
        let mut seen = false;
        self.step(&mut |ev| {
            if let SongEvent::Frame { song, .. } = ev {
                seen |= song == id;
            }
        })?;
        Ok(seen)
    }

    fn cancel(&mut self, id: u64) {
        // A song that ended already is gone; the others are still running.
        let _ = AnyStage::cancel(self, id);
    }

    fn drain(&mut self) -> Result<()> {
        while self.step(&mut |_| {})? > 0 {}
        Ok(())
    }

    fn device_ms(&self, n: usize, chunk: bool, iters: usize) -> Result<Option<f64>> {
        Ok(if chunk {
            self.device_ms_joining(n, iters)?
        } else {
            AnyStage::device_ms(self, n, iters)?
        })
    }
}

/// A synthetic song of `tokens` prompt tokens per row and one frame.
pub(crate) fn synthetic_song(
    rng: &mut SplitMix64,
    tokens: usize,
    seed: u64,
    max_frames: usize,
) -> SongRequest {
    let cond: Vec<u32> = (0..tokens)
        .map(|_| (rng.next_u64() % BASE_VOCAB) as u32)
        .collect();
    // Built directly: a benchmark may fill contexts past the 5,000-token user prompt limit.
    let mut uncond = cond.clone();
    uncond[1..tokens - 2].fill(CFG_FILLER);
    SongRequest {
        prompt: PromptIds { cond, uncond },
        max_frames,
        sampling: Sampling::Seeded(seed),
        allow_end: false,
        forced: None,
    }
}

/// Prints the warm prefill time of one `tokens`-token song (both rows), then its ops on CUDA.
fn bench_prefill(stage: &mut AnyStage, tokens: usize) -> Result<()> {
    let mut rng = SplitMix64::new(tokens as u64);
    let mut ms = Vec::with_capacity(PREFILL_REPEATS);
    for i in 0..PREFILL_REPEATS {
        let req = synthetic_song(&mut rng, tokens, i as u64, 1);
        let t = Instant::now();
        let id = stage.add_song_prefilled(req)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        stage.cancel(id)?;
    }
    ms.sort_by(f64::total_cmp);
    println!(
        "prefill of {tokens} tokens (x2 rows): median {:.2} ms, min {:.2} ms over {PREFILL_REPEATS} warm runs",
        ms[ms.len() / 2],
        ms[0]
    );
    let req = synthetic_song(&mut rng, tokens, 99, 1);
    let (id, ops) = stage.profile_ops(|s| s.add_song_prefilled(req))?;
    stage.cancel(id)?;
    print_ops(&format!("prefill ops, {tokens} tokens"), ops);
    Ok(())
}

/// Prints profiled ops, the costliest first (CUDA; nothing on the CPU).
fn print_ops(what: &str, ops: Option<Vec<chorus_cuda::OpTime>>) {
    let Some(mut ops) = ops else { return };
    ops.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
    let total: f32 = ops.iter().map(|o| o.total_ms).sum();
    println!("{what} (device ms, one op at a time): total {total:.3}");
    for o in ops {
        println!("  {:<24} {:>5} calls {:>9.3} ms", o.op, o.calls, o.total_ms);
    }
}

/// `songs` songs at `context` positions: prefill, warm-up, timed steps, device replays, cancel.
fn bench_point(
    stage: &mut AnyStage,
    model: &MusicModel,
    (songs, context, frames): (usize, usize, usize),
    profile_frame: bool,
) -> Result<MusicBenchRow> {
    let prompt_len = context - WARMUP_FRAMES - frames - 2;
    // One frame more than stepped, and one for the profiled frame.
    let max_frames = WARMUP_FRAMES + frames + 2;
    let mut rng = SplitMix64::new(songs as u64 ^ context as u64);
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(songs);
    for s in 0..songs {
        let req = synthetic_song(&mut rng, prompt_len, s as u64, max_frames);
        // Every song runs from the first timed frame.
        ids.push(stage.add_song_prefilled(req)?);
    }
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3 / songs as f64;
    for _ in 0..WARMUP_FRAMES {
        stage.step(&mut |_| {})?;
    }
    let mut times = Vec::with_capacity(frames);
    for _ in 0..frames {
        let t = Instant::now();
        stage.step(&mut |_| {})?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let device_ms = stage.device_ms(songs, DEVICE_REPLAYS)?;
    let graph_nodes = stage.graph_nodes(songs);
    if profile_frame {
        let (_, ops) = stage.profile_ops(|s| s.step(&mut |_| {}))?;
        print_ops(&format!("frame ops, {songs} songs at {context}"), ops);
    }
    for id in ids {
        // Every song has a frame left (max_frames = warm-up + timed + 2), so each is still running.
        stage.cancel(id)?;
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let ms = device_ms.unwrap_or(median);
    Ok(MusicBenchRow {
        backend: stage.describe(),
        songs,
        context,
        frames,
        prefill_ms_per_song: prefill_ms,
        ms_per_frame_median: median,
        ms_per_frame_mean: mean,
        device_ms_per_frame: device_ms,
        graph_nodes,
        frames_per_s: songs as f64 * 1e3 / median,
        realtime_factor: 1e3 / median / FRAME_RATE,
        read_gb_per_s: frame_bytes(model, songs, context, stage.bytes_per_weight())
            / (ms * 1e-3)
            / 1e9,
    })
}

/// Bytes one frame reads: every weight the frame multiplies by (the LM's linears and audio head,
/// the depth decoder's projection and layers at each of its positions, its 7 heads, the gathered
/// embedding rows aside; int8 linears at one byte per weight plus their scales) plus each song's K
/// and V over its context.
fn frame_bytes(model: &MusicModel, songs: usize, context: usize, bytes_per_weight: usize) -> f64 {
    let lm = &model.lm_config;
    let h = lm.hidden_size;
    let b = bytes_per_weight;
    let lin = |l: &chorus_lm::HostLinear| l.bytes(b);
    let lm_w: usize = model
        .lm
        .layers
        .iter()
        .flat_map(|l| l.linears())
        .map(lin)
        .sum::<usize>()
        + chorus_music::config::AUDIO_LOGITS * h * b;
    let positions = DRAWS_PER_FRAME as usize;
    let depth_step = lin(&model.depth.projection)
        + model
            .depth
            .layers
            .iter()
            .flat_map(|l| l.linears())
            .map(lin)
            .sum::<usize>();
    let heads: usize = model.depth.audio_heads.iter().map(lin).sum();
    let kv = songs * 2 * context * lm.num_hidden_layers * 2 * lm.num_key_value_heads * lm.head_dim;
    (lm_w + positions * depth_step + heads + kv * b) as f64
}
