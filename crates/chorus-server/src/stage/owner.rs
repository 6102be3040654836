//! The owner thread of a model stage: it builds the stage (a device backend may have to stay on
//! the thread that made it), then loops: admit what arrived, drop what was cancelled, take the
//! jobs' input, step every job with work. With no work it sleeps until a command comes (a start,
//! or a wake-up sent with a job's input, see [`super::input`]); nothing waits in line for a slot.
//! A panic on the thread ends every job of its device with an error naming the device, and marks
//! the device failed so that its pool places nothing more on it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use chorus_core::{Error, Result};

use super::pool::{FaultSwitch, Health};

/// The device an owner thread runs on, as its failures name it.
pub(crate) struct Watch {
    pub device: usize,
    /// Marked when the thread panics.
    pub health: Arc<Health>,
    pub fault: Option<FaultSwitch>,
}

/// What the front sends the owner thread.
pub(crate) enum Command<S> {
    Start(Box<S>),
    /// A job's input arrived (or its client went away): look again before sleeping.
    Wake,
    /// End every job and the thread.
    Stop,
}

/// A stage's side of the loop.
pub(crate) trait Owner {
    /// A job to admit, with where its events go.
    type Start;
    /// Admits a job or refuses it at once.
    fn admit(&mut self, job: Self::Start);
    /// Cancels the jobs whose clients cancelled, went away, or were too slow.
    fn sweep(&mut self);
    fn has_jobs(&self) -> bool;
    /// Moves what clients sent since the last step into the stage (jobs that take input).
    fn take_input(&mut self) {}
    /// Whether a step has something to do; while not, the thread sleeps until a command comes.
    /// Jobs that only produce (songs, utterances) always have work.
    fn has_work(&self) -> bool {
        self.has_jobs()
    }
    /// One step of every active job.
    fn step(&mut self);
    /// Publishes the gauges.
    fn publish(&self);
    /// Ends every job: the server is shutting down.
    fn stop(&mut self);
    /// Ends every job with an internal error saying `why`: the thread panicked.
    fn abort(&mut self, why: &str);
}

/// Why a job did not reach the owner thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubmitFailed {
    /// Its queue holds as many starts as it takes.
    Full,
    /// The thread has ended.
    Stopped,
}

/// The owner thread and its command queue. Dropping it stops the thread (every job ends).
pub(crate) struct OwnerThread<S> {
    tx: SyncSender<Command<S>>,
    thread: Option<JoinHandle<()>>,
}

impl<S: Send + 'static> OwnerThread<S> {
    /// Starts thread `name`, where `build` makes the owner; returns once it is built (with what
    /// `build` reported beside it) or with its error. At most `queue` starts wait for the
    /// thread between two steps.
    pub(crate) fn spawn<O, I, F>(
        name: &str,
        queue: usize,
        watch: Watch,
        build: F,
    ) -> Result<(Self, I)>
    where
        O: Owner<Start = S>,
        I: Send + 'static,
        F: FnOnce() -> Result<(O, I)> + Send + 'static,
    {
        const OP: &str = "OwnerThread::spawn";
        let (tx, rx) = mpsc::sync_channel::<Command<S>>(queue);
        let (ready_tx, ready_rx) = mpsc::channel::<Result<I>>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || match build() {
                Ok((owner, info)) => {
                    if ready_tx.send(Ok(info)).is_ok() {
                        run(owner, rx, watch);
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| Error::io(OP, name.to_string(), e))?;
        match ready_rx.recv() {
            Ok(Ok(info)) => Ok((
                Self {
                    tx,
                    thread: Some(thread),
                },
                info,
            )),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(Error::config(
                    OP,
                    format!("building the stage of thread {name} panicked"),
                ))
            }
        }
    }

    /// A handle that wakes the thread when a job's input arrives.
    pub(crate) fn waker(&self) -> super::input::Waker
    where
        S: 'static,
    {
        let tx = self.tx.clone();
        super::input::Waker::new(move || {
            // Full: commands are queued, so the thread wakes anyway; gone: nothing to wake.
            let _ = tx.try_send(Command::Wake);
        })
    }

    /// Hands a job to the thread without waiting; a job it cannot take comes back.
    pub(crate) fn try_submit(&self, job: S) -> std::result::Result<(), (SubmitFailed, S)> {
        let back = |c: Command<S>| match c {
            Command::Start(job) => *job,
            // Only a start was sent.
            Command::Wake | Command::Stop => unreachable!("a start was sent"),
        };
        match self.tx.try_send(Command::Start(Box::new(job))) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(c)) => Err((SubmitFailed::Full, back(c))),
            Err(TrySendError::Disconnected(c)) => Err((SubmitFailed::Stopped, back(c))),
        }
    }
}

impl<S> Drop for OwnerThread<S> {
    fn drop(&mut self) {
        // A blocking send: the thread drains its queue between steps, or is gone (then it fails).
        let _ = self.tx.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The owner's loop until it ends; a panic in it ends every job with an error naming the device
/// and marks the device failed.
fn run<O: Owner>(mut owner: O, rx: Receiver<Command<O::Start>>, watch: Watch) {
    let Err(panic) = catch_unwind(AssertUnwindSafe(|| serve(&mut owner, &rx, &watch))) else {
        return;
    };
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    let why = format!("device {} failed: {what}", watch.device);
    watch.health.fail(why.clone());
    // The stage may be half-stepped: if ending the jobs panics too, they end as `stopped` when
    // the owner is dropped.
    let _ = catch_unwind(AssertUnwindSafe(|| owner.abort(&why)));
}

/// The owner's loop, until `Stop` or until every sender is gone.
fn serve<O: Owner>(owner: &mut O, rx: &Receiver<Command<O::Start>>, watch: &Watch) {
    owner.publish();
    loop {
        let mut commands = Vec::new();
        // Idle: sleep until a command comes. Busy: take what has arrived and step on.
        if !owner.has_work() {
            match rx.recv() {
                Ok(c) => commands.push(c),
                Err(_) => return,
            }
        }
        let mut stop = false;
        loop {
            match rx.try_recv() {
                Ok(c) => commands.push(c),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    stop = true;
                    break;
                }
            }
        }
        for command in commands {
            match command {
                Command::Start(job) => owner.admit(*job),
                Command::Wake => {}
                Command::Stop => stop = true,
            }
        }
        if stop {
            owner.stop();
            return;
        }
        owner.sweep();
        owner.take_input();
        if owner.has_work() {
            if watch.fault.as_ref().is_some_and(FaultSwitch::tripped) {
                panic!("its fault switch was tripped");
            }
            owner.step();
        }
        owner.publish();
    }
}
