//! The streaming server: WebSocket streams, whole-file decode over HTTP, health and metrics.
//!
//! Streams are opened through an [`chorus_engine::EnginePool`] (one engine per device; one for a
//! one-device server). Every connection is one async task that owns one engine
//! [`chorus_engine::Stream`]; it parses and validates everything a client sends (sizes, code
//! ranges, message types) before anything reaches the engine, so a bad client fails alone. The
//! protocol is specified in `docs/protocol.md`; [`protocol`] holds its types and codecs,
//! [`loadgen`] a client that plays many streams against a server and checks every frame against a
//! whole-file decode. The model endpoints (`/v1/music`, `/v1/tts`, `/v1/stt` with
//! `/api/asr-streaming`) each run one owner thread over their stage through [`stage`].

pub mod encode;
pub mod gate;
mod http;
mod limits;
pub mod loadgen;
pub mod music;
pub mod npy;
pub mod protocol;
mod server;
pub mod stage;
pub mod stt;
mod tcp;
pub mod tts;
pub mod wav;
mod ws;

pub use http::{MAX_DECODE_FRAMES, MAX_DECODE_SECONDS};
pub use limits::raise_open_file_limit;
pub use server::{Server, ServerConfig, Services};
pub use ws::WS_READ_BUFFER_BYTES;
