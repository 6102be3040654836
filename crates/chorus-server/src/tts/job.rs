//! One utterance as its client sees it: the shared job handle ([`crate::stage::job`]) over the
//! utterance's events and outcome.

use std::time::Duration;

use chorus_csm::{EndReason, UtteranceId};
use serde::{Deserialize, Serialize};

use super::TtsError;
use crate::stage::job::Job;

/// The utterance was admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TtsStarted {
    pub utterance: UtteranceId,
    pub max_frames: usize,
    pub prompt_frames: usize,
}

/// One frame's audio: 1,920 samples of 24 kHz mono (80 ms).
#[derive(Clone, Debug, PartialEq)]
pub struct TtsFrame {
    pub index: usize,
    pub pcm: Vec<f32>,
}

/// What flows through a job's channel: `Started` first, then frames in order.
#[derive(Clone, Debug, PartialEq)]
pub enum TtsEvent {
    Started(TtsStarted),
    Frame(TtsFrame),
}

/// Why an utterance ended, on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TtsEndReason {
    /// The model drew its end frame (all codes zero; not emitted).
    End,
    /// `max_frames` frames were emitted (the length cap).
    MaxFrames,
    /// The client cancelled.
    Cancelled,
}

impl From<EndReason> for TtsEndReason {
    fn from(r: EndReason) -> Self {
        match r {
            EndReason::EndFrame => Self::End,
            // The server never forces codes, so `ForcedDone` cannot happen; it is a length cap too.
            EndReason::MaxFrames | EndReason::ForcedDone => Self::MaxFrames,
        }
    }
}

impl TtsEndReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::End => "end",
            Self::MaxFrames => "max_frames",
            Self::Cancelled => "cancelled",
        }
    }
}

/// How a job ended; set by the owner thread before it drops the channel's sender.
#[derive(Clone, Debug, PartialEq)]
pub enum TtsOutcome {
    /// The utterance ran to its end (or was cancelled): `frames` frames were sent; the first
    /// after `first_audio` from the request's submission.
    Ended {
        reason: TtsEndReason,
        frames: usize,
        first_audio: Option<Duration>,
    },
    /// Refused at admission, or cut off (`slow_consumer`, `internal`, `draining`).
    Failed(TtsError),
}

impl TtsOutcome {
    /// The outcome of an utterance whose owner thread died.
    pub(crate) fn engine_stopped() -> Self {
        Self::Failed(TtsError::internal("the speech engine stopped"))
    }
}

/// A submitted utterance. Dropping it cancels the utterance (the owner thread sees the closed
/// channel before its next step) and frees its seat.
pub type TtsJob = Job<TtsEvent, TtsOutcome>;

/// What [`TtsJob::next`] yields.
pub type TtsUpdate = crate::stage::job::JobUpdate<TtsEvent, TtsOutcome>;
