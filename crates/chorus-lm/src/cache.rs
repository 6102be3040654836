//! A layer's paged K/V caches on the device: `[blocks, block_size, kv_heads * head_dim]` each,
//! addressed through the block tables of [`crate::kv`], in the backend's storage type or in 8-bit
//! floats with a scale per head vector (`chorus_core::fp8`).

use chorus_core::{BufRole, Error, LmOps, Result};

/// How the KV caches store their values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvCache {
    /// The backend's storage type (bf16 or f32).
    #[default]
    Native,
    /// E4M3 with one f32 scale per position's head vector: half the bytes of bf16.
    Fp8,
}

impl KvCache {
    /// `bf16`/`native` or `fp8`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "native" | "bf16" => Ok(Self::Native),
            "fp8" | "e4m3" => Ok(Self::Fp8),
            other => Err(Error::input(
                "KvCache::parse",
                format!("unknown KV cache type `{other}`: use `bf16` (the backend's own) or `fp8`"),
            )),
        }
    }
}

/// One layer's paged caches.
pub struct LayerCache<B: LmOps> {
    /// `[num_blocks, block_size, kv_heads * head_dim]`.
    pub k: B::Buf,
    pub v: B::Buf,
    /// With [`KvCache::Fp8`]: `[num_blocks, kv_heads, block_size]` scales of `k` and `v`
    /// ([`chorus_core::fp8::scale_index`]).
    pub scales: Option<(B::Buf, B::Buf)>,
}

/// Geometry of a model's caches.
#[derive(Clone, Copy, Debug)]
pub struct CacheDims {
    pub layers: usize,
    pub blocks: usize,
    pub block_size: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// Zeroed caches in the backend's storage type for `layers` layers of `blocks` blocks of
/// `block_size` positions, each position `width` (kv heads x head dim) wide.
pub fn layer_caches<B: LmOps>(
    be: &B,
    layers: usize,
    blocks: usize,
    block_size: usize,
    width: usize,
) -> Result<Vec<LayerCache<B>>> {
    let d = CacheDims {
        layers,
        blocks,
        block_size,
        kv_heads: 1,
        head_dim: width,
    };
    layer_caches_of(be, d, KvCache::Native)
}

/// Zeroed caches for `d.layers` layers of `d.blocks` blocks of `d.block_size` positions, each
/// position `kv_heads * head_dim` wide, stored as `kind` says.
pub fn layer_caches_of<B: LmOps>(
    be: &B,
    d: CacheDims,
    kind: KvCache,
) -> Result<Vec<LayerCache<B>>> {
    let entries = d.blocks * d.block_size;
    let len = entries * d.kv_heads * d.head_dim;
    let role = match kind {
        KvCache::Native => BufRole::Pool,
        KvCache::Fp8 => BufRole::Pool8,
    };
    (0..d.layers)
        .map(|_| {
            let scales = match kind {
                KvCache::Native => None,
                KvCache::Fp8 => Some((
                    be.zeros(entries * d.kv_heads, BufRole::Table)?,
                    be.zeros(entries * d.kv_heads, BufRole::Table)?,
                )),
            };
            Ok(LayerCache {
                k: be.zeros(len, role)?,
                v: be.zeros(len, role)?,
                scales,
            })
        })
        .collect()
}
