//! A layer's paged K/V caches on the device: `[blocks, block_size, kv_heads * head_dim]` each,
//! addressed through the block tables of [`crate::kv`].

use chorus_core::{BufRole, LmOps, Result};

/// One layer's paged caches.
pub struct LayerCache<B: LmOps> {
    /// `[num_blocks, block_size, kv_heads * head_dim]`.
    pub k: B::Buf,
    pub v: B::Buf,
}

/// Zeroed caches for `layers` layers of `blocks` blocks of `block_size` positions, each position
/// `width` (kv heads x head dim) wide.
pub fn layer_caches<B: LmOps>(
    be: &B,
    layers: usize,
    blocks: usize,
    block_size: usize,
    width: usize,
) -> Result<Vec<LayerCache<B>>> {
    let len = blocks * block_size * width;
    (0..layers)
        .map(|_| {
            Ok(LayerCache {
                k: be.zeros(len, BufRole::Pool)?,
                v: be.zeros(len, BufRole::Pool)?,
            })
        })
        .collect()
}
