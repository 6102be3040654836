//! A thread that owns one value and runs jobs on it in order.
//!
//! Decoders and stages hold device state that must not move between threads, and the Python
//! object that fronts them is shared by every Python thread: the value lives on its own thread,
//! built there, and Python threads hand it jobs and wait (without the GIL) for their answers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread::JoinHandle;

use chorus_core::{Error, Result};

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// The owner thread of an `S`.
pub struct Actor<S> {
    jobs: Option<mpsc::Sender<Job<S>>>,
    thread: Option<JoinHandle<()>>,
    name: &'static str,
}

impl<S: 'static> Actor<S> {
    /// Starts the thread and builds the value there; a build error comes back from here.
    pub fn spawn(
        name: &'static str,
        build: impl FnOnce() -> Result<S> + Send + 'static,
    ) -> Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job<S>>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<()>>(1);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let built = catch_unwind(AssertUnwindSafe(build))
                    .unwrap_or_else(|_| Err(stopped(name, "panicked while starting")));
                let mut value = match built {
                    Ok(v) => v,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                while let Ok(job) = rx.recv() {
                    // A job that panics ends the thread: its value may be half-updated.
                    if catch_unwind(AssertUnwindSafe(|| job(&mut value))).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| Error::io(name, "thread", e))?;
        ready_rx
            .recv()
            .map_err(|_| stopped(name, "ended while starting"))??;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
            name,
        })
    }

    /// Runs `f` on the value and returns its answer.
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Result<R> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job<S> = Box::new(move |s| {
            let _ = tx.send(f(s));
        });
        self.jobs
            .as_ref()
            .and_then(|j| j.send(job).ok())
            .ok_or_else(|| stopped(self.name, "is closed"))?;
        rx.recv()
            .map_err(|_| stopped(self.name, "panicked in a job; open a new one"))
    }
}

impl<S> Drop for Actor<S> {
    fn drop(&mut self) {
        // Closing the channel ends the loop; joining frees the device state before we return.
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn stopped(name: &'static str, what: &str) -> Error {
    Error::Backend {
        op: "actor",
        backend: name,
        reason: format!("the worker thread {what}"),
    }
}
