//! Kyutai streaming speech to text behind `/v1/stt` (Chorus's JSON protocol) and
//! `/api/asr-streaming` (moshi-server's MessagePack protocol), both specified in
//! `docs/protocol.md`, "Speech to text".
//!
//! One owner thread ([`crate::stage::owner`], the loop of `/v1/music` and `/v1/tts`) owns a
//! [`chorus_stt::SttStage`] built with Mimi's encoder in its step. Unlike songs and utterances,
//! a stream's work comes from its client: each connection cuts its audio into whole 80 ms frames
//! (any chunk size, s16, f32 or Opus) and hands them, with its control messages, to the stream's
//! input channel ([`crate::stage::input`]), which wakes the thread; the thread moves a few frames
//! of each stream into the stage, steps while any stream has a whole frame, and sleeps while
//! none has. Each stream's tokens, VAD, words and turn ends go to its own bounded channel. The
//! async side parses and checks everything a client sends before it reaches the thread, so a bad
//! client fails alone; a client that stops reading is cut off alone (`slow_consumer`).

pub mod asr_wire;
pub(crate) mod asr_ws;
mod engine;
mod job;
mod metrics;
mod protocol;
mod worker;
pub(crate) mod ws;

pub use engine::{
    SttEngine, SttInfo, SttServeConfig, SttStageFactory, DEFAULT_MAX_FRAMES_PER_MESSAGE,
    DEFAULT_MAX_QUEUED_INPUT, DEFAULT_MAX_QUEUED_STARTS, DEFAULT_MAX_UNDELIVERED_EVENTS,
    DEFAULT_STEP_GATHER,
};
pub use job::{StreamEnded, SttEvent, SttInput, SttJob, SttOutcome, SttStarted, SttUpdate};
pub use metrics::SttMetrics;
pub use protocol::{parse_stt_message, SttClientMessage, SttServerMessage, SttStart};
pub use worker::{END_OF_TURN_HEAD, END_OF_TURN_THRESHOLD, MAX_PENDING_MARKERS};
