//! MiniMax Music 3's semantic stage (`docs/MUSIC.md`, `MUSIC_SEMANTIC.md`).
//!
//! The stage contract: a prompt `[2, P]` (conditional row, CFG row) in; per frame 8 codes (c0 of
//! 16,384 semantic codes, 7 residual levels of 1,024) drawn once and shared by both rows, and the
//! frame hiddens `[8 * 4096]` (the LM's final-normed hidden, then the depth decoder's outputs at
//! positions 1..7) that the acoustic stage consumes; at most `min(seconds * 25, 9000)` frames, or
//! until the model draws END.
//!
//! Design: the model code (`model/`, `frame.rs`, `prefill.rs`) states each step as ops of
//! [`chorus_core::LmOps`] over device buffers, with no allocation, host sync or data-dependent
//! branch, so a backend can capture it as one graph per bucket of song counts. The host side
//! (`stage/`, over chorus-lm's KV block pool) only moves integers: slots, positions, block tables,
//! draw counters. The transformer machinery itself (linears, activations, the decoder layer stack,
//! the KV pool, the RoPE table) is chorus-lm's, shared with the other model families.
//! Weights are fused once at load (`weights.rs`): q/k/v, gate/up, and the LM head cut to its
//! 16,385 audio rows.

pub mod config;
pub mod device;
pub mod files;
pub mod frame;
pub mod io;
pub mod linear_source;
pub mod load;
pub mod model;
pub mod prefill;
pub mod prompt;
pub mod random;
pub mod song;
pub mod stage;
pub mod weights;

pub use chorus_lm::KvCache;
pub use config::{DepthConfig, Qwen3Config};
pub use load::{load_music_model, MusicModel};
pub use song::{EndReason, Sampling, SongEvent, SongId, SongRequest};
pub use stage::{SemanticStage, StageOptions};
