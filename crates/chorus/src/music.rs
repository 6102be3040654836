//! `chorus music`: one song's semantic stage, from caption and lyrics (or ready prompt ids) to a
//! safetensors file of codes and frame hiddens for the acoustic stage.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use chorus_core::checkpoint::{write_tensors, TensorData};
use chorus_music::config::FRAME_RATE;
use chorus_music::prompt::{PromptIds, PromptTokenizer};
use chorus_music::song::{frames_for_seconds, LEVELS};
use chorus_music::{EndReason, MusicModel, Sampling, SongEvent, SongRequest};

use chorus_runtime::device::DeviceKind;
use chorus_runtime::music::{AnyStage, StageSpec};

#[derive(clap::Args, Debug)]
pub struct MusicArgs {
    /// `random-small`, `random`, a directory, `LM.safetensors,DEPTH.safetensors`, or a hub repo
    /// id with a subfolder (e.g. `DeepBeepMeep/TTS/MiniMaxMusic3-Qwen3`).
    #[arg(long)]
    pub model: String,
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceKind,
    /// Music description.
    #[arg(long, conflicts_with = "prompt_ids")]
    pub caption: Option<String>,
    /// Lyrics file (UTF-8 text).
    #[arg(long, conflicts_with = "prompt_ids")]
    pub lyrics: Option<PathBuf>,
    /// tokenizer.json (default: the one beside the model).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Ready prompt ids: `.npy` integers `[P]` (conditional row) or `[2, P]` (both rows).
    #[arg(long)]
    pub prompt_ids: Option<PathBuf>,
    /// Song length in seconds (1..=360; 25 frames per second, at most 9,000 frames).
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// seeded, greedy or noise.
    #[arg(long, default_value = "seeded")]
    pub sampling: String,
    /// Never draw END: always generate the full length.
    #[arg(long)]
    pub no_end: bool,
    /// Output `.safetensors`: `codes` int32 `[T, 8]`, `frame_hiddens` bf16 `[T, 8 * hidden]`.
    #[arg(long)]
    pub out: PathBuf,
    /// CPU threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// f32 or bf16 (default: f32 on the CPU, bf16 on CUDA).
    #[arg(long, value_parser = crate::decode::parse_precision)]
    pub precision: Option<chorus_core::Precision>,
    /// CUDA: a song's codes do not depend on the songs sharing its steps (every product and
    /// attention split summed in one order per row; slower from 2 songs, docs/PERFORMANCE.md).
    #[arg(long)]
    pub batch_invariant: bool,
    /// The LM's KV cache: `bf16` (the backend's storage type) or `fp8` (E4M3, a scale per head).
    #[arg(long, default_value = "bf16", value_parser = parse_kv_cache)]
    pub kv_cache: chorus_music::KvCache,
}

/// Clap's parser of a KV cache type.
pub fn parse_kv_cache(s: &str) -> std::result::Result<chorus_music::KvCache, String> {
    chorus_music::KvCache::parse(s).map_err(|e| e.to_string())
}

pub fn run(args: MusicArgs) -> Result<()> {
    let max_frames = frames_for_seconds(args.seconds)?;
    let sampling = Sampling::parse(&args.sampling, args.seed)?;
    let model = crate::load_music(&args.model)?;
    let prompt = build_prompt(&args, &model)?;
    let spec = StageSpec {
        device: args.device,
        precision: args.precision,
        songs: 1,
        max_context: prompt.len() + max_frames + 1,
        threads: args.threads,
        batch_invariant: args.batch_invariant,
        prefill_chunk: None,
        kv_cache: args.kv_cache,
    };
    let mut stage = AnyStage::open(&model, &spec)?;
    let hidden = model.lm_config.hidden_size;
    drop(model);
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;

    let id = stage.add_song(SongRequest {
        prompt,
        max_frames,
        sampling,
        allow_end: !args.no_end,
        forced: None,
    })?;
    let bar = indicatif::ProgressBar::new(max_frames as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} frames {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut codes: Vec<i32> = Vec::with_capacity(max_frames * LEVELS);
    let mut hiddens: Vec<u16> = Vec::with_capacity(max_frames * LEVELS * hidden);
    let mut end = None;
    let start = Instant::now();
    while end.is_none() {
        if interrupted.load(Ordering::SeqCst) {
            stage.cancel(id)?;
            end = Some(EndReason::Cancelled);
            break;
        }
        stage.step(&mut |ev| match ev {
            SongEvent::Frame {
                codes: c,
                hidden: h,
                ..
            } => {
                codes.extend(c.iter().map(|&x| x as i32));
                hiddens.extend(h.iter().map(|&x| half::bf16::from_f32(x).to_bits()));
            }
            SongEvent::Ended { reason, .. } => end = Some(reason),
        })?;
        let frames = codes.len() / LEVELS;
        let rtf = frames as f64 / FRAME_RATE / start.elapsed().as_secs_f64().max(1e-9);
        bar.set_position(frames as u64);
        bar.set_message(format!("{rtf:.2}x real time"));
    }
    bar.finish();
    let frames = codes.len() / LEVELS;
    if frames == 0 && end == Some(EndReason::Cancelled) {
        eprintln!("interrupted before the first frame: nothing written");
        std::process::exit(130);
    }
    if frames == 0 {
        bail!("generated zero audio frames (the model drew END at once); try another seed or --no-end");
    }
    write_song(&args.out, &codes, &hiddens, hidden, &args)?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{frames} frames ({:.2} s of music) in {secs:.2} s ({:.2}x real time), ended by {:?}: {}",
        frames as f64 / FRAME_RATE,
        frames as f64 / FRAME_RATE / secs,
        end.unwrap_or(EndReason::MaxFrames),
        args.out.display()
    );
    if end == Some(EndReason::Cancelled) {
        eprintln!("interrupted: the file holds the frames generated so far");
        std::process::exit(130);
    }
    Ok(())
}

/// The prompt from `--prompt-ids`, or caption and lyrics through the tokenizer.
fn build_prompt(args: &MusicArgs, model: &MusicModel) -> Result<PromptIds> {
    let vocab = model.lm_config.vocab_size;
    if let Some(path) = &args.prompt_ids {
        return read_prompt_ids(path, vocab);
    }
    let (Some(caption), Some(lyrics)) = (&args.caption, &args.lyrics) else {
        bail!("give --caption and --lyrics (with a tokenizer), or --prompt-ids");
    };
    let lyrics = std::fs::read_to_string(lyrics)
        .with_context(|| format!("reading lyrics {}", lyrics.display()))?;
    let tok_path = args
        .tokenizer
        .clone()
        .or_else(|| model.tokenizer.clone())
        .context("no tokenizer: pass --tokenizer tokenizer.json (the model folder has none)")?;
    let tok = PromptTokenizer::from_file(&tok_path)?;
    Ok(tok.encode(caption, &lyrics, vocab)?)
}

/// `.npy` ids: `[P]` (the CFG row is derived) or `[2, P]`.
pub fn read_prompt_ids(path: &Path, vocab: usize) -> Result<PromptIds> {
    let (shape, ids) = crate::codes_file::read_u32_npy(path, "prompt ids")?;
    match shape.as_slice() {
        [_] => Ok(PromptIds::from_cond(ids, vocab)?),
        [2, p] => Ok(PromptIds::from_pair(
            ids[..*p].to_vec(),
            ids[*p..].to_vec(),
            vocab,
        )?),
        other => bail!(
            "{}: prompt ids have shape {other:?}; expected [P] or [2, P]",
            path.display()
        ),
    }
}

fn write_song(
    out: &Path,
    codes: &[i32],
    hiddens: &[u16],
    hidden: usize,
    args: &MusicArgs,
) -> Result<()> {
    let t = codes.len() / LEVELS;
    let tensors = [
        (
            "codes".to_string(),
            TensorData::I32 {
                shape: vec![t, LEVELS],
                data: codes,
            },
        ),
        (
            "frame_hiddens".to_string(),
            TensorData::Bf16Bits {
                shape: vec![t, LEVELS * hidden],
                bits: hiddens,
            },
        ),
    ];
    let meta = [
        ("model", args.model.clone()),
        ("seed", args.seed.to_string()),
        ("sampling", args.sampling.clone()),
        ("frame_rate", FRAME_RATE.to_string()),
    ];
    write_tensors(out, &tensors, &meta).with_context(|| format!("writing {}", out.display()))
}
