//! `chorus transcribe`: an audio file to text with Kyutai STT: the file (with the model's silence
//! prefix before it and its flush of silence after it) as PCM through the STT stream stage, Mimi's
//! encoder inside its step, the words (optionally with their times) and the VAD heads'
//! pause probabilities printed.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use chorus_core::{FRAME_SAMPLES, SAMPLE_RATE};
use chorus_lm::Sampling;
use chorus_runtime::bulk::read_audio_input;
use chorus_runtime::device::DeviceKind;
use chorus_runtime::{AnyStt, SttSpec};
use chorus_stt::config::FRAME_RATE;
use chorus_stt::frame::DrawSettings;
use chorus_stt::{StreamEvent, StreamRequest, SttOptions, SttTokenizer, WordEvent};

#[derive(clap::Args, Debug)]
pub struct TranscribeArgs {
    /// `kyutai/stt-1b-en_fr` or `kyutai/stt-2.6b-en` (hub), a directory, explicit files, or
    /// `random`, `random-2.6b`, `random-small`.
    #[arg(long, default_value = "kyutai/stt-1b-en_fr")]
    pub model: String,
    /// The Mimi codec that turns audio into codes (default: `kyutai/mimi`, `random` for a random
    /// model).
    #[arg(long)]
    pub mimi: Option<String>,
    /// Audio: WAV, FLAC, MP3, Ogg Vorbis or Opus; any rate (resampled to 24 kHz), mixed to mono.
    #[arg(long)]
    pub audio: PathBuf,
    /// Print each word with its start and end (seconds from the start of the file).
    #[arg(long)]
    pub timestamps: bool,
    /// Print the VAD heads' pause probabilities (0.5, 1, 2, 3 s) of every 80 ms step.
    #[arg(long)]
    pub vad: bool,
    /// The SentencePiece `.model` (default: the one beside the model).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
    /// greedy (Kyutai's configs), seeded or noise.
    #[arg(long, default_value = "greedy")]
    pub sampling: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Of sampled draws (Gumbel-max over the whole vocabulary, as moshi-server draws).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,
    /// Mimi codebooks the model reads, the first N (1..=32; default all; Unmute runs the 1B
    /// with 20).
    #[arg(long)]
    pub codebooks: Option<usize>,
    /// Also print the text token of every step (one line of ids).
    #[arg(long)]
    pub tokens: bool,
    #[arg(long)]
    pub threads: Option<usize>,
    /// f32 or bf16 (default: f32 on the CPU, bf16 on CUDA).
    #[arg(long, value_parser = crate::decode::parse_precision)]
    pub precision: Option<chorus_core::Precision>,
}

/// One word as printed.
struct Word {
    text: String,
    start: f32,
    end: Option<f32>,
}

pub fn run(args: TranscribeArgs) -> Result<()> {
    let model = crate::load_stt(&args.model)?;
    let c = model.config.clone();
    if args.vad && c.extra_heads == 0 {
        bail!(
            "`{}` has no VAD heads (stt-2.6b-en has none; kyutai/stt-1b-en_fr has four): drop --vad",
            args.model
        );
    }
    let loaded;
    let tok = match &args.tokenizer {
        Some(p) => {
            loaded = SttTokenizer::from_file(p, &c)?;
            &loaded
        }
        None => model.tokenizer.as_ref().context(
            "the model has no SentencePiece .model beside it (fix: pass --tokenizer PATH)",
        )?,
    };
    let mimi_spec = args.mimi.clone().unwrap_or_else(|| {
        if model.is_random() {
            "random"
        } else {
            "kyutai/mimi"
        }
        .into()
    });
    let mimi = crate::load(&mimi_spec)?;
    if mimi.config.num_quantizers < c.num_codebooks {
        bail!(
            "the Mimi codec `{mimi_spec}` has {} codebooks; the STT model reads {}",
            mimi.config.num_quantizers,
            c.num_codebooks
        );
    }
    let mut opts = SttOptions::for_streams(1)?;
    let sampling = Sampling::parse(&args.sampling, args.seed)?;
    if sampling != Sampling::Greedy {
        opts.draws = DrawSettings::for_temperature(args.temperature, c.text_vocab)?
            .context("a sampled draw needs --temperature above 0 (0 is --sampling greedy)")?;
    }
    opts.audio_codebooks = args.codebooks;
    let mut input = read_audio_input(&args.audio, false, None)?;
    let seconds = input.seconds;
    // The silence the model was trained to see first, then the audio, then the flush.
    let prefix = (c.silence_prefix_seconds * SAMPLE_RATE as f32).round() as usize;
    let flush = (c.text_delay_frames + FRAME_RATE.ceil() as usize) * FRAME_SAMPLES;
    let mut samples = vec![0.0; prefix];
    samples.append(&mut input.samples);
    samples.resize(samples.len() + flush, 0.0);
    input.frames = samples.len().div_ceil(FRAME_SAMPLES);
    input.samples = samples;
    opts.max_frames = input.frames;
    let spec = SttSpec {
        device: args.device,
        precision: args.precision,
        threads: args.threads,
        cuda_device: chorus_runtime::device::DEFAULT_CUDA_DEVICE,
    };
    let mut stage = AnyStt::open(&model, Some(&mimi), &spec, opts)
        .with_context(|| format!("opening the STT stage with the Mimi codec `{mimi_spec}`"))?;
    eprintln!(
        "transcribing {} ({seconds:.2} s, {} frames with the silence around it) on {}",
        args.audio.display(),
        input.frames,
        stage.describe()
    );
    let id = stage.add(StreamRequest {
        sampling,
        forced: None,
    })?;
    stage
        .push_pcm(id, &input.samples)
        .with_context(|| format!("reading {}", args.audio.display()))?;
    stage.end(id)?;
    let t1 = Instant::now();
    let offset = c.silence_prefix_seconds;
    let (mut words, mut vad, mut steps) = (Vec::<Word>::new(), Vec::new(), 0usize);
    let mut tokens = Vec::new();
    let mut failed = None;
    stage.drain(&mut |e| match e {
        StreamEvent::Token { vad: v, token, .. } => {
            steps += 1;
            tokens.push(token.to_string());
            if let Some(v) = v {
                vad.push(v.to_vec());
            }
        }
        StreamEvent::Word { event, .. } => match event {
            WordEvent::Word { tokens, start } => match tok.decode(&tokens) {
                Ok(text) => words.push(Word {
                    text,
                    start: (start - offset).max(0.0),
                    end: None,
                }),
                Err(e) => failed = Some(e),
            },
            WordEvent::EndWord { stop } => {
                if let Some(w) = words.last_mut() {
                    w.end = Some((stop - offset).max(0.0));
                }
            }
        },
        StreamEvent::Ended { .. } => {}
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    let lm_s = t1.elapsed().as_secs_f64();
    eprintln!(
        "{steps} steps in {lm_s:.2} s ({:.1}x real time, Mimi's encoder in the step), {} words",
        steps as f64 / FRAME_RATE as f64 / lm_s.max(1e-9),
        words.len()
    );
    let text: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
    println!("{}", text.join(" "));
    if args.tokens {
        println!("tokens\t{}", tokens.join(" "));
    }
    if args.timestamps {
        for w in &words {
            let end = w.end.map_or_else(|| "-".to_string(), |e| format!("{e:.2}"));
            println!("{:.2}\t{end}\t{}", w.start, w.text);
        }
    }
    if args.vad {
        println!("time\tpause_0.5s\tpause_1s\tpause_2s\tpause_3s");
        for (p, v) in vad.iter().enumerate() {
            let t = (p as f32 / FRAME_RATE - offset).max(0.0);
            let cols: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
            println!("{t:.2}\t{}", cols.join("\t"));
        }
    }
    Ok(())
}
