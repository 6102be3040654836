//! `chorus loadgen`: plays N code (or audio) streams against a server and reports latency, wire
//! bytes and exactness; `--input text` plays N speakers on `/v1/tts` and reports the gaps between
//! frames; `--input audio` plays N real-time streams on `/v1/stt` (or `/api/asr-streaming`) and
//! reports each step's delay past its audio.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use chorus_server::loadgen::stt::{SttEndpoint, SttLoadConfig};
use chorus_server::loadgen::tts::TtsLoadConfig;
use chorus_server::loadgen::{LoadInput, LoadgenConfig, Rate};
use chorus_server::protocol::PcmFormat;

/// File descriptors a load generator needs besides one per stream.
const SPARE_FDS: u64 = 256;
/// Default frames in flight per stream at `--rate max`.
const DEFAULT_WINDOW: usize = 8;
/// Default streams whose PCM is kept for the mismatch measure.
const DEFAULT_KEEP_PCM_STREAMS: usize = 8;
/// Default seconds to wait for the server to answer `/healthz`.
const DEFAULT_WAIT_READY_SECS: f64 = 120.0;
/// Default text of `--input text` utterances: a sentence of about four seconds.
const DEFAULT_TTS_TEXT: &str = "The quick brown fox jumps over the lazy dog, then naps in the sun.";
/// Default frames per `--input text` utterance: 4 s of audio.
const DEFAULT_TTS_FRAMES: usize = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RateArg {
    /// One frame every 80 ms per stream.
    Realtime,
    /// As fast as the server answers (a window of frames in flight per stream).
    Max,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InputArg {
    /// Random codes, decoded by the server.
    Codes,
    /// Audio, encoded by the server.
    Pcm,
    /// Text, spoken by the server (`/v1/tts`): each stream asks for one utterance after
    /// another; the report gives the gaps between frames.
    Text,
    /// Audio, transcribed by the server (`/v1/stt`, or `/api/asr-streaming` with
    /// `--stt-endpoint asr`): real-time streams; the report gives each step's delay past its
    /// audio.
    Audio,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SttEndpointArg {
    /// `/v1/stt` (JSON).
    V1,
    /// `/api/asr-streaming` (moshi-server's MessagePack; timed only for models with VAD heads).
    Asr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PcmArg {
    S16,
    F32,
    Opus,
}

#[derive(clap::Args, Debug, Clone)]
pub struct LoadgenArgs {
    /// What each stream sends: codes to decode (PCM back) or audio to encode (codes back).
    #[arg(long, value_enum, default_value = "codes")]
    pub input: InputArg,
    /// Audio on the wire: the PCM decode streams receive (default f32, the only one checked bit
    /// for bit), or the audio encode streams send (default s16; opus at 32 kbit/s).
    #[arg(long, value_enum)]
    pub pcm: Option<PcmArg>,
    /// Server address: `ws://host:port` (or `http://host:port`); several, comma-separated
    /// (`ws://a:8080,ws://b:8080`), spread the streams over independent servers round-robin.
    #[arg(long, default_value = "ws://127.0.0.1:8080")]
    pub url: String,
    /// Concurrent streams.
    #[arg(long, default_value_t = 4)]
    pub streams: usize,
    /// Seconds of audio each stream sends.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    #[arg(long, value_enum, default_value = "realtime")]
    pub rate: RateArg,
    /// Codebooks per frame.
    #[arg(long, default_value_t = 8)]
    pub n_q: usize,
    /// Seed of the random codes (stream i uses a generator derived from it and i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Streams checked bit for bit against a whole-file decode (default: all; 0 skips).
    #[arg(long)]
    pub verify_streams: Option<usize>,
    /// Frames in flight per stream at `--rate max`.
    #[arg(long, default_value_t = DEFAULT_WINDOW)]
    pub window: usize,
    /// Streams whose PCM is kept to measure a mismatch (max abs diff, relative L2); the others
    /// are checked through a hash per frame.
    #[arg(long, default_value_t = DEFAULT_KEEP_PCM_STREAMS)]
    pub keep_pcm_streams: usize,
    /// Seconds to wait for the server to come up.
    #[arg(long, default_value_t = DEFAULT_WAIT_READY_SECS)]
    pub wait_ready: f64,
    /// `--input text`: what every utterance says.
    #[arg(long, default_value = DEFAULT_TTS_TEXT)]
    pub text: String,
    /// `--input text`: frames per utterance (12.5 per second of audio).
    #[arg(long, default_value_t = DEFAULT_TTS_FRAMES)]
    pub frames: usize,
    /// `--input audio`: the protocol the streams speak.
    #[arg(long, value_enum, default_value = "v1")]
    pub stt_endpoint: SttEndpointArg,
    /// `--input audio`: a step's output later than this past its audio misses its deadline.
    #[arg(long, default_value_t = chorus_core::FRAME_MS as f64)]
    pub deadline_ms: f64,
    /// `--input audio`: the streams connect spread over this many milliseconds (0: at once).
    #[arg(long, default_value_t = 0.0)]
    pub ramp_ms: f64,
    /// The API key every connection and request presents (the server's `kyutai-api-key`
    /// header), for servers started with keys.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit non-zero on any error, missed frame or mismatch.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: LoadgenArgs) -> Result<()> {
    if args.streams == 0 || args.duration <= 0.0 {
        bail!("--streams and --duration must be positive");
    }
    crate::serve::warn_fd_limit(args.streams as u64 + SPARE_FDS);
    let input = match args.input {
        InputArg::Codes => LoadInput::Codes,
        InputArg::Pcm => LoadInput::Pcm,
        InputArg::Text => return run_tts(&args),
        InputArg::Audio => return run_stt(&args),
    };
    let pcm = match (args.pcm, input) {
        (Some(PcmArg::S16), _) | (None, LoadInput::Pcm) => PcmFormat::S16,
        (Some(PcmArg::F32), _) | (None, LoadInput::Codes) => PcmFormat::F32,
        (Some(PcmArg::Opus), _) => PcmFormat::Opus,
    };
    let config = LoadgenConfig {
        input,
        pcm,
        url: args.url.clone(),
        streams: args.streams,
        duration: Duration::from_secs_f64(args.duration),
        rate: match args.rate {
            RateArg::Realtime => Rate::Realtime,
            RateArg::Max => Rate::Max,
        },
        n_q: args.n_q,
        seed: args.seed,
        verify_streams: args.verify_streams,
        window: args.window,
        keep_pcm_streams: args.keep_pcm_streams,
        wait_ready: Duration::from_secs_f64(args.wait_ready),
        api_key: args.api_key.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(chorus_server::loadgen::run(config))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.summary());
    }
    let verified =
        args.verify_streams == Some(0) || !report.verify.applicable || report.verify.bit_exact;
    let clean = report.errors.is_empty()
        && report.frames_received == report.frames_sent
        && report.streams_completed == report.streams;
    if args.strict && !(verified && clean) {
        bail!("loadgen: errors, missing frames or mismatches (see the report)");
    }
    Ok(())
}

/// `--input text`: speakers on `/v1/tts`.
fn run_tts(args: &LoadgenArgs) -> Result<()> {
    let config = TtsLoadConfig {
        url: args.url.clone(),
        streams: args.streams,
        duration: Duration::from_secs_f64(args.duration),
        text: args.text.clone(),
        frames: args.frames,
        seed: args.seed,
        format: match args.pcm {
            Some(PcmArg::S16) => PcmFormat::S16,
            Some(PcmArg::Opus) => PcmFormat::Opus,
            Some(PcmArg::F32) | None => PcmFormat::F32,
        },
        wait_ready: Duration::from_secs_f64(args.wait_ready),
        api_key: args.api_key.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(chorus_server::loadgen::tts::run_tts(config))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.summary());
    }
    if args.strict && !report.real_time() {
        bail!("loadgen: errors, or a p99 gap between frames of 80 ms or more (see the report)");
    }
    Ok(())
}

/// `--input audio`: real-time streams on `/v1/stt` or `/api/asr-streaming`.
fn run_stt(args: &LoadgenArgs) -> Result<()> {
    if !(args.deadline_ms.is_finite() && args.deadline_ms > 0.0) {
        bail!("--deadline-ms must be a positive number of milliseconds");
    }
    if !(args.ramp_ms.is_finite() && args.ramp_ms >= 0.0) {
        bail!("--ramp-ms must be zero or a positive number of milliseconds");
    }
    let config = SttLoadConfig {
        url: args.url.clone(),
        streams: args.streams,
        duration: Duration::from_secs_f64(args.duration),
        endpoint: match args.stt_endpoint {
            SttEndpointArg::V1 => SttEndpoint::V1,
            SttEndpointArg::Asr => SttEndpoint::Asr,
        },
        format: match args.pcm {
            Some(PcmArg::F32) => PcmFormat::F32,
            Some(PcmArg::Opus) => PcmFormat::Opus,
            Some(PcmArg::S16) | None => PcmFormat::S16,
        },
        seed: args.seed,
        deadline: Duration::from_secs_f64(args.deadline_ms / 1e3),
        wait_ready: Duration::from_secs_f64(args.wait_ready),
        api_key: args.api_key.clone(),
        ramp: Duration::from_secs_f64(args.ramp_ms / 1e3),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(chorus_server::loadgen::stt::run_stt(config))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}", report.summary());
    }
    if args.strict && !report.real_time() {
        bail!(
            "loadgen: errors, missing steps or missed deadlines (past {} ms; see the report)",
            args.deadline_ms
        );
    }
    Ok(())
}
