//! Whole data sets: `chorus encode --audio-dir` (or `--list`) and `chorus decode --codes-dir`.
//!
//! [`walk`] finds the inputs and names each output (the same relative path under `--out-dir`,
//! the extension replaced); [`files`] checks whether an output is already done and writes new
//! ones atomically; [`pipeline`] runs the readers, the batched model loop of
//! `chorus_runtime::bulk` and a writer thread, with a progress bar and the summary; [`encode`]
//! and [`decode`] bind them to the encoder and the decoder.

pub mod decode;
pub mod encode;
mod files;
mod pipeline;
mod walk;

use chorus_runtime::DeviceKind;
use std::path::PathBuf;

/// Files side by side by default: the CPU gains little past a few rows per product and holds
/// every file's audio in memory; a GPU wants many rows per step.
const DEFAULT_BATCH_CPU: usize = 8;
const DEFAULT_BATCH_CUDA: usize = 128;

/// Options of a bulk run, shared by `encode` and `decode`.
#[derive(clap::Args, Debug, Clone)]
pub struct BulkOptions {
    /// Output folder of a bulk run: each input's relative path, with the extension replaced.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Files encoded (or decoded) side by side, one slot each (default: 8 on the CPU, 128 on CUDA).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Threads that decode and resample inputs while the device works (default: 1 beside the
    /// CPU backend, every core but one beside a GPU).
    #[arg(long)]
    pub readers: Option<usize>,
}

impl BulkOptions {
    fn batch_for(&self, device: DeviceKind) -> usize {
        self.batch.unwrap_or(match chorus_runtime::resolve(device) {
            DeviceKind::Cpu => DEFAULT_BATCH_CPU,
            _ => DEFAULT_BATCH_CUDA,
        })
    }

    fn readers_for(&self, device: DeviceKind) -> usize {
        self.readers
            .unwrap_or_else(|| chorus_runtime::bulk::default_readers(device))
    }
}

/// One input file and where its output goes.
#[derive(Clone, Debug)]
pub struct Job {
    pub input: PathBuf,
    pub output: PathBuf,
}

/// An input that failed, and why (the message chain on one line).
#[derive(Clone, Debug)]
pub struct Failure {
    pub path: PathBuf,
    pub reason: String,
}
