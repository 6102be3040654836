//! `chorus music-bench`: milliseconds per frame step and frames per second for a number of songs
//! decoding together at a given context length.

use std::time::Instant;

use anyhow::{bail, Result};
use chorus_core::rng::SplitMix64;
use chorus_core::{Backend, Buckets};
use chorus_music::prompt::PromptIds;
use chorus_music::{Sampling, SongRequest};

use crate::device::DeviceKind;
use crate::music_stage::open_stage;

/// Base-vocabulary ids drawn for synthetic prompts (below Qwen2's added tokens).
const BASE_VOCAB: u64 = 151_643;
/// Untimed frames after the prefill.
const WARMUP_FRAMES: usize = 2;

#[derive(clap::Args, Debug)]
pub struct MusicBenchArgs {
    #[arg(long, default_value = "random-small")]
    pub model: String,
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceKind,
    /// Songs per step, comma-separated.
    #[arg(long, default_value = "1,8,32")]
    pub songs: String,
    /// Context length (positions per row) at which frames are timed: the prompt fills it.
    #[arg(long, default_value_t = 1000)]
    pub context: usize,
    /// Timed frames per song count.
    #[arg(long, default_value_t = 10)]
    pub frames: usize,
    #[arg(long)]
    pub threads: Option<usize>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One song count's figures.
#[derive(Debug, serde::Serialize)]
pub struct MusicBenchRow {
    pub backend: String,
    pub songs: usize,
    pub context: usize,
    pub frames: usize,
    pub prefill_ms_per_song: f64,
    pub ms_per_frame_median: f64,
    pub ms_per_frame_mean: f64,
    /// Frames per second over all songs.
    pub frames_per_s: f64,
    /// Each song's speed over real time (25 frames/s).
    pub realtime_factor: f64,
}

pub fn run(args: MusicBenchArgs) -> Result<()> {
    let counts = Buckets::parse(&args.songs)?;
    if args.frames == 0 || args.context < WARMUP_FRAMES + args.frames + 4 {
        bail!(
            "--frames must be positive and --context at least frames + {}",
            WARMUP_FRAMES + 4
        );
    }
    let model = crate::load_music(&args.model)?;
    let prompt_len = args.context - WARMUP_FRAMES - args.frames - 1;
    let max_frames = WARMUP_FRAMES + args.frames + 1;
    if !args.json {
        println!(
            "{:>6} {:>8} {:>12} {:>12} {:>12} {:>10}",
            "songs", "context", "prefill ms", "ms/frame", "frames/s", "x realtime"
        );
    }
    for &songs in counts.sizes() {
        let mut stage = open_stage(
            &model,
            args.device,
            songs,
            prompt_len + max_frames + 1,
            args.threads,
        )?;
        let mut rng = SplitMix64::new(songs as u64);
        let t0 = Instant::now();
        for s in 0..songs {
            let cond: Vec<u32> = (0..prompt_len)
                .map(|_| (rng.next_u64() % BASE_VOCAB) as u32)
                .collect();
            let req = SongRequest {
                prompt: PromptIds::from_cond(cond, model.lm_config.vocab_size)?,
                max_frames,
                sampling: Sampling::Seeded(s as u64),
                allow_end: false,
                forced: None,
            };
            stage.add_song(req)?;
        }
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3 / songs as f64;
        for _ in 0..WARMUP_FRAMES {
            stage.step(&mut |_| {})?;
        }
        let mut times = Vec::with_capacity(args.frames);
        for _ in 0..args.frames {
            let t = Instant::now();
            stage.step(&mut |_| {})?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let row = MusicBenchRow {
            backend: stage.backend().device_description(),
            songs,
            context: args.context,
            frames: args.frames,
            prefill_ms_per_song: prefill_ms,
            ms_per_frame_median: median,
            ms_per_frame_mean: mean,
            frames_per_s: songs as f64 * 1e3 / median,
            realtime_factor: 1e3 / median / chorus_music::config::FRAME_RATE,
        };
        if args.json {
            println!("{}", serde_json::to_string(&row)?);
        } else {
            println!(
                "{:>6} {:>8} {:>12.1} {:>12.2} {:>12.1} {:>10.2}",
                row.songs,
                row.context,
                row.prefill_ms_per_song,
                row.ms_per_frame_median,
                row.frames_per_s,
                row.realtime_factor
            );
        }
    }
    Ok(())
}
