//! The decoder-only LM layer that every model family shares (MiniMax Music's Qwen3 and depth
//! decoder today; Llama-style TTS and STT models next).
//!
//! Design: a model crate owns what is its own (config, weight names and fusion, the frame
//! program) and states its transformer through these pieces, so each mechanism exists once:
//! - host weights of a linear, dense or int8 ConvRot (`host_linear`), uploaded to a device
//!   [`Linear`] that every projection runs through as one `LmOps::fused_linear` (`linear`);
//! - activation buffers allocated once per call size (`acts`), the MLP half (`mlp`);
//! - one pre-norm decoder layer's weights (`layer`) and the layer stack over a paged KV cache
//!   (`decoder`, `cache`), with the rotate-half RoPE table it reads (`rope`) and the load-time
//!   q/k row permutation that runs interleaved-RoPE models on it (`rope_rows`);
//! - the KV block pool (`kv`), integers only, and admission over it (`seats`: a state slot and a
//!   worst-case KV reservation per request), which the model's scheduler drives;
//! - per-step integer inputs with their pinned host side (`io`), and the step loop's buckets,
//!   double-buffered I/O and frame in flight (`pipeline`);
//! - chunked prefill of a request joining running ones, its prompt riding after the frame's
//!   rows (`chunk`).
//!
//! Everything on the device is ops of [`chorus_core::LmOps`] with no allocation, host sync or
//! data-dependent branch, so a backend can capture a step as one graph.

pub mod acts;
pub mod cache;
pub mod chunk;
pub mod decoder;
pub mod host_linear;
pub mod io;
pub mod kv;
pub mod layer;
pub mod linear;
pub mod mlp;
pub mod pipeline;
pub mod rope;
pub mod rope_rows;
pub mod sampling;
pub mod seats;

pub use acts::{ActDims, Acts, Scratch};
pub use cache::{layer_caches, layer_caches_of, CacheDims, KvCache, LayerCache};
pub use chunk::{ChunkBufs, ChunkInputs, ChunkPlan, ChunkTarget, PREFILL_CHUNK};
pub use decoder::{
    check_positional, decoder_stack, DecoderCall, DecoderStack, PagedShape, Segment,
};
pub use host_linear::{HostLinear, Q8Tensor};
pub use io::{store_last_hidden, IntInput, LastHidden};
pub use kv::{blocks_for, BlockPool, Reservation, DEFAULT_BLOCK_SIZE, NULL_BLOCK};
pub use layer::{sequence_layers, DecoderLayer, QkNorm};
pub use linear::{linear, Linear, LinearIo};
pub use mlp::{mlp_half, Mlp};
pub use pipeline::{Bucket, FrameLoop, Pending, Pipeline};
pub use rope::{inv_freq, rope_table, rope_table_scaled, Llama3Scaling, RopeScaling};
pub use rope_rows::{half_to_interleaved, interleaved_to_half};
pub use sampling::Sampling;
pub use seats::{Seat, Seats};
