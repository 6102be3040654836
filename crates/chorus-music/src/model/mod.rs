//! The two networks as functions over [`chorus_core::LmOps`], on chorus-lm's shared layer.
pub mod depth;
pub mod qwen3;
