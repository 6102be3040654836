//! Why a stream was refused or ended; each maps to one protocol error code in the server.

/// A stream-level refusal or termination. Library errors use [`chorus_core::Error`]; these are
/// outcomes that concern one stream only and that a client is told about.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("all {max_slots} stream slots are taken; retry later")]
    Busy { max_slots: usize },
    #[error("the server is draining and accepts no new streams")]
    Draining,
    #[error("the engine has stopped")]
    Stopped,
    #[error("more than {limit} frames queued ahead of the decoder")]
    QueueFull { limit: usize },
    #[error("more than {limit} decoded frames were not read in time")]
    SlowConsumer { limit: usize },
    #[error("invalid frame: {0}")]
    InvalidFrame(String),
    #[error("the stream was already finished")]
    Finished,
    #[error("decode step failed: {0}")]
    DecodeFailed(String),
}

impl StreamError {
    /// The machine-readable name used in protocol messages and metrics labels.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Busy { .. } => "busy",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
            Self::QueueFull { .. } => "queue_full",
            Self::SlowConsumer { .. } => "slow_consumer",
            Self::InvalidFrame(_) => "invalid_frame",
            Self::Finished => "finished",
            Self::DecodeFailed(_) => "decode_failed",
        }
    }
}
