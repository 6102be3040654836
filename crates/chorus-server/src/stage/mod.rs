//! What the model endpoints (`/v1/music`, `/v1/tts`, `/v1/stt`) share: one owner thread per stage
//! that admits, sweeps, takes input and steps ([`owner`]), the job handle a connection holds
//! ([`job`]) and, for jobs fed by their client, its input channel ([`input`]), one set of error
//! codes ([`error`]), the step and latency histograms ([`histogram`]) and the timed WebSocket
//! writes ([`socket`]), and the pool of one worker per device that places each job ([`pool`]).
//! Each endpoint adds only its own messages, admission and events.

pub(crate) mod conn;
pub(crate) mod counts;
pub mod error;
pub mod fields;
pub(crate) mod histogram;
pub(crate) mod input;
pub mod job;
pub(crate) mod labels;
pub(crate) mod owner;
pub mod pool;
pub(crate) mod socket;

pub use error::{StageError, StageErrorCode, BUSY_RETRY_AFTER_SECS};
pub use job::{Job, JobUpdate};
pub use pool::{DeviceStage, FaultSwitch, MemberStatus, Seat};
