//! Machine-readable error codes of the model endpoints (`/v1/music`, `/v1/tts`, `/v1/stt`), with
//! their close codes and HTTP statuses: one set, since all speak the same start/cancel protocol.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::protocol::close_code;

/// Why a request, a song or an utterance failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageErrorCode {
    /// Not JSON, not an object, or no string `type`.
    BadJson,
    /// `type` is not a message this endpoint takes.
    UnknownMessage,
    /// A missing, unknown or invalid field of `start` (or of the HTTP body or query).
    BadRequest,
    /// Text given but the server has no tokenizer for it.
    NoTokenizer,
    /// `cancel` or a binary message before `start`.
    NotStarted,
    /// A second `start` on one connection.
    AlreadyStarted,
    /// No `start` in time.
    StartTimeout,
    /// Every slot (or the KV pool, or the engine's queue) is taken; nothing was queued.
    Busy,
    /// The server is shutting down.
    Draining,
    /// The client did not read its frames fast enough; its job was cancelled.
    SlowConsumer,
    /// The server runs without this endpoint's model.
    NotEnabled,
    /// A message over `--max-ws-message`.
    MessageTooBig,
    /// An audio message that is empty, not a whole number of samples, or longer than allowed.
    BadFrameSize,
    /// Samples that are not finite, or an Opus packet libopus refuses.
    BadAudio,
    /// Anything else on the server's side.
    Internal,
}

impl StageErrorCode {
    /// Every code, in the order metrics list them.
    pub const ALL: [StageErrorCode; 15] = [
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
        Self::BadFrameSize,
        Self::BadAudio,
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
            Self::BadFrameSize => "bad_frame_size",
            Self::BadAudio => "bad_audio",
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

    /// The HTTP status of a `POST` for this error.
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
pub struct StageError {
    pub code: StageErrorCode,
    pub message: String,
}

impl StageError {
    pub fn new(code: StageErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A `bad_request` error.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StageErrorCode::BadRequest, message)
    }

    /// An `internal` error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StageErrorCode::Internal, message)
    }
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl std::error::Error for StageError {}

/// Seconds a `busy` HTTP answer asks the client to wait (`Retry-After`): a slot frees when any
/// running job ends, typically within seconds.
pub const BUSY_RETRY_AFTER_SECS: u64 = 1;

/// The JSON error body `{"code", "message"}` with the code's status (and `Retry-After` when busy).
pub(crate) fn error_response(err: &StageError) -> Response {
    let body = serde_json::json!({ "code": err.code.as_str(), "message": err.message });
    let mut res = (err.code.status(), Json(body)).into_response();
    if err.code == StageErrorCode::Busy {
        res.headers_mut().insert(
            header::RETRY_AFTER,
            header::HeaderValue::from(BUSY_RETRY_AFTER_SECS),
        );
    }
    res
}

/// A stage's refusal at admission: its own refusals for lack of slots or KV blocks say "busy";
/// other input errors are the request's fault.
pub(crate) fn admission_error(e: &chorus_core::Error) -> StageError {
    let code = if e.to_string().contains("busy") {
        StageErrorCode::Busy
    } else if matches!(e, chorus_core::Error::Input { .. }) {
        StageErrorCode::BadRequest
    } else {
        StageErrorCode::Internal
    };
    StageError::new(code, e.to_string())
}
