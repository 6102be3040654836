//! Bulk (data-set) encoding and decoding: many files at once through one slot model.
//!
//! Design: a bounded pipeline of three parts.
//! - [`Readers`]: a few threads load files by index (audio decoded and resampled, or codes
//!   parsed) and queue at most a slot's worth of them ahead of the device.
//! - A [`SlotBatch`] ([`EncodeBatch`], [`DecodeBatch`]) holds one file per model slot, each file
//!   its own stream from the zero state; its `step` advances every held file by its next frames
//!   (one device step takes one frame, or one chunk, of many files), so the device stays busy
//!   with as many files as there are slots. Files finish independently and their slots take the
//!   next ones. Batch invariance of the backends (a slot's result does not depend on its step
//!   mates) makes each file's output equal its single-file run.
//! - [`drive`] feeds the batch from the readers, calls the caller's step (which may check for an
//!   interrupt or run the step on the model's own thread), and hands every outcome to a sink
//!   (which writes files, or collects arrays). A file that fails to load is an outcome, never
//!   the end of the run; a failed step is.

mod decode;
mod encode;
mod readers;
mod slots;

use std::time::Duration;

pub use decode::{DecodeBatch, DecodeInput};
pub use encode::{read_audio_input, AudioInput, EncodeBatch, EncodedFile};
pub use readers::{Next, Readers};

use crate::device::{resolve, DeviceKind};
use chorus_core::{FRAME_SAMPLES, SAMPLE_RATE};

/// Longest wait for a reader while the batch is empty, between checks for an interrupt.
pub const READER_POLL: Duration = Duration::from_millis(100);
/// Most reader threads chosen by default.
pub const MAX_DEFAULT_READERS: usize = 8;

/// The files of a batch, each in its own slot.
pub trait SlotBatch {
    /// What a reader makes of one file.
    type Input;
    /// Files it would take now without queueing.
    fn free(&self) -> usize;
    /// True when it holds no file.
    fn is_empty(&self) -> bool;
    /// Takes file `id` into a free slot (or queues it when none is free).
    fn admit(&mut self, id: usize, input: Self::Input);
    /// Frames stepped so far, over all files.
    fn frames_done(&self) -> u64;
}

/// What became of one file.
#[derive(Debug)]
pub enum Outcome<O, E> {
    /// Finished: its output.
    Done(usize, O),
    /// Its reader found nothing to do (the output exists).
    Skipped(usize),
    /// It could not be read: why.
    Failed(usize, E),
}

/// Runs every file of `readers` through `batch`: a reader's `Ok(Some(input))` is admitted,
/// `Ok(None)` is skipped and `Err` failed (both reported at once); `step` advances the batch and
/// returns the files it finished. Ends when every file is out, or at the first error of `step` or
/// `sink` (an interrupt, a failed device step or write).
pub fn drive<B: SlotBatch, O, E>(
    readers: &Readers<Result<Option<B::Input>, E>>,
    batch: &mut B,
    mut step: impl FnMut(&mut B) -> Result<Vec<(usize, O)>, E>,
    mut sink: impl FnMut(Outcome<O, E>) -> Result<(), E>,
) -> Result<(), E> {
    let mut readers_done = false;
    loop {
        // Top up the free slots; wait for a reader only when there is nothing to step.
        while !readers_done && batch.free() > 0 {
            let wait = batch.is_empty().then_some(READER_POLL);
            match readers.next(wait) {
                Next::Item(id, Ok(Some(input))) => batch.admit(id, input),
                Next::Item(id, Ok(None)) => sink(Outcome::Skipped(id))?,
                Next::Item(id, Err(e)) => sink(Outcome::Failed(id, e))?,
                Next::Empty => break,
                Next::Done => readers_done = true,
            }
        }
        if batch.is_empty() && readers_done {
            return Ok(());
        }
        // An empty batch still steps: the caller's step is where an interrupt is seen.
        for (id, out) in step(batch)? {
            sink(Outcome::Done(id, out))?;
        }
    }
}

/// Reader threads for `device`: one beside the CPU backend (which uses every core), all cores
/// but one (at most [`MAX_DEFAULT_READERS`]) beside a GPU.
pub fn default_readers(device: DeviceKind) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match resolve(device) {
        DeviceKind::Cpu => 1,
        _ => cores.saturating_sub(1).clamp(1, MAX_DEFAULT_READERS),
    }
}

/// Seconds of 24 kHz audio in `frames` frames.
pub fn frames_to_seconds(frames: u64) -> f64 {
    frames as f64 * FRAME_SAMPLES as f64 / f64::from(SAMPLE_RATE)
}

#[cfg(test)]
mod tests;
