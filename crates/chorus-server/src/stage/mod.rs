//! What the model endpoints (`/v1/music`, `/v1/tts`) share: one owner thread per stage that admits,
//! sweeps and steps ([`owner`]), the job handle a connection holds ([`job`]), one set of error
//! codes ([`error`]), the step and latency histograms ([`histogram`]) and the timed WebSocket
//! writes ([`socket`]). Each endpoint adds only its own messages, admission and events.

pub(crate) mod conn;
pub(crate) mod counts;
pub mod error;
pub mod fields;
pub(crate) mod histogram;
pub mod job;
pub(crate) mod owner;
pub(crate) mod socket;

pub use error::{StageError, StageErrorCode, BUSY_RETRY_AFTER_SECS};
pub use job::{Job, JobUpdate};
