//! One song as its client sees it: the shared job handle ([`crate::stage::job`]) over the song's
//! events and outcome.

use chorus_music::song::LEVELS;
use chorus_music::{EndReason, SongId};

use super::error::MusicError;
use crate::stage::job::Job;

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

impl Outcome {
    /// The outcome of a song whose engine thread died.
    pub(crate) fn engine_stopped() -> Self {
        Self::Failed(MusicError::internal("the music engine stopped"))
    }
}

/// What [`MusicJob::next`] yields.
pub type JobUpdate = crate::stage::job::JobUpdate<MusicEvent, Outcome>;

/// A submitted song. Dropping it cancels the song (the engine sees the closed channel before its
/// next step) and frees its slot and KV blocks.
pub struct MusicJob {
    pub(crate) job: Job<MusicEvent, Outcome>,
    pub(crate) hiddens: bool,
}

impl MusicJob {
    /// The next event, or the outcome once every event has been read (and on every later call).
    pub async fn next(&mut self) -> JobUpdate {
        self.job.next().await
    }

    /// Whether frames carry hiddens.
    pub fn hiddens(&self) -> bool {
        self.hiddens
    }

    /// Asks the engine to cancel the song; frames already queued still arrive, then
    /// `Ended { reason: Cancelled }`.
    pub fn cancel(&self) {
        self.job.cancel();
    }

    /// Marks the client too slow, so that dropping the job counts as a slow consumer.
    pub(crate) fn cut_off_slow(&self) {
        self.job.cut_off_slow();
    }
}
