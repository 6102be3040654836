//! The two networks as functions over [`chorus_core::LmOps`].
pub mod block;
pub mod depth;
pub mod linear;
pub mod qwen3;
