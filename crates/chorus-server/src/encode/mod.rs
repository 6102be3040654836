//! Audio in: encode streams over WebSocket (`"input": "pcm"` on `/v1/stream`) and whole files
//! over HTTP (`POST /v1/encode`), served by their own engine beside the decoder's (one per device,
//! behind an [`EncodePool`]).

pub mod engine;
pub(crate) mod http;
pub mod metrics;
pub mod pool;
pub(crate) mod session;
pub mod wire;

pub use engine::{
    EncodeConfig, EncodeEngine, EncodeError, EncodeEvent, EncodeInfo, EncodeStream, EncoderFactory,
};
pub use http::MAX_ENCODE_SECONDS;
pub use metrics::EncodeMetrics;
pub use pool::{EncodePool, PooledStream};
pub use wire::{codes_message, AudioIn, Framer};
