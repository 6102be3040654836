//! The `chorus` command line: decode Mimi codes to audio, encode audio to codes, inspect models, benchmark backends,
//! serve streams over WebSocket and load-test a server.

/// The server hands one PCM buffer per frame from the engine thread to the connection tasks.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod audio_out;
mod bench;
mod bench_encode;
mod codes_file;
mod dataset;
mod decode;
mod encode;
mod info;
mod loadgen;
mod music;
mod music_bench;
mod serve;

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
    Serve(serve::ServeArgs),
    /// Play N streams against a server and report latency, deadlines and exactness.
    Loadgen(loadgen::LoadgenArgs),
    /// Generate a song's semantic stage (MiniMax Music 3): codes and frame hiddens.
    Music(music::MusicArgs),
    /// Benchmark the music semantic stage: ms per frame for several songs at once.
    MusicBench(music_bench::MusicBenchArgs),
}

/// Loads a model, saying so when the weights are random.
pub(crate) fn load(spec: &str) -> Result<LoadedModel> {
    let model = chorus_mimi::checkpoint::load_model(spec)
        .with_context(|| format!("loading model `{spec}`"))?;
    if model.is_random() {
        eprintln!("warning: `--model random` uses random weights: its output is noise");
    }
    Ok(model)
}

/// Loads a music semantic model, saying so when the weights are random.
pub(crate) fn load_music(spec: &str) -> Result<chorus_music::MusicModel> {
    let model = chorus_music::load_music_model(spec)
        .with_context(|| format!("loading music model `{spec}`"))?;
    if model.random {
        eprintln!("warning: `--model {spec}` uses random weights: the music is noise");
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
            eprintln!("error: {e:#}");
            if cli.verbose {
                eprintln!("{}", e.backtrace());
            }
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Decode(a) => decode::run(a),
        Command::Encode(a) => encode::run(a),
        Command::Info(a) => info::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Loadgen(a) => loadgen::run(a),
        Command::Music(a) => music::run(a),
        Command::MusicBench(a) => music_bench::run(a),
    }
}
