//! Kyutai's streaming speech to text (`KYUTAI_STT.md`): kyutai/stt-1b-en_fr and
//! kyutai/stt-2.6b-en, Mimi codes in, text tokens, words with times and VAD out, for many
//! streams at once.
//!
//! Design: the host side (config, checkpoints, tokenizer, words) runs once per model or per
//! token, so everything is validated there and named in errors. One tensor list
//! (`weights::tensor_specs`, Kyutai's names) serves loading and the seeded random weights;
//! transformers' layout is a view onto it (`hf.rs`), so both layouts, sharded or not, load
//! through one routine. The device side states the model through chorus-lm's shared pieces and
//! adds only what is its own: the upload (`device.rs`: q/k rows from Kyutai's interleaved RoPE
//! pairs to the rotate-half pairs the shared op runs), the step (`frame.rs`: the text and 32
//! audio embeddings summed, the decoder stack with its sliding window over a per-stream ring,
//! the text head, the draw, the VAD heads, the token fed back on the device) and the stream
//! stage (`stage/`, over chorus-lm's `Seats` and `Pipeline`). There is no prompt, so no prefill:
//! every position is one step.

pub mod config;
pub mod device;
pub mod files;
pub mod frame;
pub mod hf;
pub mod io;
pub mod load;
pub mod mimi;
pub mod random;
pub mod stage;
pub mod tokenizer;
pub mod weights;
pub mod words;

pub use chorus_core::{Error, Result};
pub use config::{SttConfig, SttIds};
pub use load::{load_stt_model, random_model, Layout, SttModel};
pub use stage::{StreamEvent, StreamId, StreamRequest, SttOptions, SttStage};
pub use tokenizer::SttTokenizer;
pub use weights::SttWeights;
pub use words::{WordAssembler, WordEvent};
