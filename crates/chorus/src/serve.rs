//! `chorus serve`: the streaming server, on one device (`--device`) or one engine per CUDA device
//! (`--devices`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use chorus_core::{Buckets, Precision, DEFAULT_BUCKETS};
use chorus_engine::fake::{FakeDecoder, FakeOptions};
use chorus_engine::{
    DecoderFactory, EngineConfig, EnginePool, DEFAULT_DEVICE, DEFAULT_MAX_PENDING_FRAMES,
    DEFAULT_MAX_RESETS_PER_STEP, DEFAULT_MAX_UNDELIVERED_FRAMES,
};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_music::prompt::PromptTokenizer;
use chorus_music::StageOptions;
use chorus_server::encode::{EncodeConfig, EncodePool, EncoderFactory};
use chorus_server::gate::ApiKeys;
use chorus_server::music::{MusicConfig, MusicEngine, StageFactory};
use chorus_server::stage::DeviceStage;
use chorus_server::{Server, ServerConfig, Services};

use crate::decode::parse_precision;
use crate::serve_devices::{describe, on_cuda, stage_devices, StageDevice};
use crate::serve_gate::{describe_keys, describe_limits, reload_on_sighup, GateArgs};
use crate::serve_stt::{start_stt, SttServeArgs};
use crate::serve_tts::{start_tts, TtsServeArgs};
use chorus_runtime::device::{open_decoder_on, DecoderSpec, DeviceKind, DEFAULT_CUDA_DEVICE};
use chorus_runtime::devices::{visible_cuda_devices, DeviceList};
use chorus_runtime::music::open_stage;
use chorus_runtime::{open_encoder, EncoderSpec};

/// Default stream slots.
const DEFAULT_MAX_STREAMS: usize = 64;
/// Default seconds a drain waits for open streams.
const DEFAULT_DRAIN_SECS: u64 = 30;
/// Default encode streams of a server on CUDA and on the CPU.
const DEFAULT_ENCODE_STREAMS_CUDA: usize = 64;
const DEFAULT_ENCODE_STREAMS_CPU: usize = 4;
/// Default songs the music stage generates at once.
const DEFAULT_MUSIC_SONGS: usize = 4;
/// Default positions per song: a prompt of a few hundred tokens and about a minute of music.
const DEFAULT_MUSIC_CONTEXT: usize = 2048;

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Model: `kyutai/mimi`, a local checkpoint path, `random`, or `fake` (a deterministic
    /// stand-in with no weights and next to no decode work: the server's own host cost, and
    /// protocol demos).
    #[arg(long, default_value = "kyutai/mimi")]
    pub model: String,
    /// Device to decode on (one engine); see `--devices` for several GPUs.
    #[arg(long, value_enum, default_value = "auto")]
    pub device: DeviceKind,
    /// CUDA devices to serve on, one engine each (own decoder, thread and `--max-streams`
    /// slots): `all` (every visible one) or ordinals such as `0,1`. Implies CUDA. A new stream
    /// goes to the device with the most free slots. Every other stage runs one copy per device
    /// too (the encoder, music, TTS, STT), each job placed on the device with the most free
    /// slots or KV blocks; `--music-device`, `--tts-device` and `--stt-device` are then refused.
    /// With `--model fake` the devices are stand-ins, and each stage runs one CPU copy per device.
    #[arg(long, value_parser = parse_devices)]
    pub devices: Option<DeviceList>,
    /// `f32` or `bf16` (default: f32 on the CPU, bf16 on CUDA).
    #[arg(long, value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// Streams decoded at once per device (stream slots); with `--devices` every device has this
    /// many. More are refused as busy.
    #[arg(long, default_value_t = DEFAULT_MAX_STREAMS)]
    pub max_streams: usize,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one, printed at start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Batch buckets, comma-separated (default 1,2,4,...,1024 capped at --max-streams).
    #[arg(long)]
    pub buckets: Option<String>,
    /// CPU threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Frames a stream may send ahead of the decoder before it is cut off.
    #[arg(long, default_value_t = DEFAULT_MAX_PENDING_FRAMES)]
    pub max_pending_frames: usize,
    /// Decoded frames a client may leave unread before it is cut off.
    #[arg(long, default_value_t = DEFAULT_MAX_UNDELIVERED_FRAMES)]
    pub max_undelivered_frames: usize,
    /// Slot resets (new streams) run before one decode step; more wait for the next step.
    #[arg(long, default_value_t = DEFAULT_MAX_RESETS_PER_STEP)]
    pub max_resets_per_step: usize,
    /// Seconds SIGTERM waits for open streams to finish.
    #[arg(long, default_value_t = DEFAULT_DRAIN_SECS)]
    pub drain_timeout: u64,
    /// Encode streams served at once (`"input": "pcm"` on `/v1/stream`, `POST /v1/encode`), per
    /// device (every `--devices` entry has this many); 0 turns encoding off (default: 64 on CUDA,
    /// 4 on the CPU). A checkpoint without an encoder serves none.
    #[arg(long)]
    pub encode_streams: Option<usize>,
    /// Also serve the music semantic stage (MiniMax Music 3) on `/v1/music`: `random-small`,
    /// `random`, a directory, `LM.safetensors,DEPTH.safetensors` or a hub repo id with a
    /// subfolder. Without it `/v1/music` answers 404 `not_enabled`.
    #[arg(long)]
    pub music_model: Option<String>,
    /// tokenizer.json for `caption`/`lyrics` requests (default: the one beside the music model;
    /// without one only `prompt_ids` requests are served).
    #[arg(long, requires = "music_model")]
    pub music_tokenizer: Option<PathBuf>,
    /// Songs generated at once per device; more are refused as busy.
    #[arg(long, default_value_t = DEFAULT_MUSIC_SONGS)]
    pub music_songs: usize,
    /// Positions per song (prompt tokens + frames + 1, 25 frames per second of music); longer
    /// requests are refused. The KV cache holds 2 rows of this many positions per song.
    #[arg(long, default_value_t = DEFAULT_MUSIC_CONTEXT)]
    pub music_context: usize,
    /// Device of the music stage (CUDA: bf16 unless `--precision f32`, one graph per frame;
    /// default: cpu). Refused beside `--devices`, which runs one stage per listed device.
    #[arg(long, value_enum)]
    pub music_device: Option<DeviceKind>,
    /// CUDA music stage: a song's codes do not depend on the songs sharing its steps (slower
    /// from 2 songs, docs/PERFORMANCE.md).
    #[arg(long)]
    pub music_batch_invariant: bool,
    /// The music LM's KV cache: `bf16` (the storage type) or `fp8` (E4M3 with a scale per head:
    /// half the KV memory on CUDA, sm_89 and later; the CPU holds the same values in f32).
    #[arg(long, default_value = "bf16", value_parser = crate::music::parse_kv_cache)]
    pub music_kv_cache: chorus_music::KvCache,
    /// Milliseconds each step of `--model fake` takes (a stand-in for the device's step time,
    /// so that batches grow under load as they do on a GPU).
    #[arg(long, default_value_t = 0.0)]
    pub fake_step_ms: f64,
    #[command(flatten)]
    pub tts: TtsServeArgs,
    #[command(flatten)]
    pub stt: SttServeArgs,
    #[command(flatten)]
    pub gate: GateArgs,
}

/// File descriptors a server needs besides one per stream.
const SPARE_FDS: u64 = 256;
/// `--model` naming the stand-in decoder.
pub const FAKE_MODEL: &str = "fake";
/// Connection threads a server keeps however few cores it has.
const MIN_CONNECTION_WORKERS: usize = 2;
/// Devices `--devices` may name with `--model fake` (one stand-in engine each).
const FAKE_DEVICES: usize = 8;

pub fn run(args: ServeArgs) -> Result<()> {
    // Before any model loads: a bad key file fails at once.
    let keys = args.gate.keys()?;
    let ordinals = stage_ordinals(&args)?;
    let buckets = match &args.buckets {
        Some(b) => Buckets::parse(b)?,
        None => Buckets::new(DEFAULT_BUCKETS)?,
    };
    if args.model == FAKE_MODEL {
        return serve_fake(&args, ordinals, buckets, keys);
    }
    if args.fake_step_ms != 0.0 {
        bail!("--fake-step-ms is for `--model fake` only");
    }
    // Loaded from disk once; each device uploads its own copy from it.
    let model = Arc::new(crate::load(&args.model)?);
    let spec = DecoderSpec {
        device: args.device,
        precision: args.precision,
        max_slots: args.max_streams,
        buckets,
        threads: args.threads,
        chunk_frames: 1,
    };
    let encode = start_encoder(&args, &model, ordinals.as_deref())?;
    let factories = match ordinals {
        None => vec![(
            DEFAULT_DEVICE,
            factory(model.clone(), spec, DEFAULT_CUDA_DEVICE),
        )],
        Some(ordinals) => {
            let spec = DecoderSpec {
                device: DeviceKind::Cuda,
                ..spec
            };
            ordinals
                .into_iter()
                .map(|o| (o, factory(model.clone(), spec.clone(), o)))
                .collect()
        }
    };
    run_server(&args, factories, encode, keys)
}

/// `chorus serve --model fake`: one stand-in engine per device entry, pipelined as the CUDA
/// decoder is; no encoder (it has no weights to encode with).
fn serve_fake(
    args: &ServeArgs,
    ordinals: Option<Vec<usize>>,
    buckets: Buckets,
    keys: Option<ApiKeys>,
) -> Result<()> {
    eprintln!("warning: `--model fake` decodes nothing: its output is a hash of the codes");
    let step_delay = Duration::try_from_secs_f64(args.fake_step_ms / 1e3)
        .with_context(|| format!("--fake-step-ms {}", args.fake_step_ms))?;
    let opts = FakeOptions {
        step_delay,
        max_slots: args.max_streams,
        largest_batch: buckets.largest().min(args.max_streams),
        pipelined: true,
        ..FakeOptions::default()
    };
    let devices = ordinals.clone().unwrap_or_else(|| vec![DEFAULT_DEVICE]);
    let factories = devices
        .into_iter()
        .map(|d| {
            let opts = opts.clone();
            let f: DecoderFactory = Box::new(move || Ok(Box::new(FakeDecoder::new(opts)) as _));
            (d, f)
        })
        .collect();
    run_server(args, factories, None, keys)
}

/// The ordinals of `--devices`: CUDA devices, or stand-ins with `--model fake` (which needs no
/// GPU).
fn stage_ordinals(args: &ServeArgs) -> Result<Option<Vec<usize>>> {
    if args.model == FAKE_MODEL {
        return args
            .devices
            .as_ref()
            .map(|l| l.resolve(FAKE_DEVICES))
            .transpose()
            .map_err(Into::into);
    }
    cuda_devices(args)
}

/// Starts the engines and the music, speech and speech-to-text stages, then serves until SIGTERM or Ctrl-C and drains.
fn run_server(
    args: &ServeArgs,
    factories: Vec<(usize, DecoderFactory)>,
    encode: Option<Arc<EncodePool>>,
    api_keys: Option<ApiKeys>,
) -> Result<()> {
    let engine_config = EngineConfig {
        max_pending_frames: args.max_pending_frames,
        max_undelivered_frames: args.max_undelivered_frames,
        max_resets_per_step: args.max_resets_per_step,
    };
    let pool = EnginePool::start(factories, engine_config).context("starting the decoders")?;
    for e in pool.engines() {
        eprintln!(
            "decoder on device {}: {} ({} slots, largest batch {})",
            e.device(),
            e.info().description,
            e.info().max_slots,
            e.info().largest_batch
        );
    }
    let ordinals = stage_ordinals(args)?;
    let fake = args.model == FAKE_MODEL;
    let on = |flag, name| stage_devices(ordinals.as_deref(), fake, flag, name);
    let music_devices = on(args.music_device, "--music-device")?;
    let tts_devices = on(args.tts.tts_device, "--tts-device")?;
    let stt_devices = on(args.stt.stt_device, "--stt-device")?;
    let music = start_music(args, &music_devices)?.map(Arc::new);
    let tts = start_tts(&args.tts, &tts_devices, args.precision, args.threads)?.map(Arc::new);
    let stt = start_stt(&args.stt, &stt_devices, args.precision, args.threads)?.map(Arc::new);
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .with_context(|| format!("bad listen address {}:{}", args.host, args.port))?;
    let slots = pool
        .engines()
        .iter()
        .map(|e| e.info().max_slots)
        .sum::<usize>()
        + encode.as_ref().map_or(0, |e| e.info().max_streams)
        + music.as_ref().map_or(0, |m| m.info().max_songs)
        + tts.as_ref().map_or(0, |t| t.info().max_utterances)
        + stt.as_ref().map_or(0, |t| t.info().max_streams);
    let limits = args.gate.limits(slots, args.max_pending_frames)?;
    // Every connection holds a socket; without a connection limit, every slot does.
    let sockets = match limits.max_connections {
        0 => slots,
        n => n,
    };
    warn_fd_limit(sockets as u64 + SPARE_FDS);
    eprintln!("{}", describe_keys(api_keys.as_ref()));
    eprintln!("{}", describe_limits(&limits));
    let reload = api_keys.clone().filter(|k| k.file().is_some());
    let config = ServerConfig {
        drain_timeout: Duration::from_secs(args.drain_timeout),
        limits,
        api_keys,
        public_metrics: args.gate.public_metrics,
        ..ServerConfig::default()
    };
    let engines = pool.engines().len();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(connection_workers(engines))
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let services = Services {
            music,
            encode,
            tts,
            stt,
        };
        let server = Server::bind_with(Arc::new(pool), services, addr, config)
            .await
            .map_err(|e| bind_error(e, addr))?;
        if let Some(keys) = reload {
            tokio::spawn(reload_on_sighup(keys));
        }
        println!("listening on http://{}", server.local_addr());
        shutdown_signal().await;
        eprintln!("draining: no new streams; finishing open ones");
        let cut = server.shutdown().await?;
        if cut > 0 {
            eprintln!("drain timed out: {cut} connections cut");
        }
        Ok(())
    })
}

/// A bind failure with its fix: a taken port is the usual one.
fn bind_error(e: chorus_core::Error, addr: SocketAddr) -> anyhow::Error {
    let kind = match &e {
        chorus_core::Error::Io { source, .. } => Some(source.kind()),
        _ => None,
    };
    let fix = match kind {
        Some(std::io::ErrorKind::AddrInUse) => format!(
            "fix: another process listens on port {} (stop it, or pick another --port; --port 0 takes a free one)",
            addr.port()
        ),
        Some(std::io::ErrorKind::PermissionDenied) => format!(
            "fix: ports below 1024 need privileges: pick --port 1024 or above (port {})",
            addr.port()
        ),
        Some(std::io::ErrorKind::AddrNotAvailable) => format!(
            "fix: {} is not an address of this machine: use --host 127.0.0.1 or 0.0.0.0",
            addr.ip()
        ),
        _ => "fix: check --host and --port".to_string(),
    };
    anyhow::anyhow!("cannot listen on {addr}: {e}; {fix}")
}

/// Connection threads beside `engines` engine threads: one core per engine is left to it, so that
/// a step is never delayed waiting for a core the connections hold (each engine thread gathers,
/// launches and hands out every step of its device).
fn connection_workers(engines: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(engines).max(MIN_CONNECTION_WORKERS)
}

/// `--devices` resolved against the visible CUDA devices; `None` without it (one engine on
/// `--device`).
fn cuda_devices(args: &ServeArgs) -> Result<Option<Vec<usize>>> {
    let Some(list) = &args.devices else {
        return Ok(None);
    };
    if args.device == DeviceKind::Cpu {
        bail!("--devices runs one engine per CUDA device: drop --device cpu");
    }
    Ok(Some(list.resolve(visible_cuda_devices())?))
}

/// `--devices` as clap reads it: a bad entry is refused before anything starts.
fn parse_devices(s: &str) -> chorus_core::Result<DeviceList> {
    DeviceList::parse(s)
}

/// The decoder of one engine, built on its thread: a CUDA decoder stays on the thread that
/// made it.
fn factory(model: Arc<LoadedModel>, spec: DecoderSpec, cuda_device: usize) -> DecoderFactory {
    Box::new(move || {
        open_decoder_on(&model, &spec, cuda_device)
            .map_err(|e| chorus_core::Error::config("serve::open_decoder", format!("{e:#}")))
    })
}

/// Starts one encode engine per device (`--devices`, else `--device`) unless
/// `--encode-streams 0` or the checkpoint has no encoder.
fn start_encoder(
    args: &ServeArgs,
    model: &Arc<LoadedModel>,
    ordinals: Option<&[usize]>,
) -> Result<Option<Arc<EncodePool>>> {
    let device = if ordinals.is_some() {
        DeviceKind::Cuda
    } else {
        chorus_runtime::device::resolve(args.device)
    };
    let streams = args.encode_streams.unwrap_or(match device {
        DeviceKind::Cuda => DEFAULT_ENCODE_STREAMS_CUDA,
        _ => DEFAULT_ENCODE_STREAMS_CPU,
    });
    if streams == 0 {
        return Ok(None);
    }
    if model.weights.encoder.is_none() {
        eprintln!(
            "encoder: the checkpoint has none; `input: \"pcm\"` streams and /v1/encode are off"
        );
        return Ok(None);
    }
    let buckets = Buckets::new(DEFAULT_BUCKETS)?.capped(streams)?;
    let devices = match ordinals {
        Some(list) => list.to_vec(),
        None => vec![DEFAULT_CUDA_DEVICE],
    };
    let stages = devices
        .into_iter()
        .map(|cuda_device| {
            let spec = EncoderSpec {
                device,
                precision: args.precision,
                max_slots: streams,
                buckets: buckets.clone(),
                threads: args.threads,
                cuda_device,
                chunk_frames: 1,
            };
            let model = model.clone();
            let factory: EncoderFactory = Box::new(move || {
                let enc = open_encoder(&model, &spec).map_err(|e| {
                    chorus_core::Error::config("serve::open_encoder", format!("{e:#}"))
                })?;
                Ok(enc as Box<dyn chorus_core::FrameEncoder>)
            });
            DeviceStage::new(cuda_device, factory)
        })
        .collect();
    let config = EncodeConfig {
        max_pending_frames: args.max_pending_frames,
        max_undelivered: args.max_undelivered_frames,
    };
    let pool = EncodePool::start_on(stages, config).context("starting the encoder")?;
    eprintln!(
        "encoder: {} ({} slots)",
        pool.info().description,
        pool.info().max_streams
    );
    Ok(Some(Arc::new(pool)))
}

/// Starts the music engine when `--music-model` is given, one stage per device (each built on
/// its thread).
fn start_music(args: &ServeArgs, devices: &[StageDevice]) -> Result<Option<MusicEngine>> {
    let Some(spec) = &args.music_model else {
        return Ok(None);
    };
    let model = Arc::new(crate::load_music(spec)?);
    let tokenizer = match args
        .music_tokenizer
        .clone()
        .or_else(|| model.tokenizer.clone())
    {
        Some(path) => Some(
            PromptTokenizer::from_file(&path)
                .with_context(|| format!("loading the music tokenizer {}", path.display()))?,
        ),
        None => {
            eprintln!(
                "music: no tokenizer (--music-tokenizer): only `prompt_ids` requests are served"
            );
            None
        }
    };
    let source = model.source.clone();
    let (songs, context, threads, kv_cache) = (
        args.music_songs,
        args.music_context,
        args.threads,
        args.music_kv_cache,
    );
    let options = move || -> chorus_core::Result<StageOptions> {
        let mut opts = StageOptions::for_songs(songs, context)?;
        opts.kv_cache = kv_cache;
        Ok(opts)
    };
    let music = if on_cuda(devices) {
        let (precision, invariant) = (args.precision, args.music_batch_invariant);
        let stages = devices
            .iter()
            .map(|d| {
                let (model, cuda) = (model.clone(), d.cuda);
                let factory: StageFactory<chorus_cuda::CudaBackend> = Box::new(move || {
                    let opts = options()?;
                    let defaults = chorus_cuda::CudaOptions::default();
                    let be = chorus_cuda::CudaBackend::new(chorus_cuda::CudaOptions {
                        device: cuda,
                        precision: precision.unwrap_or(chorus_core::Precision::Bf16),
                        batch_invariant: invariant || defaults.batch_invariant,
                        ..defaults
                    })?;
                    let mut stage = chorus_music::SemanticStage::new(be, &model, opts.clone())?;
                    stage.warmup()?;
                    Ok((stage, opts))
                });
                DeviceStage::new(d.label, factory)
            })
            .collect();
        MusicEngine::start_on(stages, MusicConfig::default(), tokenizer)
    } else {
        let stages = devices
            .iter()
            .map(|d| {
                let (model, kind) = (model.clone(), d.kind);
                let factory: StageFactory<chorus_cpu::CpuBackend> = Box::new(move || {
                    let opts = options()?;
                    let stage = open_stage(&model, kind, opts.clone(), threads)?;
                    Ok((stage, opts))
                });
                DeviceStage::new(d.label, factory)
            })
            .collect();
        MusicEngine::start_on(stages, MusicConfig::default(), tokenizer)
    }
    .context("starting the music stage")?;
    eprintln!(
        "music: {source} on {} ({songs} songs and {} KV blocks per device, context {context} positions)",
        describe(devices),
        music.info().kv_usable / devices.len().max(1)
    );
    Ok(Some(music))
}

/// Raises the open-file limit and warns when it is still below `needed`.
pub(crate) fn warn_fd_limit(needed: u64) {
    match chorus_server::raise_open_file_limit() {
        Ok(limit) if limit < needed => eprintln!(
            "warning: the open-file limit is {limit}, below the {needed} this run may need (ulimit -n)"
        ),
        Ok(_) => {}
        Err(e) => eprintln!("warning: could not raise the open-file limit: {e}"),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
