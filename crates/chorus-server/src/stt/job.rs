//! One transcription stream as its connection sees it: the input it hands the owner thread
//! (whole frames of audio and control), the events it gets back, and its outcome.

use std::time::Instant;

use crate::stage::error::StageError;
use crate::stage::input::InputTx;
use crate::stage::job::{Job, JobUpdate};

/// What a connection hands the owner thread, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum SttInput {
    /// Whole 80 ms frames of 24 kHz mono samples (a multiple of 1,920), and when their last
    /// sample arrived.
    Audio { pcm: Vec<f32>, arrived: Instant },
    /// Silence enough for the words of the audio so far to come out, then `Flushed`.
    Flush,
    /// `Marker{id}` back once the stream has stepped past the audio sent so far and the text
    /// delay (moshi-server's rule).
    Marker(i64),
    /// The stream restarts from position 0 (`ResetDone`).
    Reset,
    /// A flush, then the stream ends (its outcome).
    End,
}

/// The stream was admitted.
#[derive(Clone, Debug, PartialEq)]
pub struct SttStarted {
    pub stream: u64,
}

/// What flows through a stream's channel: `Started` first, then in stream order.
#[derive(Clone, Debug, PartialEq)]
pub enum SttEvent {
    Started(SttStarted),
    /// Position `position`'s text token (position `p >= 1` read audio frame `p - 1`), the VAD
    /// heads' class-0 probabilities (models with heads), and the samples still queued.
    Step {
        position: usize,
        token: u32,
        vad: Option<Vec<f32>>,
        buffered_samples: usize,
    },
    /// A finished word: its pieces, start (seconds), and when the frame it was decided in
    /// arrived.
    Word {
        tokens: Vec<u32>,
        start: f32,
        decided: Option<Instant>,
    },
    /// The end of the previous word (seconds).
    EndWord {
        stop: f32,
    },
    /// The end-of-turn head rose past its threshold at `position`.
    EndOfTurn {
        position: usize,
        probability: f32,
    },
    /// The flush silence has run: every word of the audio before it is out.
    Flushed {
        position: usize,
    },
    Marker {
        id: i64,
    },
    ResetDone,
}

/// How a stream ended; set by the owner thread before it drops the channel's sender.
#[derive(Clone, Debug, PartialEq)]
pub enum SttOutcome {
    /// `end` ran to its last step (or the client cancelled): `positions` steps, `words` words.
    Ended {
        positions: usize,
        words: usize,
        cancelled: bool,
    },
    /// Refused at admission, or cut off (`slow_consumer`, `bad_request`, `internal`, `draining`).
    Failed(StageError),
}

impl SttOutcome {
    /// The outcome of a stream whose owner thread died.
    pub(crate) fn engine_stopped() -> Self {
        Self::Failed(StageError::internal("the transcription engine stopped"))
    }
}

/// A submitted stream: its events and outcome, and where its input goes. Dropping it cancels
/// the stream (the owner thread wakes and frees its slot).
pub struct SttJob {
    pub(crate) job: Job<SttEvent, SttOutcome>,
    pub(crate) input: InputTx<SttInput>,
}

/// What [`SttJob::next`] yields.
pub type SttUpdate = JobUpdate<SttEvent, SttOutcome>;

/// The owner thread no longer takes this stream's input: it has ended (its outcome follows).
#[derive(Debug)]
pub struct StreamEnded;

impl SttJob {
    /// The next event, or the outcome once every event has been read.
    pub async fn next(&mut self) -> SttUpdate {
        self.job.next().await
    }

    /// Hands `input` to the owner thread, waiting while its queue is full. Cancel-safe.
    pub async fn send(&self, input: SttInput) -> Result<(), StreamEnded> {
        self.input.send(input).await.map_err(|_| StreamEnded)
    }

    /// Asks the owner thread to cancel the stream.
    pub fn cancel(&self) {
        self.job.cancel();
        self.input.wake();
    }
}
