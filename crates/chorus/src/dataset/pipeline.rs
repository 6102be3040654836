//! One bulk run: reader threads, the batched model loop on this thread, a writer thread, a
//! progress bar in files, hours of audio and speed, and the summary with every failure by name.

use super::files::write_atomic;
use super::{Failure, Job};
use anyhow::{anyhow, bail, Result};
use chorus_runtime::bulk::{drive, frames_to_seconds, Outcome, Readers, SlotBatch};
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Finished files that may wait for the writer before the model loop waits for it.
const WRITE_QUEUE: usize = 16;
/// Progress-bar refreshes per second at most.
const BAR_HZ: u8 = 4;

type Load<I> = dyn Fn(&Job, &Reporter) -> Result<Option<I>> + Send + Sync;
type Serialize<O> = dyn Fn(O) -> Result<Vec<u8>> + Send;

/// What a run does with its files.
pub struct Pipeline<I, O> {
    pub jobs: Vec<Job>,
    /// Inputs already known to fail (unreadable folders, colliding outputs).
    pub failed: Vec<Failure>,
    pub readers: usize,
    /// Loaded inputs that may wait for a slot.
    pub queue: usize,
    /// Reads a job's input, or `None` when its output is already done.
    pub load: Box<Load<I>>,
    /// A finished file's output bytes.
    pub serialize: Box<Serialize<O>>,
    /// `encoded` or `decoded`, for the summary.
    pub verb: &'static str,
}

/// The progress bar, shared by the loop, the readers and the writer.
#[derive(Clone)]
pub struct Reporter {
    bar: ProgressBar,
}

impl Reporter {
    fn new(files: usize) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some(files as u64),
            indicatif::ProgressDrawTarget::stderr_with_hz(BAR_HZ),
        );
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} files {msg} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self { bar }
    }

    /// A line above the bar (or alone when there is no terminal).
    pub fn note(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    fn audio(&self, frames: u64, start: Instant) {
        let seconds = frames_to_seconds(frames);
        if seconds > 0.0 {
            let rtf = start.elapsed().as_secs_f64() / seconds;
            self.bar
                .set_message(format!("{:.3} h of audio, RTF {rtf:.3}", seconds / 3600.0));
        }
    }
}

/// Runs `p` on `batch`, `step` advancing it by one model step. Fails (after writing what
/// finished) when any file failed or the run was interrupted.
pub fn run<B: SlotBatch, O: Send + 'static>(
    p: Pipeline<B::Input, O>,
    batch: &mut B,
    mut step: impl FnMut(&mut B) -> Result<Vec<(usize, O)>>,
) -> Result<()>
where
    B::Input: Send + 'static,
{
    let total = p.jobs.len() + p.failed.len();
    let report = Reporter::new(total);
    let failures = Arc::new(Mutex::new(p.failed));
    report.bar.inc(failures_len(&failures) as u64);
    let jobs = Arc::new(p.jobs);
    let start = Instant::now();
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    if ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).is_err() {
        report.note("warning: Ctrl-C will not stop the run cleanly (no handler)");
    }

    let (load, r, j) = (p.load, report.clone(), jobs.clone());
    let readers = Readers::spawn(jobs.len(), p.readers, p.queue, move |i| load(&j[i], &r))?;
    let (tx, rx) = sync_channel::<(usize, O)>(WRITE_QUEUE);
    let (serialize, r, j, f) = (p.serialize, report.clone(), jobs.clone(), failures.clone());
    let writer = std::thread::Builder::new()
        .name("chorus-writer".into())
        .spawn(move || {
            let mut written = 0usize;
            for (id, out) in rx {
                match serialize(out).and_then(|b| write_atomic(&j[id].output, &b)) {
                    Ok(()) => written += 1,
                    Err(e) => fail(&f, &r, &j[id].input, &e),
                }
                r.bar.inc(1);
            }
            written
        })?;

    let mut skipped = 0usize;
    let mut frames = 0u64;
    let run = drive(
        &readers,
        batch,
        |b| {
            if interrupted.load(Ordering::SeqCst) {
                bail!("interrupted");
            }
            let done = step(b)?;
            frames = b.frames_done();
            report.audio(frames, start);
            Ok(done)
        },
        |o| {
            match o {
                Outcome::Done(id, out) => tx
                    .send((id, out))
                    .map_err(|_| anyhow!("the writer thread stopped"))?,
                Outcome::Skipped(_) => {
                    skipped += 1;
                    report.bar.inc(1);
                }
                Outcome::Failed(id, e) => {
                    fail(&failures, &report, &jobs[id].input, &e);
                    report.bar.inc(1);
                }
            }
            Ok(())
        },
    );
    drop(readers);
    drop(tx);
    let written = writer
        .join()
        .map_err(|_| anyhow!("the writer thread panicked"))?;
    report.bar.finish_and_clear();

    let wall = start.elapsed().as_secs_f64();
    let audio = frames_to_seconds(frames);
    let failed = failures_len(&failures);
    let speed = if frames > 0 {
        format!(
            "{:.0} frames/s, RTF {:.4}",
            frames as f64 / wall.max(f64::MIN_POSITIVE),
            wall / audio
        )
    } else {
        "no frames to run".into()
    };
    eprintln!(
        "{} {written} file(s), {:.3} h of audio in {wall:.1} s ({speed}); skipped {skipped} \
         already done; {failed} failed",
        p.verb,
        audio / 3600.0,
    );
    let list = failures.lock().map(|f| f.clone()).unwrap_or_default();
    for f in &list {
        eprintln!("failed: {}: {}", f.path.display(), f.reason);
    }
    run?;
    if failed > 0 {
        bail!("{failed} of {total} file(s) failed (listed above)");
    }
    Ok(())
}

fn fail(to: &Mutex<Vec<Failure>>, report: &Reporter, path: &std::path::Path, e: &anyhow::Error) {
    let reason = format!("{e:#}");
    report.note(&format!("failed: {}: {reason}", path.display()));
    if let Ok(mut f) = to.lock() {
        f.push(Failure {
            path: path.to_path_buf(),
            reason,
        });
    }
}

fn failures_len(f: &Mutex<Vec<Failure>>) -> usize {
    f.lock().map_or(0, |f| f.len())
}
