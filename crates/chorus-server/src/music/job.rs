//! One song as its client sees it: a bounded channel of events from the engine thread, and the
//! song's outcome once that channel closes.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use chorus_music::song::LEVELS;
use chorus_music::{EndReason, SongId};
use tokio::sync::mpsc;

use super::error::MusicError;

/// The song was admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub song: SongId,
    pub max_frames: usize,
    pub prompt_tokens: usize,
}

/// One emitted frame.
#[derive(Clone, Debug, PartialEq)]
pub struct MusicFrame {
    pub index: usize,
    pub codes: [u32; LEVELS],
    /// `[8 * hidden]` f32, when the client asked for hiddens.
    pub hidden: Option<Vec<f32>>,
}

/// What flows through a job's channel: `Started` first, then frames in order.
#[derive(Clone, Debug, PartialEq)]
pub enum MusicEvent {
    Started(Started),
    Frame(MusicFrame),
}

/// How a job ended; set by the engine thread before it drops the channel's sender.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The song ran to its end (or was cancelled): `frames` frames were emitted and sent.
    Ended { reason: EndReason, frames: usize },
    /// Refused at admission, or cut off (`slow_consumer`, `internal`).
    Failed(MusicError),
}

/// What [`MusicJob::next`] yields.
#[derive(Clone, Debug, PartialEq)]
pub enum JobUpdate {
    Event(MusicEvent),
    Done(Outcome),
}

/// Why a client asked the engine to drop its song (read by the engine thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CancelRequest {
    None = 0,
    /// The client sent `cancel`.
    Client = 1,
    /// The server could not write to the client in time.
    SlowClient = 2,
}

/// State shared by a job's handle and the engine thread.
pub(crate) struct JobShared {
    cancel: AtomicU8,
    outcome: Mutex<Option<Outcome>>,
}

impl JobShared {
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

    /// Records the outcome (the first one wins).
    pub(crate) fn set_outcome(&self, outcome: Outcome) {
        let mut slot = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(outcome);
        }
    }

    fn take_outcome(&self) -> Option<Outcome> {
        self.outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// A submitted song. Dropping it cancels the song (the engine sees the closed channel before its
/// next step) and frees its slot and KV blocks.
pub struct MusicJob {
    pub(crate) events: mpsc::Receiver<MusicEvent>,
    pub(crate) shared: Arc<JobShared>,
    pub(crate) finished: Option<Outcome>,
    pub(crate) hiddens: bool,
}

impl MusicJob {
    /// The next event, or the outcome once every event has been read (and on every later call).
    pub async fn next(&mut self) -> JobUpdate {
        if let Some(outcome) = &self.finished {
            return JobUpdate::Done(outcome.clone());
        }
        if let Some(ev) = self.events.recv().await {
            return JobUpdate::Event(ev);
        }
        // The engine sets the outcome before it drops the sender, so a closed channel has one,
        // unless the engine thread died.
        let outcome = self
            .shared
            .take_outcome()
            .unwrap_or_else(|| Outcome::Failed(MusicError::internal("the music engine stopped")));
        self.finished = Some(outcome.clone());
        JobUpdate::Done(outcome)
    }

    /// Whether frames carry hiddens.
    pub fn hiddens(&self) -> bool {
        self.hiddens
    }

    /// Asks the engine to cancel the song; frames already queued still arrive, then
    /// `Ended { reason: Cancelled }`.
    pub fn cancel(&self) {
        self.shared.request_cancel(CancelRequest::Client);
    }

    /// Marks the client too slow, so that dropping the job counts as a slow consumer.
    pub(crate) fn cut_off_slow(&self) {
        self.shared.request_cancel(CancelRequest::SlowClient);
    }
}
