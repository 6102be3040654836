//! Sesame CSM text to speech behind `/v1/tts` (specified in `docs/protocol.md`, "Text to
//! speech").
//!
//! One owner thread ([`crate::stage::owner`], the same loop as `/v1/music`) owns a
//! [`chorus_csm::TtsStage`] built with its Mimi decoder, so every frame ends in 80 ms of PCM: it
//! admits utterances between steps (refusing at once, as `busy`, when every seat is taken),
//! steps every active one, and hands each one's audio to its own bounded channel. The async side
//! ([`ws`], [`http`]) parses and validates every request (text, speaker, context codes, lengths,
//! draws) before it reaches that thread, so a bad client fails alone; a client that stops reading
//! is cut off alone (`slow_consumer`).

mod engine;
pub(crate) mod http;
mod job;
mod metrics;
mod protocol;
mod request;
mod start;
mod worker;
pub(crate) mod ws;

pub use crate::stage::error::{StageError as TtsError, StageErrorCode as TtsErrorCode};
pub use engine::{
    TtsConfig, TtsEngine, TtsInfo, TtsStageFactory, DEFAULT_MAX_FRAMES, DEFAULT_MAX_TEXT_BYTES,
    DEFAULT_SPEAKERS,
};
pub use job::{TtsEndReason, TtsEvent, TtsFrame, TtsJob, TtsOutcome, TtsStarted, TtsUpdate};
pub use metrics::{TtsGauges, TtsMetrics};
pub use protocol::TtsServerMessage;
pub use request::UtteranceSpec;
pub use start::{parse_tts_body, parse_tts_message, ContextTurn, TtsStart, TtsText};
