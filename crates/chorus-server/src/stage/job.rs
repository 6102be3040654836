//! One job (a song, an utterance) as its client sees it: a bounded channel of events from the
//! owner thread, and the job's outcome once that channel closes; and the cancel flag the owner
//! thread reads between steps.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Why a client asked the owner thread to drop its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CancelRequest {
    None = 0,
    /// The client sent `cancel`.
    Client = 1,
    /// The server could not write to the client in time.
    SlowClient = 2,
}

/// Why a running job was cancelled (the metrics' `reason` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CancelKind {
    /// The client sent `cancel`.
    Client = 0,
    /// The client went away.
    Disconnect = 1,
    /// The client did not read in time (its channel was full, or a write timed out).
    SlowConsumer = 2,
}

/// The `reason` label of each [`CancelKind`], by its value.
pub(crate) const CANCEL_LABELS: [&str; 3] = ["client", "disconnect", "slow_consumer"];

/// State shared by a job's handle and the owner thread.
pub(crate) struct JobShared<O> {
    cancel: AtomicU8,
    outcome: Mutex<Option<O>>,
}

impl<O> JobShared<O> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            cancel: AtomicU8::new(CancelRequest::None as u8),
            outcome: Mutex::new(None),
        })
    }

    pub(crate) fn request_cancel(&self, why: CancelRequest) {
        // The first reason sticks: a slow client that then disconnects stays a slow client.
        let _ = self.cancel.compare_exchange(
            CancelRequest::None as u8,
            why as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    pub(crate) fn cancel_request(&self) -> CancelRequest {
        match self.cancel.load(Ordering::SeqCst) {
            1 => CancelRequest::Client,
            2 => CancelRequest::SlowClient,
            _ => CancelRequest::None,
        }
    }

    /// Why the owner thread should cancel this running job now, if it should: the client asked,
    /// was too slow, or dropped its handle (`events` closed).
    pub(crate) fn gone<E>(&self, events: &mpsc::Sender<E>) -> Option<CancelKind> {
        match self.cancel_request() {
            CancelRequest::Client => Some(CancelKind::Client),
            CancelRequest::SlowClient => Some(CancelKind::SlowConsumer),
            CancelRequest::None if events.is_closed() => Some(CancelKind::Disconnect),
            CancelRequest::None => None,
        }
    }

    /// Records the outcome (the first one wins).
    pub(crate) fn set_outcome(&self, outcome: O) {
        let mut slot = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(outcome);
        }
    }

    fn take_outcome(&self) -> Option<O> {
        self.outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// What [`Job::next`] yields.
#[derive(Clone, Debug, PartialEq)]
pub enum JobUpdate<E, O> {
    Event(E),
    Done(O),
}

/// A submitted job. Dropping it cancels the job (the owner thread sees the closed channel before
/// its next step) and frees its slot.
pub struct Job<E, O> {
    events: mpsc::Receiver<E>,
    shared: Arc<JobShared<O>>,
    finished: Option<O>,
    /// The outcome when the owner thread died without setting one.
    stopped: fn() -> O,
}

impl<E, O: Clone> Job<E, O> {
    /// A job's handle and the owner thread's side of it (`bound` events may wait unread).
    pub(crate) fn channel(bound: usize, stopped: fn() -> O) -> (Self, JobSide<E, O>) {
        let (tx, events) = mpsc::channel(bound);
        let shared = JobShared::new();
        let job = Self {
            events,
            shared: shared.clone(),
            finished: None,
            stopped,
        };
        (job, JobSide { events: tx, shared })
    }

    /// The next event, or the outcome once every event has been read (and on every later call).
    pub async fn next(&mut self) -> JobUpdate<E, O> {
        if let Some(outcome) = &self.finished {
            return JobUpdate::Done(outcome.clone());
        }
        if let Some(ev) = self.events.recv().await {
            return JobUpdate::Event(ev);
        }
        // The owner sets the outcome before it drops the sender, so a closed channel has one,
        // unless the owner thread died.
        let outcome = self
            .shared
            .take_outcome()
            .unwrap_or_else(|| (self.stopped)());
        self.finished = Some(outcome.clone());
        JobUpdate::Done(outcome)
    }

    /// Asks the owner thread to cancel the job; events already queued still arrive, then the
    /// outcome.
    pub fn cancel(&self) {
        self.shared.request_cancel(CancelRequest::Client);
    }

    /// Marks the client too slow, so that dropping the job counts as a slow consumer.
    pub(crate) fn cut_off_slow(&self) {
        self.shared.request_cancel(CancelRequest::SlowClient);
    }
}

/// The owner thread's side of a job: where its events go and where its outcome is set.
pub(crate) struct JobSide<E, O> {
    pub(crate) events: mpsc::Sender<E>,
    pub(crate) shared: Arc<JobShared<O>>,
}
