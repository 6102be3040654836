//! `Encoder.encode_files`: audio files to codes on the bulk path of the CLI
//! (`chorus_runtime::bulk`): reader threads decode and resample while the encoder advances every
//! file held in its leased slots by one frame per step, each step a job on the encoder thread.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use chorus_core::{Error, Result};
use chorus_runtime::bulk::{
    drive, read_audio_input, AudioInput, EncodeBatch, EncodedFile, Outcome, Readers, SlotBatch,
};
use pyo3::prelude::*;

use crate::actor::Actor;
use crate::errors::IntoPy;
use crate::slots::SlotTable;

const OP: &str = "Encoder.encode_files";

type Enc = Box<dyn chorus_core::FrameEncoder + Send>;

/// What one call asks for.
pub struct FilesJob {
    pub paths: Vec<PathBuf>,
    pub n_q: usize,
    pub allow_truncated: bool,
    pub readers: usize,
    /// Slots to lease at most.
    pub width: usize,
}

/// The batch, shared between the loop on the calling thread and the steps on the encoder thread.
struct Shared(Arc<Mutex<EncodeBatch>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, EncodeBatch> {
        // Plain bookkeeping; a step that panicked ends the encoder thread and the call anyway.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SlotBatch for Shared {
    type Input = AudioInput;
    fn free(&self) -> usize {
        self.lock().free()
    }
    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
    fn admit(&mut self, id: usize, input: AudioInput) {
        self.lock().admit(id, input);
    }
    fn frames_done(&self) -> u64 {
        self.lock().frames_done()
    }
}

/// Each file's codes, or why it could not be read (the message names the file).
pub fn encode_files(
    py: Python<'_>,
    actor: &Actor<Enc>,
    table: &SlotTable,
    job: FilesJob,
) -> PyResult<Vec<std::result::Result<EncodedFile, String>>> {
    let count = job.paths.len();
    let mut out: Vec<Option<std::result::Result<EncodedFile, String>>> = vec![None; count];
    if count == 0 {
        return Ok(Vec::new());
    }
    let lease = py.detach(|| table.lease(count.min(job.width))).py_err()?;
    let slots = lease.slots.clone();
    let (paths, allow) = (Arc::new(job.paths), job.allow_truncated);
    let readers = Readers::spawn(count, job.readers, slots.len(), move |i| {
        read_audio_input(&paths[i], allow, None).map(Some)
    })
    .py_err()?;
    let mut batch = Shared(Arc::new(Mutex::new(
        EncodeBatch::new(slots, job.n_q).py_err()?,
    )));
    // The readers move in: their receiver belongs to one thread at a time.
    let (run, interrupt, out) = py.detach(move || {
        let mut interrupt: Option<PyErr> = None;
        let run = drive(
            &readers,
            &mut batch,
            |b| {
                if let Err(e) = Python::attach(|py| py.check_signals()) {
                    interrupt = Some(e);
                    return Err(Error::input(OP, "interrupted"));
                }
                let shared = b.0.clone();
                actor.call(move |e: &mut Enc| -> Result<Vec<(usize, EncodedFile)>> {
                    let mut batch = shared.lock().unwrap_or_else(|p| p.into_inner());
                    batch.step(e.as_mut())
                })?
            },
            |o| {
                match o {
                    Outcome::Done(id, f) => out[id] = Some(Ok(f)),
                    Outcome::Failed(id, e) => out[id] = Some(Err(e.to_string())),
                    Outcome::Skipped(id) => {
                        out[id] = Some(Err(format!("file {id} was skipped by its reader")))
                    }
                }
                Ok(())
            },
        );
        (run, interrupt, out)
    });
    drop(lease);
    if let Some(e) = interrupt {
        return Err(e);
    }
    run.py_err()?;
    Ok(out
        .into_iter()
        .enumerate()
        .map(|(i, o)| o.unwrap_or_else(|| Err(format!("file {i} never finished"))))
        .collect())
}
