//! Mimi: configuration, checkpoints in both layouts, load-time folding, and the slot decoder and
//! slot encoder that run streaming steps over any [`chorus_core::Backend`].
//!
//! Loading normalises both checkpoint layouts to [`weights::MimiWeights`] (HF names and shapes);
//! [`prepare`] then derives the backend layouts once, and [`decoder::SlotDecoder`] owns the
//! per-slot state and issues one program of ops per step: one frame per slot, or a chunk of
//! consecutive frames for whole files, run at once or queued while the next step is staged.

pub mod checkpoint;
pub mod config;
pub mod decoder;
pub mod encoder;
pub mod oracle;
pub mod oracle_encoder;
pub mod prepare;
pub mod program;
pub mod random;
pub mod single;
pub mod state;
pub mod transformer;
pub mod weights;

pub use config::MimiConfig;
pub use decoder::{DecoderOptions, SlotDecoder};
pub use encoder::{EncoderOptions, SlotEncoder};
pub use single::StreamDecoder;
pub use weights::MimiWeights;
