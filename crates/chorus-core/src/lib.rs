//! Chorus core: the vocabulary every other crate speaks.
//!
//! The model code (`chorus-mimi`) states *what* a decode step does as a sequence of calls into the
//! [`Backend`] op set; each backend (`chorus-cpu`, `chorus-cuda`) decides *how*. A step is a
//! *program*: a closure over backend ops that the CPU backend runs directly and the CUDA backend
//! captures once per batch bucket into a graph and replays. Everything a program touches is
//! allocated before the first step, so the step path neither allocates nor validates.

pub mod backend;
pub mod buckets;
pub mod checkpoint;
pub mod codes;
pub mod consts;
pub mod convrot;
pub mod decoder;
pub mod encoder;
pub mod error;
pub mod fp8;
pub mod host;
pub mod json;
pub mod lm_ops;
pub mod npy;
pub mod res_block;
pub mod rng;

pub use backend::*;
pub use buckets::Buckets;
pub use consts::*;
pub use decoder::{validate_chunk, Frame, FrameDecoder, FrameInput, StateBytes, StepDone};
pub use encoder::{validate_audio_chunk, AudioFrame, ChunkDims, FrameEncoder};
pub use error::{Error, Result};
pub use host::HostTensor;
pub use lm_ops::LmOps;
pub use res_block::{ResBlockArgs, ResBlockGeom};
