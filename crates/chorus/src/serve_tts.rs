//! `chorus serve --tts-model`: the Sesame CSM speech stage behind `/v1/tts`, built on its owner
//! thread through the runtime's `AnyTts::open` (the same build as `chorus tts`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use chorus_csm::{CsmTokenizer, TtsOptions};
use chorus_runtime::device::DeviceKind;
use chorus_runtime::tts::{AnyTts, TtsSpec};
use chorus_server::stage::DeviceStage;
use chorus_server::tts::{TtsConfig, TtsEngine, TtsStageFactory};

use crate::serve_devices::{describe, on_cuda, StageDevice};

/// Default utterances the speech stage generates at once.
const DEFAULT_TTS_UTTERANCES: usize = 8;
/// Default positions per utterance (prompt + frames): csm-1b's backbone holds 2,048.
const DEFAULT_TTS_CONTEXT: usize = 2048;

#[derive(clap::Args, Debug, Clone)]
pub struct TtsServeArgs {
    /// Also serve Sesame CSM text to speech on `/v1/tts`: `sesame/csm-1b` (hub), a directory,
    /// explicit files, `random` or `random-small`. Without it `/v1/tts` answers 404
    /// `not_enabled`.
    #[arg(long)]
    pub tts_model: Option<String>,
    /// The Mimi codec that turns each frame's codes into audio (default: `kyutai/mimi`, `random`
    /// for a random speech model).
    #[arg(long, requires = "tts_model")]
    pub tts_mimi: Option<String>,
    /// tokenizer.json for `text` requests (default: the one beside the model; without one only
    /// `prompt_ids` requests are served).
    #[arg(long, requires = "tts_model")]
    pub tts_tokenizer: Option<PathBuf>,
    /// Utterances generated at once (seats) per device; more are refused as busy.
    #[arg(long, default_value_t = DEFAULT_TTS_UTTERANCES)]
    pub tts_utterances: usize,
    /// Positions per utterance: prompt frames (context turns included) + generated frames
    /// (12.5 per second); capped at the model's positions.
    #[arg(long, default_value_t = DEFAULT_TTS_CONTEXT)]
    pub tts_context: usize,
    /// Device of the speech stage (CUDA: bf16 unless `--precision f32`, one graph per bucket;
    /// default: cpu). Refused beside `--devices`, which runs one stage per listed device.
    #[arg(long, value_enum)]
    pub tts_device: Option<DeviceKind>,
    /// Temperature of a request that sets none (upstream: 0.9; 0 draws greedily).
    #[arg(long, default_value_t = chorus_csm::UPSTREAM_DRAWS.temperature)]
    pub tts_temperature: f32,
    /// Top-k of a request that sets none (upstream: 50; at most 2051).
    #[arg(long, default_value_t = chorus_csm::UPSTREAM_DRAWS.top_k)]
    pub tts_top_k: usize,
    /// Speaker ids a request may name: 0..N.
    #[arg(long, default_value_t = chorus_server::tts::DEFAULT_SPEAKERS)]
    pub tts_speakers: usize,
    /// Longest `text` of a request (and of each context turn), in bytes.
    #[arg(long, default_value_t = chorus_server::tts::DEFAULT_MAX_TEXT_BYTES)]
    pub tts_max_text: usize,
    /// The length cap of a request without `max_frames` (12.5 frames per second).
    #[arg(long, default_value_t = chorus_server::tts::DEFAULT_MAX_FRAMES)]
    pub tts_max_frames: usize,
    /// Prompt frames a step prefills for an utterance joining running ones (0: every prompt
    /// whole at admission, stalling the running utterances; default 64).
    #[arg(long)]
    pub tts_prefill_chunk: Option<usize>,
}

/// The Mimi codec of a speech model: `kyutai/mimi`, or `random` beside random weights.
pub(crate) fn default_mimi(model: &chorus_csm::CsmModel) -> &'static str {
    if model.is_random() {
        chorus_mimi::checkpoint::RANDOM_SPEC
    } else {
        "kyutai/mimi"
    }
}

/// Starts the speech engine when `--tts-model` is given.
pub fn start_tts(
    args: &TtsServeArgs,
    devices: &[StageDevice],
    precision: Option<chorus_core::Precision>,
    threads: Option<usize>,
) -> Result<Option<TtsEngine>> {
    let Some(spec) = &args.tts_model else {
        return Ok(None);
    };
    let mut model = crate::load_csm(spec)?;
    let mimi_spec = args
        .tts_mimi
        .clone()
        .unwrap_or_else(|| default_mimi(&model).into());
    let mimi = crate::load(&mimi_spec)?;
    let tokenizer = match &args.tts_tokenizer {
        Some(p) => Some(
            CsmTokenizer::from_file(p, &model.config)
                .with_context(|| format!("loading the speech tokenizer {}", p.display()))?,
        ),
        None => model.tokenizer.take(),
    };
    if tokenizer.is_none() {
        eprintln!("tts: no tokenizer (--tts-tokenizer): only `prompt_ids` requests are served");
    }
    let context = args
        .tts_context
        .min(model.config.backbone.max_position_embeddings);
    let mut opts = TtsOptions::for_utterances(args.tts_utterances, context)?;
    opts.draws.temperature = args.tts_temperature;
    opts.draws.top_k = args.tts_top_k;
    if let Some(chunk) = args.tts_prefill_chunk {
        opts.prefill_chunk = chunk;
    }
    let config = TtsConfig {
        default_max_frames: args.tts_max_frames,
        speakers: args.tts_speakers,
        max_text_bytes: args.tts_max_text,
        ..TtsConfig::default()
    };
    let source = model.source.clone();
    let (model, mimi) = (Arc::new(model), Arc::new(mimi));
    let open = move |d: &StageDevice| {
        let (model, mimi, opts) = (model.clone(), mimi.clone(), opts.clone());
        let spec = TtsSpec {
            device: d.kind,
            precision,
            threads,
            cuda_device: d.cuda,
        };
        move || AnyTts::open(&model, Some(&mimi), &spec, opts.clone()).map(|s| (s, opts))
    };
    let engine = if on_cuda(devices) {
        let stages = devices
            .iter()
            .map(|d| {
                let open = open(d);
                let factory: TtsStageFactory<chorus_cuda::CudaBackend> =
                    Box::new(move || match open()? {
                        (AnyTts::Cuda(s), opts) => Ok((*s, opts)),
                        (AnyTts::Cpu(_), _) => Err(not_built("CUDA")),
                    });
                DeviceStage::new(d.label, factory)
            })
            .collect();
        TtsEngine::start_on(stages, config, tokenizer)
    } else {
        let stages = devices
            .iter()
            .map(|d| {
                let open = open(d);
                let factory: TtsStageFactory<chorus_cpu::CpuBackend> =
                    Box::new(move || match open()? {
                        (AnyTts::Cpu(s), opts) => Ok((*s, opts)),
                        (AnyTts::Cuda(_), _) => Err(not_built("CPU")),
                    });
                DeviceStage::new(d.label, factory)
            })
            .collect();
        TtsEngine::start_on(stages, config, tokenizer)
    }
    .context("starting the speech stage")?;
    let info = engine.info();
    eprintln!(
        "tts: {source} with Mimi {mimi_spec} on {} ({}, {} utterances, context {} positions, {} KV blocks in all)",
        describe(devices), info.device, info.max_utterances, info.max_context, info.kv_usable
    );
    Ok(Some(engine))
}

fn not_built(device: &str) -> chorus_core::Error {
    chorus_core::Error::config(
        "serve::start_tts",
        format!("the speech stage was not built on the {device} backend asked for"),
    )
}
