//! Machine-readable error codes of `/v1/music`, with their close codes and HTTP statuses.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::protocol::close_code;

/// Why a music request or song failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MusicErrorCode {
    /// Not JSON, not an object, or no string `type`.
    BadJson,
    /// `type` is neither `start` nor `cancel`.
    UnknownMessage,
    /// A missing, unknown or invalid field of `start` (or of the HTTP body or query).
    BadRequest,
    /// `caption`/`lyrics` given but the server was started without a tokenizer.
    NoTokenizer,
    /// `cancel` or a binary message before `start`.
    NotStarted,
    /// A second `start` on one connection.
    AlreadyStarted,
    /// No `start` in time.
    StartTimeout,
    /// Every song slot (or the KV pool, or the engine's queue) is taken; nothing was queued.
    Busy,
    /// The server is shutting down.
    Draining,
    /// The client did not read its frames fast enough; its song was cancelled.
    SlowConsumer,
    /// The server runs without a music model.
    NotEnabled,
    /// A message over `--max-ws-message`.
    MessageTooBig,
    /// Anything else on the server's side.
    Internal,
}

impl MusicErrorCode {
    /// Every code, in the order metrics list them.
    pub const ALL: [MusicErrorCode; 13] = [
        Self::BadJson,
        Self::UnknownMessage,
        Self::BadRequest,
        Self::NoTokenizer,
        Self::NotStarted,
        Self::AlreadyStarted,
        Self::StartTimeout,
        Self::Busy,
        Self::Draining,
        Self::SlowConsumer,
        Self::NotEnabled,
        Self::MessageTooBig,
        Self::Internal,
    ];

    /// The wire name (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadJson => "bad_json",
            Self::UnknownMessage => "unknown_message",
            Self::BadRequest => "bad_request",
            Self::NoTokenizer => "no_tokenizer",
            Self::NotStarted => "not_started",
            Self::AlreadyStarted => "already_started",
            Self::StartTimeout => "start_timeout",
            Self::Busy => "busy",
            Self::Draining => "draining",
            Self::SlowConsumer => "slow_consumer",
            Self::NotEnabled => "not_enabled",
            Self::MessageTooBig => "message_too_big",
            Self::Internal => "internal",
        }
    }

    /// The WebSocket close code that follows the error message.
    pub fn close_code(self) -> u16 {
        match self {
            Self::Busy => close_code::TRY_LATER,
            Self::Draining => close_code::GOING_AWAY,
            Self::Internal => close_code::INTERNAL,
            Self::MessageTooBig => close_code::TOO_BIG,
            _ => close_code::POLICY,
        }
    }

    /// The HTTP status of `POST /v1/music` for this error.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Busy | Self::Draining => StatusCode::SERVICE_UNAVAILABLE,
            Self::NotEnabled => StatusCode::NOT_FOUND,
            Self::Internal | Self::SlowConsumer => StatusCode::INTERNAL_SERVER_ERROR,
            Self::StartTimeout => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

/// An error with its code and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MusicError {
    pub code: MusicErrorCode,
    pub message: String,
}

impl MusicError {
    pub fn new(code: MusicErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A `bad_request` error.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(MusicErrorCode::BadRequest, message)
    }

    /// An `internal` error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(MusicErrorCode::Internal, message)
    }
}

impl std::fmt::Display for MusicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for MusicError {}
