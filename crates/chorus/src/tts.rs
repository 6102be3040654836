//! `chorus tts`: one utterance of Sesame CSM from text (optionally after a context turn whose
//! voice it continues) to a WAV file, with the frames' audio decoded by Mimi inside each frame.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use chorus_core::FRAME_SAMPLES;
use chorus_csm::prompt::{build_prompt, build_prompt_ids, PromptFrame, PromptLimits, Segment};
use chorus_csm::{CsmModel, CsmTokenizer, EndReason, TtsOptions, UtteranceEvent, UtteranceRequest};
use chorus_lm::Sampling;
use chorus_mimi::checkpoint::LoadedModel;
use chorus_runtime::bulk::read_audio_input;
use chorus_runtime::device::DeviceKind;
use chorus_runtime::tts::{AnyTts, TtsSpec};

use crate::audio_out::{write_streams, WavFormat};

/// Mimi frames per second of audio.
const FRAME_RATE: f64 = 12.5;
/// Frames below which no progress bar is drawn.
const PROGRESS_MIN_FRAMES: usize = 25;

#[derive(clap::Args, Debug)]
pub struct TtsArgs {
    /// `sesame/csm-1b` (hub), a directory, explicit files, `random` or `random-small`.
    #[arg(long, default_value = "sesame/csm-1b")]
    pub model: String,
    /// The Mimi codec that turns codes into audio (default: `kyutai/mimi`, `random` for a random
    /// speech model).
    #[arg(long)]
    pub mimi: Option<String>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
    /// The text to say.
    #[arg(long, conflicts_with = "prompt_ids")]
    pub text: Option<String>,
    /// Speaker id of the text.
    #[arg(long, default_value_t = 0)]
    pub speaker: u32,
    /// An earlier utterance whose voice to continue: an audio file (WAV, FLAC, MP3, Ogg; any rate).
    #[arg(long, requires = "context_text")]
    pub context: Option<PathBuf>,
    /// What is said in `--context`.
    #[arg(long, requires = "context")]
    pub context_text: Option<String>,
    /// Speaker id of the context turn (default: `--speaker`).
    #[arg(long)]
    pub context_speaker: Option<u32>,
    /// Ready token ids of the whole text segment (BOS, `[speaker]text`, EOS): integer `.npy` `[P]`.
    #[arg(long)]
    pub prompt_ids: Option<PathBuf>,
    /// tokenizer.json (default: the one beside the model).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// WAV output (16-bit; `.npy` writes float32 samples).
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the generated codes: int64 `.npy` `[codebooks, T]`.
    #[arg(long)]
    pub codes: Option<PathBuf>,
    /// Most seconds of audio (12.5 frames per second); the utterance ends earlier when the model
    /// draws its end frame.
    #[arg(long, default_value_t = 10.0)]
    pub max_seconds: f64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// seeded, greedy or noise.
    #[arg(long, default_value = "seeded")]
    pub sampling: String,
    /// Of sampled draws (upstream: 0.9; 0 draws greedily).
    #[arg(long, default_value_t = 0.9)]
    pub temperature: f32,
    /// Candidates of sampled draws (upstream: 50; 1..=2051).
    #[arg(long, default_value_t = 50)]
    pub top_k: usize,
    #[arg(long)]
    pub threads: Option<usize>,
    /// f32 or bf16 (default: f32 on the CPU, bf16 on CUDA).
    #[arg(long, value_parser = crate::decode::parse_precision)]
    pub precision: Option<chorus_core::Precision>,
}

pub fn run(args: TtsArgs) -> Result<()> {
    if !(args.max_seconds > 0.0 && args.max_seconds.is_finite()) {
        bail!("--max-seconds {} must be positive", args.max_seconds);
    }
    let max_frames = (args.max_seconds * FRAME_RATE).ceil() as usize;
    let model = crate::load_csm(&args.model)?;
    let mimi_spec = args
        .mimi
        .clone()
        .unwrap_or_else(|| crate::serve_tts::default_mimi(&model).into());
    let mimi = crate::load(&mimi_spec)?;
    let prompt = prompt(&args, &model, &mimi, max_frames)?;
    let sampling = Sampling::parse(&args.sampling, args.seed)?;
    let mut opts = TtsOptions::for_utterances(1, prompt.len() + max_frames)?;
    opts.draws.temperature = args.temperature;
    opts.draws.top_k = args.top_k;
    let spec = TtsSpec {
        device: args.device,
        precision: args.precision,
        threads: args.threads,
        cuda_device: chorus_runtime::device::DEFAULT_CUDA_DEVICE,
    };
    let mut stage = AnyTts::open(&model, Some(&mimi), &spec, opts)?;
    eprintln!(
        "speaking {} prompt frames, at most {max_frames} frames ({:.1} s), {} on {}",
        prompt.len(),
        max_frames as f64 / FRAME_RATE,
        args.sampling,
        stage.describe()
    );
    let req = UtteranceRequest {
        prompt,
        max_frames,
        sampling,
        draws: None,
        forced: None,
    };
    let t0 = Instant::now();
    stage.add(req)?;
    let bar = (max_frames >= PROGRESS_MIN_FRAMES).then(|| {
        let b = indicatif::ProgressBar::new(max_frames as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} frames {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let books = model.config.num_codebooks;
    let (mut codes, mut pcm, mut end, mut first_audio) = (Vec::new(), Vec::new(), None, None);
    while stage.active() > 0 {
        stage.step(&mut |e| match e {
            UtteranceEvent::Frame {
                codes: c, pcm: p, ..
            } => {
                codes.extend_from_slice(c);
                if let Some(p) = p {
                    pcm.extend_from_slice(p);
                }
                first_audio.get_or_insert_with(|| t0.elapsed());
                if let Some(b) = &bar {
                    b.inc(1);
                    let audio = b.position() as f64 / FRAME_RATE;
                    b.set_message(format!(
                        "{:.1}x real time",
                        audio / t0.elapsed().as_secs_f64()
                    ));
                }
            }
            UtteranceEvent::Ended { reason, .. } => end = Some(reason),
        })?;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let frames = codes.len() / books;
    let secs = t0.elapsed().as_secs_f64();
    let why = match end {
        Some(EndReason::EndFrame) => "the model's end frame",
        Some(EndReason::MaxFrames) => "the length cap",
        _ => "the end of the forced codes",
    };
    eprintln!(
        "{frames} frames ({:.2} s of audio) in {secs:.2} s ({:.1}x real time), ended by {why}; first audio after {:.0} ms",
        frames as f64 / FRAME_RATE,
        frames as f64 / FRAME_RATE / secs,
        first_audio.map_or(0.0, |d| d.as_secs_f64() * 1e3)
    );
    debug_assert_eq!(pcm.len(), frames * FRAME_SAMPLES);
    for p in write_streams(&args.out, &[pcm], WavFormat::Pcm16)? {
        eprintln!("wrote {}", p.display());
    }
    if let Some(path) = &args.codes {
        // `[codebooks, T]`, as `chorus decode` reads codes.
        let mut t = vec![0i64; codes.len()];
        for (f, row) in codes.chunks_exact(books).enumerate() {
            for (q, &c) in row.iter().enumerate() {
                t[q * frames + f] = i64::from(c);
            }
        }
        let bytes = chorus_core::npy::write_npy_i64(&[books, frames], &t);
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} ([{books}, {frames}] codes)", path.display());
    }
    Ok(())
}

/// The utterance's prompt frames: ready ids, or the text after the optional context turn.
fn prompt(
    args: &TtsArgs,
    model: &CsmModel,
    mimi: &LoadedModel,
    max_frames: usize,
) -> Result<Vec<PromptFrame>> {
    let c = &model.config;
    let limits = PromptLimits::new(c, max_frames);
    if let Some(path) = &args.prompt_ids {
        let (shape, ids) = crate::codes_file::read_u32_npy(path, "prompt ids")?;
        if shape.len() != 1 {
            bail!(
                "{}: prompt ids have shape {shape:?}; expected [P]",
                path.display()
            );
        }
        return Ok(build_prompt_ids(&[], &ids, &limits)?);
    }
    let Some(text) = &args.text else {
        bail!("give --text (or --prompt-ids)");
    };
    let loaded;
    let tok = match &args.tokenizer {
        Some(p) => {
            loaded = CsmTokenizer::from_file(p, c)?;
            &loaded
        }
        None => model.tokenizer.as_ref().context(
            "the model has no tokenizer.json beside it (fix: pass --tokenizer PATH to the Llama 3.2 tokenizer.json, or --prompt-ids)",
        )?,
    };
    let context = match (&args.context, &args.context_text) {
        (Some(audio), Some(ctx_text)) => {
            let input = read_audio_input(audio, false, None)?;
            let codes = crate::mimi_codes::encode_frames(input, mimi, c.num_codebooks, args.device)
                .with_context(|| format!("encoding --context {}", audio.display()))?;
            eprintln!(
                "context {}: {} frames encoded",
                audio.display(),
                codes.len()
            );
            vec![Segment {
                speaker: args.context_speaker.unwrap_or(args.speaker),
                text: ctx_text.clone(),
                audio: Some(codes),
            }]
        }
        _ => Vec::new(),
    };
    Ok(build_prompt(tok, &context, args.speaker, text, &limits)?)
}
