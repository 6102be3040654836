//! Sesame CSM-1B, the host side: text (plus audio context as Mimi codes) to the backbone's
//! prompt frames, and the checkpoint to HF-layout host weights (`CSM.md`).
//!
//! Design: everything here runs once per model or once per request, before the frame program
//! (the device side, over chorus-lm's decoder layers) takes over; so everything is validated
//! here and named in errors. One tensor list (`weights::tensor_specs`, HF names) serves loading
//! and the seeded random weights; Sesame's layout is a renaming view with the q/k row
//! permutation (`sesame.rs`), so both layouts, sharded or not, load through one routine. The
//! audio table is held once (transformers ties the depth decoder's copy to it).

pub mod config;
pub mod files;
mod json;
pub mod load;
pub mod prompt;
pub mod random;
pub mod sesame;
pub mod shards;
pub mod tokenizer;
pub mod weights;

pub use chorus_core::{Error, Result};
pub use config::{CsmConfig, LlamaConfig, SpecialIds};
pub use load::{load_csm_model, random_model, CsmModel, Layout};
pub use prompt::{build_prompt, build_prompt_ids, IdSegment, PromptFrame, PromptLimits, Segment};
pub use random::RandomOptions;
pub use tokenizer::CsmTokenizer;
pub use weights::{CsmWeights, DecoderWeights, LayerWeights};
