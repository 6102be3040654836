//! The music semantic stage behind `/v1/music` (specified in `docs/protocol.md`, "Music semantic
//! stage").
//!
//! One dedicated thread ([`worker`]) owns a [`chorus_music::SemanticStage`]: it admits new songs
//! between steps (refusing at once, as `busy`, what does not fit), steps every active song, and
//! hands each song's events to its own bounded channel. The async side ([`ws`], [`http`]) parses
//! and validates every request before it reaches that thread, so a bad client fails alone.
//! A client that stops reading is cut off alone: when its channel is full the worker cancels its
//! song with `slow_consumer` instead of waiting.

mod admit;
mod engine;
mod error;
pub(crate) mod http;
mod job;
mod metrics;
mod protocol;
mod request;
mod safetensors;
mod start;
mod worker;
pub(crate) mod ws;

pub use engine::{MusicConfig, MusicEngine, MusicInfo, StageFactory};
pub use error::{MusicError, MusicErrorCode};
pub use job::{JobUpdate, MusicEvent, MusicFrame, MusicJob, Outcome, Started};
pub use metrics::MusicMetrics;
pub use protocol::{parse_music_message, MusicClientMessage, MusicEndReason, MusicServerMessage};
pub use request::SongSpec;
pub use safetensors::song_safetensors;
pub use start::{parse_start, parse_start_body, PromptSource, StartRequest};
