//! The `chorus` command line: decode Mimi codes to audio, encode audio to codes, inspect models, benchmark backends,
//! serve streams over WebSocket and load-test a server.

/// The server hands one PCM buffer per frame from the engine thread to the connection tasks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod audio_out;
mod bench;
mod bench_encode;
mod bench_whole;
mod codes_file;
mod dataset;
mod decode;
mod encode;
mod info;
mod join_bench;
mod kv_accuracy;
mod loadgen;
mod mimi_codes;
mod music;
mod music_bench;
mod serve;
mod serve_devices;
mod serve_gate;
mod serve_stt;
mod serve_tts;
mod stt_bench;
mod transcribe;
mod tts;
mod tts_bench;

use anyhow::{Context, Result};
use chorus_mimi::checkpoint::LoadedModel;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "chorus",
    version,
    about = "Streaming Mimi decoding for many concurrent streams"
)]
struct Cli {
    /// On an error, also print where it was raised (the backtrace, with `RUST_BACKTRACE=1`).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode a codes file to WAV or .npy (or a folder of them: --codes-dir).
    Decode(decode::DecodeArgs),
    /// Encode an audio file (WAV, FLAC, MP3, Ogg Vorbis/Opus) to Mimi codes in .npy (or a data
    /// set: --audio-dir, --list).
    Encode(encode::EncodeArgs),
    /// Print a model's configuration, layout, parameter count and state size.
    Info(info::InfoArgs),
    /// Benchmark decoding (or with --encode, encoding) throughput per batch size.
    Bench(bench::BenchArgs),
    /// Serve streams over WebSocket, whole files over HTTP, and Prometheus metrics.
    Serve(Box<serve::ServeArgs>),
    /// Play N streams against a server and report latency, deadlines and exactness.
    Loadgen(loadgen::LoadgenArgs),
    /// Generate a song's semantic stage (MiniMax Music 3): codes and frame hiddens.
    Music(music::MusicArgs),
    /// Benchmark the music semantic stage: ms per frame for several songs at once.
    MusicBench(music_bench::MusicBenchArgs),
    /// Speak text with Sesame CSM (optionally in the voice of a context recording) to a WAV file.
    Tts(tts::TtsArgs),
    /// Benchmark the CSM speech stage: ms per frame for several utterances at once.
    TtsBench(tts_bench::TtsBenchArgs),
    /// Transcribe an audio file with Kyutai STT (words, optionally with times and VAD).
    Transcribe(transcribe::TranscribeArgs),
    /// Benchmark the Kyutai STT stage: ms per step for several streams at once.
    SttBench(stt_bench::SttBenchArgs),
}

/// The fix for a model spec that names nothing: neither a file nor a hub repo id.
fn model_fix(spec: &str, example: &str) -> String {
    let nothing = !std::path::Path::new(spec).exists()
        && !chorus_core::checkpoint::hub::looks_like_repo_id(spec);
    if nothing {
        format!(" (fix: check the path, or give a hub repo id such as {example}, or `random` for random weights)")
    } else {
        String::new()
    }
}

/// Loads a model, saying so when the weights are random.
pub(crate) fn load(spec: &str) -> Result<LoadedModel> {
    let model = chorus_mimi::checkpoint::load_model(spec)
        .with_context(|| format!("loading model `{spec}`{}", model_fix(spec, "kyutai/mimi")))?;
    if model.is_random() {
        eprintln!("warning: `--model random` uses random weights: its output is noise");
    }
    Ok(model)
}

/// Loads a Kyutai STT model, saying so when the weights are random.
pub(crate) fn load_stt(spec: &str) -> Result<chorus_stt::SttModel> {
    let model = chorus_stt::load_stt_model(spec).with_context(|| {
        format!(
            "loading STT model `{spec}`{}",
            model_fix(spec, "kyutai/stt-1b-en_fr")
        )
    })?;
    if model.is_random() {
        eprintln!("warning: `--model {spec}` uses random weights: the text is noise");
    }
    Ok(model)
}

/// Loads a music semantic model, saying so when the weights are random.
pub(crate) fn load_music(spec: &str) -> Result<chorus_music::MusicModel> {
    let model = chorus_music::load_music_model(spec).with_context(|| {
        format!(
            "loading music model `{spec}`{}",
            model_fix(spec, "owner/name/subfolder")
        )
    })?;
    if model.random {
        eprintln!("warning: `--model {spec}` uses random weights: the music is noise");
    }
    Ok(model)
}

/// Loads a CSM model, saying so when the weights are random.
pub(crate) fn load_csm(spec: &str) -> Result<chorus_csm::CsmModel> {
    let model = chorus_csm::load_csm_model(spec).with_context(|| {
        format!(
            "loading CSM model `{spec}`{}",
            model_fix(spec, "sesame/csm-1b")
        )
    })?;
    if model.is_random() {
        eprintln!("warning: `--model {spec}` uses random weights: the speech is noise");
    }
    Ok(model)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A user's mistake reads as its message chain, never as a stack trace, whatever
            // RUST_BACKTRACE the shell has; `-v` adds the trace.
            eprintln!("error: {}", message_chain(&e));
            if cli.verbose {
                eprintln!("{}", e.backtrace());
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// The message chain on one line, each message once: a cause whose text already ends the line
/// (an error that prints its own source) is not repeated.
fn message_chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Decode(a) => decode::run(a),
        Command::Encode(a) => encode::run(a),
        Command::Info(a) => info::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Serve(a) => serve::run(*a),
        Command::Loadgen(a) => loadgen::run(a),
        Command::Music(a) => music::run(a),
        Command::MusicBench(a) => music_bench::run(a),
        Command::Tts(a) => tts::run(a),
        Command::TtsBench(a) => tts_bench::run(a),
        Command::Transcribe(a) => transcribe::run(a),
        Command::SttBench(a) => stt_bench::run(a),
    }
}
