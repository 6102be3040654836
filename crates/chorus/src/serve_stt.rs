//! `chorus serve --stt-model`: the Kyutai STT stage (Mimi's encoder in its step) behind `/v1/stt`
//! and `/api/asr-streaming`, built on its owner thread through the runtime's `AnyStt::open` (the
//! same build as `chorus transcribe`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use chorus_runtime::device::DeviceKind;
use chorus_runtime::{AnyStt, SttSpec};
use chorus_server::stage::DeviceStage;
use chorus_server::stt::{SttEngine, SttServeConfig, SttStageFactory};
use chorus_stt::frame::DrawSettings;
use chorus_stt::{SttOptions, SttTokenizer};

use crate::serve_devices::{describe, on_cuda, StageDevice};

/// Default streams the STT stage transcribes at once.
const DEFAULT_STT_STREAMS: usize = 64;

#[derive(clap::Args, Debug, Clone)]
pub struct SttServeArgs {
    /// Also serve Kyutai speech to text on `/v1/stt` and `/api/asr-streaming`:
    /// `kyutai/stt-1b-en_fr`, `kyutai/stt-2.6b-en` (hub), a directory, explicit files, `random`,
    /// `random-2.6b` or `random-small`. Without it both answer 404 `not_enabled`.
    #[arg(long)]
    pub stt_model: Option<String>,
    /// The Mimi codec that turns audio into codes (default: `kyutai/mimi`, `random` for a random
    /// STT model).
    #[arg(long, requires = "stt_model")]
    pub stt_mimi: Option<String>,
    /// The SentencePiece `.model` that spells the words (default: the one beside the model).
    #[arg(long, requires = "stt_model")]
    pub stt_tokenizer: Option<PathBuf>,
    /// Streams transcribed at once (slots) per device; more are refused as busy.
    #[arg(long, default_value_t = DEFAULT_STT_STREAMS)]
    pub stt_streams: usize,
    /// Device of the STT stage (CUDA: bf16 unless `--precision f32`, one graph per bucket;
    /// default: cpu). Refused beside `--devices`, which runs one stage per listed device.
    #[arg(long, value_enum)]
    pub stt_device: Option<DeviceKind>,
    /// Most frames one stream may send in its life, flushes included (12.5 per second; default
    /// one hour).
    #[arg(long, default_value_t = chorus_stt::stage::DEFAULT_MAX_FRAMES)]
    pub stt_max_frames: usize,
    /// Mimi codebooks the STT model reads, the first N (1..=32; default all): moshi's
    /// `audio_codebooks`, 20 in Unmute's production config. Mimi stops its RVQ after N.
    #[arg(long, requires = "stt_model")]
    pub stt_codebooks: Option<usize>,
    /// Temperature of the text token: 0 is greedy (Kyutai's configs); above 0 every stream draws
    /// Gumbel-max over the vocabulary with a seed of its own (Unmute's production: 0.25).
    #[arg(long, default_value_t = 0.0, requires = "stt_model")]
    pub stt_temperature: f32,
    /// Base of the per-stream seeds when `--stt-temperature` is above 0 (the n-th stream the
    /// server admits uses seed base + n).
    #[arg(long, default_value_t = 0, requires = "stt_model")]
    pub stt_seed: u64,
    /// How each stream's KV ring is stored: `bf16` (the backend's own type) or `fp8` (E4M3 with
    /// a scale per head vector: half the memory, about twice the streams per GPU).
    #[arg(long, default_value = "bf16", value_parser = crate::music::parse_kv_cache, requires = "stt_model")]
    pub stt_kv_cache: chorus_lm::KvCache,
    /// Milliseconds a step may wait, after the last one, for streams whose frame has not come
    /// yet (it goes at once when every stream has one): fuller steps read the weights fewer
    /// times a frame, at up to this much more delay. 0: each step takes what has arrived.
    #[arg(long, default_value_t = chorus_server::stt::DEFAULT_STEP_GATHER.as_millis() as u64, requires = "stt_model")]
    pub stt_step_gather_ms: u64,
}

/// Starts the transcription engine when `--stt-model` is given.
pub fn start_stt(
    args: &SttServeArgs,
    devices: &[StageDevice],
    precision: Option<chorus_core::Precision>,
    threads: Option<usize>,
) -> Result<Option<SttEngine>> {
    let Some(spec) = &args.stt_model else {
        return Ok(None);
    };
    let mut model = crate::load_stt(spec)?;
    let ring_config = model.config.clone();
    let mimi_spec = args.stt_mimi.clone().unwrap_or_else(|| {
        if model.is_random() {
            chorus_mimi::checkpoint::RANDOM_SPEC
        } else {
            "kyutai/mimi"
        }
        .into()
    });
    let mimi = crate::load(&mimi_spec)?;
    if mimi.config.num_quantizers < model.config.num_codebooks {
        bail!(
            "the Mimi codec `{mimi_spec}` has {} codebooks; the STT model reads {}",
            mimi.config.num_quantizers,
            model.config.num_codebooks
        );
    }
    let tokenizer = match &args.stt_tokenizer {
        Some(p) => SttTokenizer::from_file(p, &model.config)
            .with_context(|| format!("loading the STT tokenizer {}", p.display()))?,
        None => model.tokenizer.take().context(
            "the STT model has no SentencePiece .model beside it (fix: pass --stt-tokenizer PATH)",
        )?,
    };
    let mut opts = SttOptions::for_streams(args.stt_streams)?;
    opts.max_frames = args.stt_max_frames;
    opts.audio_codebooks = args.stt_codebooks;
    opts.kv_cache = args.stt_kv_cache;
    let draws = DrawSettings::for_temperature(args.stt_temperature, model.config.text_vocab)
        .context("--stt-temperature")?;
    if let Some(d) = draws {
        opts.draws = d;
    }
    let source = model.source.clone();
    let (model, mimi) = (Arc::new(model), Arc::new(mimi));
    let open = move |d: &StageDevice| {
        let (model, mimi, opts) = (model.clone(), mimi.clone(), opts.clone());
        let spec = SttSpec {
            device: d.kind,
            precision,
            threads,
            cuda_device: d.cuda,
        };
        move || AnyStt::open(&model, Some(&mimi), &spec, opts.clone()).map(|s| (s, opts))
    };
    let config = SttServeConfig {
        text_seed: draws.map(|_| args.stt_seed),
        step_gather: std::time::Duration::from_millis(args.stt_step_gather_ms),
        ..SttServeConfig::default()
    };
    let engine = if on_cuda(devices) {
        let stages = devices
            .iter()
            .map(|d| {
                let open = open(d);
                let factory: SttStageFactory<chorus_cuda::CudaBackend> =
                    Box::new(move || match open()? {
                        (AnyStt::Cuda(s), opts) => Ok((*s, opts)),
                        (AnyStt::Cpu(_), _) => Err(not_built("CUDA")),
                    });
                DeviceStage::new(d.label, factory)
            })
            .collect();
        SttEngine::start_on(stages, config, tokenizer)
    } else {
        let stages = devices
            .iter()
            .map(|d| {
                let open = open(d);
                let factory: SttStageFactory<chorus_cpu::CpuBackend> =
                    Box::new(move || match open()? {
                        (AnyStt::Cpu(s), opts) => Ok((*s, opts)),
                        (AnyStt::Cuda(_), _) => Err(not_built("CPU")),
                    });
                DeviceStage::new(d.label, factory)
            })
            .collect();
        SttEngine::start_on(stages, config, tokenizer)
    }
    .map_err(|e| {
        out_of_memory_fix(
            anyhow::Error::from(e).context("starting the STT stage"),
            args,
            &ring_config,
        )
    })?;
    let info = engine.info();
    let draw = draws.map_or_else(
        || "greedy".to_string(),
        |d| format!("temperature {}", d.temperature),
    );
    eprintln!(
        "stt: {source} with Mimi {mimi_spec} on {} ({}, {} streams, {} KV rings, {} codebooks, \
         {draw}, text delay {} frames{})",
        describe(devices),
        info.device,
        info.max_streams,
        match args.stt_kv_cache {
            chorus_lm::KvCache::Native => "native",
            chorus_lm::KvCache::Fp8 => "fp8",
        },
        args.stt_codebooks.unwrap_or(info.config.num_codebooks),
        info.config.text_delay_frames,
        if info.config.extra_heads > 0 {
            ", VAD heads"
        } else {
            ""
        }
    );
    Ok(Some(engine))
}

fn not_built(device: &str) -> chorus_core::Error {
    chorus_core::Error::config(
        "serve::start_stt",
        format!("the STT stage was not built on the {device} backend asked for"),
    )
}

/// A stage whose slots did not fit in GPU memory, with the fix: what each stream's KV ring takes.
fn out_of_memory_fix(
    e: anyhow::Error,
    args: &SttServeArgs,
    c: &chorus_stt::SttConfig,
) -> anyhow::Error {
    if !e
        .chain()
        .any(|cause| cause.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY"))
    {
        return e;
    }
    // A position's k or v: bf16 values, or bytes and an f32 scale per head.
    let (per_position, other) = match args.stt_kv_cache {
        chorus_lm::KvCache::Native => (2 * c.kv_width(), ", or --stt-kv-cache fp8 (half the ring)"),
        chorus_lm::KvCache::Fp8 => (c.kv_width() + 4 * c.num_key_value_heads, ""),
    };
    let ring = c.num_hidden_layers * c.sliding_window * 2 * per_position;
    let total = (ring * args.stt_streams) as f64 / 1e9;
    anyhow::anyhow!(
        "{e:#} (fix: {} streams' KV rings alone take {total:.1} GB, {:.0} MB a stream, beside \
         the model and Mimi's state for every slot: lower --stt-streams{other})",
        args.stt_streams,
        ring as f64 / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        stt: SttServeArgs,
    }

    fn args(extra: &[&str]) -> SttServeArgs {
        let base = ["chorus", "--stt-model", "random", "--stt-streams", "2500"];
        Cli::parse_from(base.iter().chain(extra)).stt
    }

    #[test]
    fn an_out_of_memory_start_says_what_the_slots_take_and_the_fix() {
        let c = chorus_stt::SttConfig::stt_1b_en_fr();
        let oom = || {
            anyhow::anyhow!("cuMemAlloc: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")")
                .context("starting the STT stage")
        };
        let bf16 = out_of_memory_fix(oom(), &args(&[]), &c).to_string();
        assert!(
            bf16.contains("starting the STT stage: cuMemAlloc"),
            "{bf16}"
        );
        assert!(
            bf16.contains("2500 streams' KV rings alone take 245.8 GB, 98 MB a stream"),
            "{bf16}"
        );
        assert!(
            bf16.contains("lower --stt-streams, or --stt-kv-cache fp8"),
            "{bf16}"
        );
        let fp8 = out_of_memory_fix(oom(), &args(&["--stt-kv-cache", "fp8"]), &c).to_string();
        assert!(fp8.contains("126.7 GB, 51 MB a stream"), "{fp8}");
        assert!(!fp8.contains("--stt-kv-cache"), "{fp8}");
        let other = anyhow::anyhow!("no such file");
        assert_eq!(
            out_of_memory_fix(other, &args(&[]), &c).to_string(),
            "no such file"
        );
    }
}
