//! Checkpoint plumbing shared by every model family: a validated safetensors reader and writer,
//! named tensor sources, and Hugging Face Hub resolution.

pub mod check;
pub mod hub;
pub mod safetensors;
pub mod shards;
pub mod source;
pub mod writer;

pub use safetensors::{Dtype, SafetensorsFile};
pub use shards::ShardedSource;
pub use source::{MemorySource, TensorSource};
pub use writer::{write_safetensors, write_tensors, TensorData};
