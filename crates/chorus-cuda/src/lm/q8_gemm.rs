//! The int8 GEMM (kernels/lm_q8_gemm.cu): `fused_linear`'s int8 products of
//! [`SKINNY_MAX_ROWS`] + 1 to [`Q8_GEMM_MAX_ROWS`] rows outside the batch-invariant mode, on the
//! tensor cores with the int8 weights read once per 128 activation rows and converted in
//! registers, 256 weight rows a block (one a multiprocessor) so that each activation byte read
//! from L2 serves 256 weight rows. The blocks share the tiles' `k` iterations evenly (stream-K);
//! the parts of a tile shared by several blocks are summed in block order by a second kernel, a
//! block per accumulator group, so that no block of the first waits on another. On sm_90 the
//! products may be issued as warpgroup wgmmas (`kernels/lm_q8_wgmma.cu`) in the same layout.

use std::sync::atomic::Ordering;

use chorus_core::lm_ops::Epilogue;
use chorus_core::Result;

use super::skinny::SKINNY_MAX_ROWS;
use crate::backend::CudaBackend;
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};

/// Most activation rows the GEMM takes (two tiles of [`TILE_ROWS`]); past them (prefill) the
/// dequantizing cuBLAS product stays faster than re-reading the weights per tile.
pub const Q8_GEMM_MAX_ROWS: usize = 256;
/// 16-row weight tiles per warp (`Q8G_MI`); weight rows per block (`Q8G_BM`, four warps along
/// the weights), activation rows per block (`Q8G_BN`), `k` per stage (`Q8G_BK`), pipeline stages
/// (`Q8G_STAGES`), threads (`Q8G_WARPS` warps).
const WARP_TILES: usize = 4;
const TILE_W: usize = WARP_TILES * 64;
const TILE_ROWS: usize = 128;
const TILE_K: usize = 64;
const STAGES: usize = 4;
const THREADS: usize = 256;
/// Accumulator groups of 4 per thread (`Q8G_GROUPS`: 16-row x 8-row mma tiles) and accumulators.
const GROUPS: usize = WARP_TILES * 8;
const ACC: usize = GROUPS * 4;
/// Slack for the kernels' alignment of the stages to 1,024 bytes (`Q8G_ALIGN`: the period of
/// the wgmma variant's 128-byte swizzle).
const SMEM_ALIGN: usize = 1024;
/// Dynamic shared memory of a block: the stages' int8 and f16 tiles.
pub(crate) const SMEM: usize = STAGES * (TILE_W * TILE_K + TILE_ROWS * TILE_K * 2) + SMEM_ALIGN;
/// Most tiles (weight x activation) of a product.
const MAX_TILES: usize = 4096;
/// Most splits of `k`, and the fewest k stages each split keeps (the pipeline's depth), for
/// the split schedule ([`Q8Gemm::stream_k`] off).
const MAX_SPLITS: usize = 8;
const MIN_STEPS: usize = 2 * STAGES;
/// Blocks resident per multiprocessor (`Q8G_MIN_BLOCKS`: the accumulators' registers).
const BLOCKS_PER_SM: usize = if WARP_TILES == 2 { 2 } else { 1 };
/// Fewest k stages a stream-K block takes.
const MIN_STREAM_STEPS: usize = STAGES;
/// Workspace slots per block: the parts of the tile its range starts in and of the one it ends in.
const SLOTS: usize = 2;
/// Blocks of the sum kernel per shared tile: one per accumulator group.
const SUM_BLOCKS_PER_TILE: usize = GROUPS;

/// The GEMM's schedule.
pub(crate) struct Q8Gemm {
    /// Stream-K (even shares of every tile's k iterations); off, whole tiles with k split in
    /// equal parts only where tiles are fewer than multiprocessors. For A/B measurements.
    pub(crate) stream_k: bool,
    /// The products issued as Hopper's warpgroup wgmmas (`kernels/lm_q8_wgmma.cu`) instead of
    /// mma.sync; the same tiles, schedule and sums.
    pub(crate) wgmma: bool,
}

/// Output columns (gate rows for SwiGLU) and tiles (weight x activation) of a product.
fn geometry(n: usize, m: usize, epilogue: Epilogue) -> (usize, usize) {
    let swiglu = epilogue == Epilogue::Swiglu;
    let (cols, per_block) = if swiglu {
        (m / 2, TILE_W / 2)
    } else {
        (m, TILE_W)
    };
    (cols, cols.div_ceil(per_block) * n.div_ceil(TILE_ROWS))
}

/// Blocks of a product of `tiles` tiles and `k` inputs under the backend's schedule.
fn blocks(gemm: &Q8Gemm, tiles: usize, k: usize, sm_count: usize) -> usize {
    if gemm.stream_k {
        stream_blocks(tiles, k, sm_count)
    } else {
        split_blocks(tiles, k, sm_count)
    }
}

/// The kernel's block ranges are products of an iteration and a block count in 32 bits.
fn index_fits(tiles: usize, k: usize, blocks: usize) -> bool {
    (tiles * (k / TILE_K)).saturating_mul(blocks) <= u32::MAX as usize
}

/// True when the GEMM takes an int8 product of `n` rows, `k` inputs and `m` weight rows.
pub(crate) fn fits(be: &CudaBackend, n: usize, k: usize, m: usize, epilogue: Epilogue) -> bool {
    let Some(gemm) = &be.q8_gemm else {
        return false;
    };
    let (_, tiles) = geometry(n, m, epilogue);
    !be.batch_invariant
        && (SKINNY_MAX_ROWS + 1..=Q8_GEMM_MAX_ROWS).contains(&n)
        && k.is_multiple_of(TILE_K)
        && (epilogue != Epilogue::Swiglu || m.is_multiple_of(2))
        && m * k <= i32::MAX as usize
        && tiles <= MAX_TILES
        && index_fits(tiles, k, blocks(gemm, tiles, k, be.sm_count))
}

/// Blocks of the split schedule for `tiles` tiles: `k` split in equal parts, enough for one
/// block per multiprocessor, each part keeping at least [`MIN_STEPS`] stages.
fn split_blocks(tiles: usize, k: usize, sm_count: usize) -> usize {
    if tiles >= sm_count {
        return tiles;
    }
    let by_depth = (k / TILE_K / MIN_STEPS).max(1);
    tiles * sm_count.div_ceil(tiles).min(MAX_SPLITS).min(by_depth)
}

/// Blocks of the stream-K schedule: every resident slot, each block taking at least
/// [`MIN_STREAM_STEPS`] of the `tiles x k / TILE_K` iterations.
fn stream_blocks(tiles: usize, k: usize, sm_count: usize) -> usize {
    let total = tiles * (k / TILE_K);
    (BLOCKS_PER_SM * sm_count)
        .min(total / MIN_STREAM_STEPS)
        .max(1)
}

/// Device pointers and the shape of one product.
pub(crate) struct Q8GemmArgs {
    /// The f16 rotated input `[n, k]`, the biased int8 weight and its scales, the output.
    pub x: u64,
    pub w: u64,
    pub scale: u64,
    pub out: u64,
    pub n: usize,
    pub k: usize,
    /// Weight rows (gate and up rows together for SwiGLU).
    pub m: usize,
    pub epilogue: Epilogue,
}

pub(crate) fn launch(be: &CudaBackend, a: Q8GemmArgs) -> Result<()> {
    const OP: &str = "fused_linear";
    let gemm = be
        .q8_gemm
        .as_ref()
        .ok_or_else(|| cuda_error(OP, "the int8 GEMM is off on this backend"))?;
    let (cols, tiles) = geometry(a.n, a.m, a.epilogue);
    let blocks = blocks(gemm, tiles, a.k, be.sm_count);
    if tiles > MAX_TILES || !index_fits(tiles, a.k, blocks) {
        return Err(cuda_error(
            OP,
            format!(
                "{tiles} tiles for n {} k {} m {cols}: past {MAX_TILES} tiles or 32-bit ranges",
                a.n, a.k
            ),
        ));
    }
    let work = if blocks != tiles {
        be.scratch(SLOTS * blocks * ACC * THREADS * std::mem::size_of::<f32>())?
    } else {
        0
    };
    let cfg = Launch {
        grid: blocks as u32,
        block: THREADS as u32,
        smem: SMEM as u32,
    };
    let epi = super::skinny::epi_code(a.epilogue);
    let (n32, k32, m32) = (a.n as i32, a.k as i32, cols as i32);
    be.q8_gemm_launches.fetch_add(1, Ordering::Relaxed);
    let kernel = if gemm.wgmma {
        Kernel::LmQ8Wgmma
    } else {
        Kernel::LmQ8Gemm
    };
    be.launch(
        kernel,
        cfg,
        &mut kargs![&a.x, &a.w, &a.scale, &a.out, &work, &n32, &k32, &m32, &epi],
    )?;
    if blocks == tiles {
        return Ok(());
    }
    // The first block sharing a tile sums it, a group of accumulators per block; the rest return.
    let sum = Launch {
        grid: (blocks * SUM_BLOCKS_PER_TILE) as u32,
        block: THREADS as u32,
        smem: 0,
    };
    let blocks32 = blocks as i32;
    be.launch(
        Kernel::LmQ8GemmSum,
        sum,
        &mut kargs![&work, &a.scale, &a.out, &blocks32, &n32, &k32, &m32, &epi],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ranges_stay_within_32_bits() {
        // A decode-sized product (gate/up at 128 rows) fits; one with 2^32 iterations x blocks
        // does not, so `fits` sends it elsewhere.
        assert!(index_fits(192, 4096, 264));
        assert!(!index_fits(4096, 1 << 20, 264));
    }

    #[test]
    fn geometry_counts_swiglu_pairs_per_block() {
        assert_eq!(geometry(128, 4096, Epilogue::Store), (4096, 16));
        assert_eq!(geometry(256, 2 * 12288, Epilogue::Swiglu), (12288, 192));
        assert_eq!(geometry(65, 1000, Epilogue::Accumulate), (1000, 4));
    }
}
