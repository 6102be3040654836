//! Sesame CSM-1B (`CSM.md`): text (plus audio context as Mimi codes) to Mimi codes, for many
//! utterances at once.
//!
//! Design: the host side (config, checkpoints, tokenizer, prompt) runs once per model or once
//! per request, before the frame program takes over; so everything is validated there and named
//! in errors. The device side states CSM through chorus-lm's shared pieces and adds only what is
//! its own: the weights' fusion (`device.rs`), the frame program (`frame.rs`: backbone hidden ->
//! codebook 0 -> the depth decoder's levels -> the next backbone input and step), the prefill
//! (`prefill.rs`) and the utterance scheduler (`stage/`, over chorus-lm's `Seats` and
//! `Pipeline`). One tensor list (`weights::tensor_specs`, HF names) serves loading
//! and the seeded random weights; Sesame's layout is a renaming view with the q/k row
//! permutation (`sesame.rs`), so both layouts, sharded or not, load through one routine. The
//! audio table is held once (transformers ties the depth decoder's copy to it).

pub mod config;
pub mod device;
pub mod files;
pub mod frame;
pub mod io;
pub mod load;
pub mod mimi;
pub mod prefill;
pub mod prompt;
pub mod random;
pub mod sesame;
pub mod stage;
pub mod tokenizer;
pub mod utterance;
pub mod weights;

pub use chorus_core::{Error, Result};
pub use config::{CsmConfig, LlamaConfig, SpecialIds};
pub use frame::{DrawSettings, MAX_TOP_K, UPSTREAM_DRAWS};
pub use load::{load_csm_model, random_model, CsmModel, Layout};
pub use prompt::{build_prompt, build_prompt_ids, IdSegment, PromptFrame, PromptLimits, Segment};
pub use random::RandomOptions;
pub use stage::{FrameTrace, TtsOptions, TtsStage};
pub use tokenizer::CsmTokenizer;
pub use utterance::{EndReason, UtteranceEvent, UtteranceId, UtteranceRequest};
pub use weights::{CsmWeights, DecoderWeights, LayerWeights};
