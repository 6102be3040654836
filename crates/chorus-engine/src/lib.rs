//! The stream scheduler.
//!
//! One dedicated engine thread owns the [`chorus_core::FrameDecoder`] (it builds it from a
//! [`DecoderFactory`], so a decoder that cannot move between threads still works). Streams are
//! handed a slot when they open; each stream queues frames, resets and its end marker in one
//! bounded FIFO, so everything a stream asks for happens in the order it asked. Every step takes
//! each stream with something pending, oldest-ready first and one frame per stream, up to the
//! largest batch, so no stream can starve another. PCM goes back through a bounded per-stream
//! outbox, each frame a row of its step's pooled block (no copy or allocation per frame): a stream
//! that sends too far ahead or never reads is cut off alone.
//!
//! A slot is reset by the engine thread right before its new owner's first frame, so a slot
//! released while a step is using it is never reset under that step.
//!
//! An [`EnginePool`] runs one engine per device (a one-device server is a pool of one): it places
//! each new stream on the engine with the most free slots, and a device that fails ends only its
//! own streams.

mod engine;
mod error;
pub mod fake;
mod handout;
mod metrics;
mod pcm;
mod pool;
mod prometheus;
mod sched;
mod stream;
mod worker;

pub use engine::{DecoderInfo, Engine, EngineConfig, EngineStatus, DEFAULT_DEVICE};
pub use error::StreamError;
pub use metrics::{ErrorCounts, Histogram, Metrics};
pub use pcm::{PcmFrame, MAX_PCM_BLOCKS, MAX_PCM_POOL_BYTES, MIN_PCM_BLOCKS};
pub use pool::{DeviceStatus, EnginePool, PoolMetrics, PoolStatus};
pub use stream::{Stream, StreamEvent, StreamInput};

use chorus_core::{FrameDecoder, Result};

/// Builds the decoder on the engine thread.
pub type DecoderFactory = Box<dyn FnOnce() -> Result<Box<dyn FrameDecoder>> + Send>;

/// Default bound on the items (frames, resets) a stream may have queued and not yet decoded:
/// 2.56 s of audio ahead of the decoder.
pub const DEFAULT_MAX_PENDING_FRAMES: usize = 32;
/// Default bound on decoded frames a stream's reader has not collected yet (5.12 s of audio).
pub const DEFAULT_MAX_UNDELIVERED_FRAMES: usize = 64;
/// Default bound on the slot resets run before one step. A reset is a dozen small device calls on
/// the engine thread; a burst of new streams (a ramp-up, clients reconnecting after a restart)
/// would otherwise hold the next step of every open stream for all of them.
pub const DEFAULT_MAX_RESETS_PER_STEP: usize = 64;
