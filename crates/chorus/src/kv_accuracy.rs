//! `chorus music-bench --kv-accuracy FRAMES`: what the 8-bit KV cache costs in accuracy. One song
//! runs on a stage with a bf16 cache, free-running (seeded); then on a stage with an fp8 cache,
//! teacher-forced with the bf16 run's codes (relative L2 of every frame's hiddens and logits,
//! over all frames), and free-running with the same seed (the share of identical codes).

use anyhow::{bail, Result};
use chorus_core::rng::SplitMix64;
use chorus_music::{KvCache, MusicModel, SongRequest};
use chorus_runtime::music::{AnyStage, StageSpec};

use crate::music_bench::synthetic_song;

/// Codebooks per frame.
const LEVELS: usize = chorus_music::song::LEVELS;

/// One loop frame as its trace shows it: codes, hiddens (the LM's and the depth decoder's, both
/// rows) and logits (c0's and the 7 levels', both rows).
struct Frame {
    codes: [u32; LEVELS],
    hidden: Vec<f32>,
    logits: Vec<f32>,
}

/// Runs `req` alone on `stage` to its end; returns every loop frame.
fn run_song(stage: &mut AnyStage, req: SongRequest) -> Result<Vec<Frame>> {
    stage.add_song(req)?;
    let mut frames = Vec::new();
    while stage.active() > 0 {
        stage.step(&mut |_| {})?;
        let t = stage.trace()?;
        if t.songs.is_empty() {
            continue;
        }
        let mut hidden = t.h;
        t.depth_out.iter().for_each(|d| hidden.extend_from_slice(d));
        let mut logits = t.logits;
        t.head_logits
            .iter()
            .for_each(|l| logits.extend_from_slice(l));
        frames.push(Frame {
            codes: std::array::from_fn(|l| t.codes[l] as u32),
            hidden,
            logits,
        });
    }
    Ok(frames)
}

/// Sums of squares of a difference and of its reference, and the worst frame's ratio.
#[derive(Default)]
struct Err2 {
    num: f64,
    den: f64,
    worst: f64,
}

impl Err2 {
    fn add(&mut self, got: &[f32], want: &[f32]) {
        let (mut n, mut d) = (0f64, 0f64);
        for (&g, &w) in got.iter().zip(want) {
            n += (g as f64 - w as f64).powi(2);
            d += (w as f64).powi(2);
        }
        self.num += n;
        self.den += d;
        if d > 0.0 {
            self.worst = self.worst.max((n / d).sqrt());
        }
    }

    fn rel(&self) -> f64 {
        (self.num / self.den.max(f64::MIN_POSITIVE)).sqrt()
    }
}

pub fn run(model: &MusicModel, spec: &StageSpec, tokens: usize, frames: usize) -> Result<()> {
    if frames == 0 || tokens < 3 {
        bail!("--kv-accuracy needs at least one frame and --prefill-tokens of at least 3");
    }
    let open = |kv_cache: KvCache| {
        let s = StageSpec {
            songs: 1,
            max_context: tokens + frames + 2,
            kv_cache,
            ..*spec
        };
        AnyStage::open(model, &s)
    };
    let song = |forced: Option<Vec<[u32; LEVELS]>>| {
        let mut req = synthetic_song(&mut SplitMix64::new(17), tokens, 7, frames);
        req.forced = forced;
        req
    };
    let mut bf16 = open(KvCache::Native)?;
    let reference = run_song(&mut bf16, song(None))?;
    drop(bf16);
    let mut fp8 = open(KvCache::Fp8)?;
    let forced: Vec<[u32; LEVELS]> = reference.iter().map(|f| f.codes).collect();
    let taught = run_song(&mut fp8, song(Some(forced)))?;
    let free = run_song(&mut fp8, song(None))?;
    let (mut hidden, mut logits) = (Err2::default(), Err2::default());
    for (t, r) in taught.iter().zip(&reference) {
        hidden.add(&t.hidden, &r.hidden);
        logits.add(&t.logits, &r.logits);
    }
    let compared = free.len().min(reference.len());
    let same = (0..compared)
        .flat_map(|f| (0..LEVELS).map(move |l| (f, l)))
        .filter(|&(f, l)| free[f].codes[l] == reference[f].codes[l])
        .count();
    let same_c0 = (0..compared)
        .filter(|&f| free[f].codes[0] == reference[f].codes[0])
        .count();
    let first_diff = (0..compared).find(|&f| free[f].codes != reference[f].codes);
    println!(
        "KV cache fp8 against bf16, one song, {tokens}-token prompt, {} frames teacher-forced: \
         hiddens rel L2 {:.3e} (worst frame {:.3e}), logits rel L2 {:.3e} (worst frame {:.3e}); \
         free-running {compared} frames: {:.1}% of codes identical ({:.1}% of c0), first \
         difference at frame {}",
        taught.len().min(reference.len()),
        hidden.rel(),
        hidden.worst,
        logits.rel(),
        logits.worst,
        100.0 * same as f64 / (compared * LEVELS).max(1) as f64,
        100.0 * same_c0 as f64 / compared.max(1) as f64,
        first_diff.map_or("none".into(), |f| f.to_string())
    );
    Ok(())
}
