//! Paged GQA attention (kernels/lm_attention.cu).
//!
//! At most three launches, each shaped by the call's geometry alone (never by its data), so one
//! captured graph serves every step of a bucket whatever the contexts:
//! 1. `lm_paged_kv_write`: every token's k and v to its cache entry, before any read;
//! 2. decode (`time == 1`, head_dim 64/128/256, GQA group 1/2/4, which covers Qwen3's 128 x 4 and
//!    the depth decoder's 256 x 1): `lm_paged_attention`, one block per (row, kv head, split) over
//!    a range of the row's positions ([`decode_plan`]); blocks past a row's context exit at once;
//!    then `lm_paged_combine` merges the splits (skipped when there is only one: the decode kernel
//!    then writes the output itself). Contexts of at most 64 positions without GQA (the depth
//!    decoder) take one (row, kv head) pair per lane group instead;
//! 3. otherwise (prefill, other shapes): `lm_paged_prefill`, the tiled general kernel, one block
//!    per (row, kv head, group of query vectors).

use std::sync::atomic::Ordering;

use chorus_core::lm_ops::{
    rope_paged_attention_apart, HeadGeom, PagedAttentionArgs, RopeAttentionArgs,
};
use chorus_core::{Precision, Result};

use super::rows::RopeCall;
use crate::backend::{CudaBackend, CudaBuf, SCRATCH_ALIGN};
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};

const OP: &str = "paged_attention";
/// Threads of the decode kernel (`PA_THREADS`), the combine (`PA_COMBINE_THREADS`) and the general
/// kernel (`PF_WARPS * 32`).
const DECODE_THREADS: u32 = 128;
const COMBINE_THREADS: u32 = 128;
const GENERAL_THREADS: u32 = 128;
/// The tensor-core decode kernel's head size (`PAM_D`) and warps per block (`PAM_WARPS`).
const MMA_HEAD_DIM: usize = 128;
const MMA_WARPS: usize = 4;
/// Shared memory of the tensor-core decode over 8-bit caches (`lm_paged_attention_mma8`): each
/// warp's `PAM8_STAGES` stages of 32 keys (their keys' and values' bytes, then their scales);
/// the merge reuses the stages (the queries live in registers).
const MMA8_STAGES: usize = 2;
const MMA8_STAGE_BYTES: usize = 2 * 32 * MMA_HEAD_DIM + 2 * 4 * 32;
pub(crate) const MMA8_SMEM: usize = MMA_WARPS * MMA8_STAGES * MMA8_STAGE_BYTES;
/// Keys a decode lane group loads at once (`PA_UNROLL`; `PA_UNROLL8` over 8-bit caches).
const DECODE_UNROLL: usize = 4;
const DECODE_UNROLL8: usize = 8;
/// Keys per shared-memory tile of the general kernel (`PF_KT`) and its warps (`PF_WARPS`).
const GENERAL_KEY_TILE: usize = 32;
const GENERAL_WARPS: usize = 4;
/// Decode blocks resident per multiprocessor: 128 threads at 128 registers (`__launch_bounds__`).
/// The split plan fills one such wave for full contexts and no more: a second, partial wave of
/// blocks costs more than the longer splits of one (H200, 8 songs at 8,000 positions: 159 us in
/// one wave, 209 us in 1.2).
const DECODE_BLOCKS_PER_SM: usize = 4;
/// Positions per split (`PA_SPLIT_QUANTUM` in the kernel): a multiple of this, within [`SPLIT_QUANTUM`, `SPLIT_MAX`] (long splits
/// only when there are enough (row, kv head) pairs to fill the GPU anyway).
const SPLIT_QUANTUM: usize = 64;
const SPLIT_MAX: usize = 2048;
/// Positions per split in the batch-invariant mode ([`crate::CudaOptions::batch_invariant`]):
/// fixed, so that a row's splits (and the order the combine adds them in) do not depend on the
/// other rows of the call; short enough that one song's context still spreads over the SMs (512
/// left one song at 1,000 positions 0.6 ms slower per frame on the H200).
const SPLIT_INVARIANT: usize = 128;
/// Contexts of at most this many positions (`max_blocks * block_size`: the depth decoder's 16)
/// without GQA take the decode kernel's `group_pairs` mode: one (row, kv head) pair per lane
/// group, so that a block serves several pairs instead of idling most of its lanes on a handful of
/// keys.
const GROUP_PAIRS_MAX_CTX: usize = 64;
/// head_dim limits of every path: whole 16-byte vectors in both precisions, and the general
/// kernel's shared-memory tiles.
const HEAD_DIM_MULTIPLE: usize = 8;
const MAX_HEAD_DIM: usize = 256;
/// Dynamic shared memory a launch may take without opting in.
const MAX_STATIC_SMEM: usize = 48 << 10;

/// Mirrors `PagedDims` in `lm_attention.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct PagedDims {
    rows: i32,
    time: i32,
    q_heads: i32,
    kv_heads: i32,
    head_dim: i32,
    block_size: i32,
    max_blocks: i32,
    num_blocks: i32,
    splits: i32,
    split_len: i32,
    scale: f32,
    grouped: i32,
    group_pairs: i32,
    adaptive: i32,
    spread: i32,
    /// Keys per query under a sliding window (0: none) and the entries of a row's table.
    window: i32,
    ring: i32,
    /// The fused combine's ticket counters ([`FusedCombine`]), 0 when `lm_paged_combine` merges.
    counters: u64,
}

/// Most (row, kv head) pairs the fused combine keeps counters for: past them (or past
/// [`FUSED_COMBINE_MAX_SPLITS`] splits) the combine kernel merges.
pub(crate) const FUSED_COMBINE_PAIRS: usize = 1 << 16;
/// Most splits the fused combine takes (mirrors `PA_FUSED_MAX_SPLITS`).
const FUSED_COMBINE_MAX_SPLITS: usize = 1024;

/// The fused combine's ticket counters ([`crate::CudaOptions::fused_combine`]): one i32 per
/// (row, kv head) pair, zeroed once here and returned to zero by the block that merges.
pub(crate) struct FusedCombine {
    counters: crate::memory::DevMem,
}

impl FusedCombine {
    /// Allocates the counters; [`Self::zero`] clears them on the backend's stream.
    pub(crate) fn new(ctx: &std::sync::Arc<cudarc::driver::CudaContext>) -> Result<Self> {
        let counters = crate::memory::DevMem::new(ctx, FUSED_COMBINE_PAIRS * 4, None)?;
        Ok(Self { counters })
    }

    /// Zeroes every counter (once, before any attention call).
    pub(crate) fn zero(&self, be: &CudaBackend) -> Result<()> {
        be.memset32(self.counters.ptr(), 0, FUSED_COMBINE_PAIRS)
    }

    /// The counters' address for a call of `pairs` (row, kv head) pairs over `splits`, or 0 when
    /// the combine kernel must merge.
    fn for_call(&self, pairs: usize, splits: usize) -> u64 {
        if splits > 1 && pairs <= FUSED_COMBINE_PAIRS && splits <= FUSED_COMBINE_MAX_SPLITS {
            self.counters.ptr()
        } else {
            0
        }
    }
}

fn i32_of(name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| cuda_error(OP, format!("{name} = {v} exceeds i32")))
}

fn need(name: &str, have: usize, want: usize) -> Result<()> {
    crate::ops::need(OP, name, have, want)
}

/// The kernels read and write buffers in the backend's storage type: an f32 table in bf16 mode
/// would be misread.
fn check_storage(be: &CudaBackend, name: &str, b: &CudaBuf) -> Result<()> {
    if b.f32 && be.precision == Precision::Bf16 {
        return Err(cuda_error(
            OP,
            format!("`{name}` must be stored in bf16 like every activation, not as an f32 table"),
        ));
    }
    Ok(())
}

/// True when the decode kernel has an instance for this shape (see `lm_paged_attention`).
/// The plain decode kernel over `[qkv, k_cache, v_cache, tables, start, out, part, k_scale,
/// v_scale]` (the scales only with 8-bit caches).
fn launch_decode(
    be: &CudaBackend,
    kv8: bool,
    cfg: Launch,
    p: [u64; 9],
    d: &PagedDims,
) -> Result<()> {
    let [qkv, kc, vc, tables, start, out, part, ks, vs] = p;
    if kv8 {
        be.launch(
            Kernel::LmPagedAttention8,
            cfg,
            &mut kargs![&qkv, &kc, &vc, &tables, &start, &out, &part, &ks, &vs, d],
        )
    } else {
        be.launch(
            Kernel::LmPagedAttention,
            cfg,
            &mut kargs![&qkv, &kc, &vc, &tables, &start, &out, &part, d],
        )
    }
}

fn decode_fits(g: &HeadGeom) -> bool {
    g.time == 1
        && matches!(g.head_dim, 64 | 128 | 256)
        && matches!(g.q_heads / g.kv_heads, 1 | 2 | 4)
}

/// How the decode kernel covers a call, from the geometry alone (never from the contexts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DecodePlan {
    /// Blocks per (row, kv head) pair, each over `split_len` positions; outside the
    /// batch-invariant mode the kernel spreads each row's real context over its splits instead
    /// (`pa_split_len`), `split_len` being the longest.
    pub splits: usize,
    pub split_len: usize,
    /// One pair per lane group (splits is then 1).
    pub group_pairs: bool,
}

/// The decode plan for `sm_count` multiprocessors: short contexts without GQA take `group_pairs`;
/// otherwise
/// `rows * kv_heads * splits` blocks fill at most one wave of [`DECODE_BLOCKS_PER_SM`] per
/// multiprocessor for contexts of `max_blocks * block_size` positions (blocks past a row's real
/// context exit at once), each split a multiple of [`SPLIT_QUANTUM`] positions and at most
/// [`SPLIT_MAX`]; with `invariant`, every split is [`SPLIT_INVARIANT`] positions whatever the rows.
#[cfg(test)]
pub(crate) fn decode_plan(
    sm_count: usize,
    g: &HeadGeom,
    block_size: usize,
    max_blocks: usize,
    invariant: bool,
) -> DecodePlan {
    decode_plan_keys(sm_count, g, block_size * max_blocks, invariant)
}

/// [`decode_plan`] for queries that read at most `max_ctx` keys (the table's positions, or a
/// sliding window's keys).
pub(crate) fn decode_plan_keys(
    sm_count: usize,
    g: &HeadGeom,
    max_ctx: usize,
    invariant: bool,
) -> DecodePlan {
    let max_ctx = max_ctx.max(1);
    if max_ctx <= GROUP_PAIRS_MAX_CTX && g.q_heads == g.kv_heads {
        return DecodePlan {
            splits: 1,
            split_len: max_ctx,
            group_pairs: true,
        };
    }
    let pairs = (g.rows * g.kv_heads).max(1);
    let wanted = (DECODE_BLOCKS_PER_SM * sm_count / pairs).max(1);
    let split_len = if invariant {
        SPLIT_INVARIANT
    } else {
        max_ctx
            .div_ceil(wanted)
            .next_multiple_of(SPLIT_QUANTUM)
            .clamp(SPLIT_QUANTUM, SPLIT_MAX)
    };
    DecodePlan {
        splits: max_ctx.div_ceil(split_len),
        split_len,
        group_pairs: false,
    }
}

/// Splits a row's keys spread over outside the batch-invariant mode: as many as one wave of decode
/// blocks holds for the call's (row, kv head) pairs, at most `splits` (at least one).
fn spread_of(sm_count: usize, g: &HeadGeom, splits: usize) -> usize {
    let pairs = (g.rows * g.kv_heads).max(1);
    (DECODE_BLOCKS_PER_SM * sm_count / pairs).clamp(1, splits.max(1))
}

/// Queries per warp of the general kernel (as `lm_paged_prefill` picks its instance).
fn general_queries_per_warp(head_dim: usize) -> usize {
    if head_dim <= 128 {
        4
    } else {
        2
    }
}

pub(crate) fn paged_attention(
    be: &CudaBackend,
    a: PagedAttentionArgs<'_, CudaBackend>,
) -> Result<()> {
    paged_attention_with(be, a, None)
}

/// [`LmOps::rope_paged_attention`](chorus_core::LmOps::rope_paged_attention): with
/// [`crate::CudaOptions::fused_rope_kv`] and the rotation's vector layout, one kernel rotates q
/// and k and writes the cache (`lm_qk_norm_rope_kv`); else the two ops apart.
pub(crate) fn rope_paged_attention(
    be: &CudaBackend,
    a: RopeAttentionArgs<'_, CudaBackend>,
) -> Result<()> {
    if !be.fused_rope_kv {
        return rope_paged_attention_apart(be, a);
    }
    let RopeAttentionArgs { rope, attn } = a;
    let call = super::rows::rope_call(
        be,
        attn.qkv,
        &rope,
        attn.start,
        (attn.geom, attn.first_token),
    )?;
    match call {
        Some(c) if c.group > 0 => paged_attention_with(be, attn, Some(c)),
        Some(c) => {
            c.launch(be)?;
            paged_attention(be, attn)
        }
        None => paged_attention(be, attn),
    }
}

/// The attention; with `rope`, the call's q/k rotation runs in its KV write's kernel.
fn paged_attention_with(
    be: &CudaBackend,
    a: PagedAttentionArgs<'_, CudaBackend>,
    rope: Option<RopeCall>,
) -> Result<()> {
    let _timer = be.op_timer(OP);
    let g = a.geom;
    let hd = g.head_dim;
    if hd == 0
        || !hd.is_multiple_of(HEAD_DIM_MULTIPLE)
        || hd > MAX_HEAD_DIM
        || g.kv_heads == 0
        || !g.q_heads.is_multiple_of(g.kv_heads)
        || a.block_size == 0
        || a.max_blocks == 0
    {
        return Err(cuda_error(
            OP,
            format!(
                "unsupported geometry {g:?}, block_size {}, max_blocks {} (need head_dim a multiple \
                 of {HEAD_DIM_MULTIPLE} up to {MAX_HEAD_DIM}, q_heads a multiple of kv_heads >= 1, \
                 block_size and max_blocks >= 1)",
                a.block_size, a.max_blocks
            ),
        ));
    }
    let tokens = g.tokens();
    let kv_dim = g.kv_heads * hd;
    let block_len = a.block_size * kv_dim;
    let num_blocks = a.k_cache.len / block_len;
    let first = a.first_token;
    need("qkv", a.qkv.len, (first + tokens) * g.qkv_width())?;
    need("k_cache", a.k_cache.len, block_len)?;
    need("v_cache", a.v_cache.len, num_blocks * block_len)?;
    need("block_tables", a.block_tables.len, g.rows * a.max_blocks)?;
    need("start", a.start.len, g.rows)?;
    need("out", a.out.len, (first + tokens) * g.q_heads * hd)?;
    for (name, b) in [
        ("qkv", &*a.qkv),
        ("k_cache", &*a.k_cache),
        ("v_cache", &*a.v_cache),
        ("out", &*a.out),
    ] {
        check_storage(be, name, b)?;
    }
    let (kv8, scales) = kv8_scales(be, &a, num_blocks * a.block_size * g.kv_heads)?;
    let ring = a.block_size * a.max_blocks;
    if let Some(w) = a.window {
        if w == 0 || ring < w + g.time.max(1) - 1 {
            return Err(cuda_error(
                OP,
                format!(
                    "window {w} over a ring of {ring} entries: need a window of at least 1 and a \
                     ring of at least window + time - 1 = {}",
                    w + g.time.max(1) - 1
                ),
            ));
        }
    }
    if tokens == 0 {
        return Ok(());
    }
    // The most keys one query reads.
    let keys = a.window.map_or(ring, |w| w.min(ring));
    // The tensor-core decode also takes groups of 8, which the plain decode kernel has no
    // instance for.
    let group = g.q_heads / g.kv_heads;
    let mma = be.lm_attention_mma
        && (!kv8 || be.lm_attention_mma8)
        && g.time == 1
        && hd == MMA_HEAD_DIM
        && g.q_heads.is_multiple_of(g.kv_heads)
        && matches!(group, 1 | 2 | 4 | 8);
    let decode = decode_fits(&g) || mma;
    let plan = if decode {
        decode_plan_keys(be.sm_count, &g, keys, be.batch_invariant)
    } else {
        DecodePlan {
            splits: 1,
            split_len: 0,
            group_pairs: false,
        }
    };
    let (splits, split_len) = (plan.splits, plan.split_len);
    if splits * 4 > MAX_STATIC_SMEM {
        return Err(cuda_error(
            OP,
            format!("{splits} splits exceed the combine's shared memory: use fewer max_blocks"),
        ));
    }
    let d = PagedDims {
        rows: i32_of("rows", g.rows)?,
        time: i32_of("time", g.time)?,
        q_heads: i32_of("q_heads", g.q_heads)?,
        kv_heads: i32_of("kv_heads", g.kv_heads)?,
        head_dim: i32_of("head_dim", hd)?,
        block_size: i32_of("block_size", a.block_size)?,
        max_blocks: i32_of("max_blocks", a.max_blocks)?,
        num_blocks: i32_of("num_blocks", num_blocks)?,
        splits: i32_of("splits", splits)?,
        split_len: i32_of("split_len", split_len)?,
        scale: std::f32::consts::LOG2_E / (hd as f32).sqrt(),
        // A window starts a query's keys anywhere and wraps them on the ring: no shared block.
        grouped: i32::from(
            a.block_size
                .is_multiple_of(if kv8 { DECODE_UNROLL8 } else { DECODE_UNROLL })
                && a.window.is_none(),
        ),
        group_pairs: i32::from(plan.group_pairs),
        adaptive: i32::from(!be.batch_invariant && !plan.group_pairs),
        spread: i32_of("spread", spread_of(be.sm_count, &g, splits))?,
        window: i32_of("window", a.window.unwrap_or(0))?,
        ring: i32_of("ring", ring)?,
        counters: match &be.fused_combine {
            Some(fc) if decode => fc.for_call(g.rows * g.kv_heads, splits),
            _ => 0,
        },
    };
    i32_of("qkv elements", tokens * g.qkv_width())?;
    // The call's tokens start `first` tokens into `qkv` and `out`.
    let esize = be.esize();
    let qkv = a.qkv.mem.ptr() + (first * g.qkv_width() * esize) as u64;
    let out = a.out.mem.ptr() + (first * g.q_heads * hd * esize) as u64;
    let (kc, vc) = (a.k_cache.mem.ptr(), a.v_cache.mem.ptr());
    let (tables, start) = (a.block_tables.mem.ptr(), a.start.mem.ptr());
    let vec = 16 / be.esize();
    let (ks, vs) = scales;
    if let Some(rc) = &rope {
        // The rotation with the KV write (the call's q and k rotated in qkv, k and v cached).
        let (rq, qn, kn, rt, st) = (rc.qkv, rc.q_norm, rc.k_norm, rc.rope, rc.start);
        let (mp, eps, normed, grp) = (rc.max_pos, rc.eps, rc.normed, rc.group);
        be.fused_rope_kv_launches.fetch_add(1, Ordering::Relaxed);
        if kv8 {
            be.launch(
                Kernel::LmQkNormRopeKv8,
                rc.cfg,
                &mut kargs![
                    &rq, &qn, &kn, &rt, &st, &kc, &vc, &tables, &ks, &vs, &mp, &eps, &normed, &grp,
                    &d
                ],
            )?;
        } else {
            be.launch(
                Kernel::LmQkNormRopeKv,
                rc.cfg,
                &mut kargs![
                    &rq, &qn, &kn, &rt, &st, &kc, &vc, &tables, &mp, &eps, &normed, &grp, &d
                ],
            )?;
        }
    } else if kv8 {
        be.launch(
            Kernel::LmPagedKvWrite8,
            be.grid_for(tokens * kv_dim / vec)?,
            &mut kargs![&qkv, &kc, &vc, &tables, &start, &ks, &vs, &d],
        )?;
    } else {
        be.launch(
            Kernel::LmPagedKvWrite,
            be.grid_for(tokens * kv_dim / vec)?,
            &mut kargs![&qkv, &kc, &vc, &tables, &start, &d],
        )?;
    }

    // 8-bit caches have no group_pairs instance: those shapes take the general kernel.
    if decode && !(kv8 && plan.group_pairs) {
        let lanes = (hd / vec).min(32);
        let key_groups = DECODE_THREADS as usize / lanes;
        let smem = (key_groups * group * (hd + 2) * 4) as u32;
        let blocks = if plan.group_pairs {
            (g.rows * g.kv_heads).div_ceil(key_groups)
        } else {
            g.rows * g.kv_heads * splits
        };
        let blocks = i32_of("decode blocks", blocks)? as u32;
        // Partial outputs, then (max, sum) pairs, of every (row, query head, split).
        let partials = g.rows * g.q_heads * splits;
        let part = if splits > 1 {
            be.scratch((partials * (hd + 2) * 4).next_multiple_of(SCRATCH_ALIGN))?
        } else {
            0u64
        };
        // The tensor-core kernel (`lm_attention_mma.cu`): the same blocks and partials, its own
        // key groups (one per warp).
        if mma && !plan.group_pairs {
            let cfg = Launch {
                grid: blocks,
                block: 32 * MMA_WARPS as u32,
                smem: if kv8 {
                    MMA8_SMEM.max(MMA_WARPS * group * (hd + 2) * 4)
                } else {
                    MMA_WARPS * group * (hd + 2) * 4
                } as u32,
            };
            be.lm_attention_mma_launches.fetch_add(1, Ordering::Relaxed);
            if kv8 {
                be.launch(
                    Kernel::LmPagedAttentionMma8,
                    cfg,
                    &mut kargs![&qkv, &kc, &vc, &tables, &start, &out, &part, &ks, &vs, &d],
                )?;
            } else {
                be.launch(
                    Kernel::LmPagedAttentionMma,
                    cfg,
                    &mut kargs![&qkv, &kc, &vc, &tables, &start, &out, &part, &d],
                )?;
            }
        } else {
            let cfg = Launch {
                grid: blocks,
                block: DECODE_THREADS,
                smem,
            };
            launch_decode(
                be,
                kv8,
                cfg,
                [qkv, kc, vc, tables, start, out, part, ks, vs],
                &d,
            )?;
        }
        if d.counters != 0 {
            be.fused_combine_launches.fetch_add(1, Ordering::Relaxed);
        }
        if splits > 1 && d.counters == 0 {
            be.launch(
                Kernel::LmPagedCombine,
                Launch {
                    grid: i32_of("combine blocks", g.rows * g.q_heads)? as u32,
                    block: COMBINE_THREADS,
                    smem: (splits * 4) as u32,
                },
                &mut kargs![&part, &start, &out, &d],
            )?;
        }
        return Ok(());
    }

    let nq = GENERAL_WARPS * general_queries_per_warp(hd);
    let tiles = (g.time * group).div_ceil(nq);
    let floats = nq * hd + GENERAL_KEY_TILE * (hd + 4) + nq * GENERAL_KEY_TILE;
    let cfg = Launch {
        grid: i32_of("attention blocks", g.rows * g.kv_heads * tiles)? as u32,
        block: GENERAL_THREADS,
        smem: (floats * 4) as u32,
    };
    if kv8 {
        be.launch(
            Kernel::LmPagedPrefill8,
            cfg,
            &mut kargs![&qkv, &kc, &vc, &tables, &start, &out, &ks, &vs, &d],
        )
    } else {
        be.launch(
            Kernel::LmPagedPrefill,
            cfg,
            &mut kargs![&qkv, &kc, &vc, &tables, &start, &out, &d],
        )
    }
}

/// Whether the caches are 8-bit, and their scales' pointers (0 when not): checked against the
/// caches' storage, the device and the kernels' lane groups; `entries` scales per cache.
fn kv8_scales(
    be: &CudaBackend,
    a: &PagedAttentionArgs<'_, CudaBackend>,
    entries: usize,
) -> Result<(bool, (u64, u64))> {
    let kv8 = a.kv_scales.is_some();
    if a.k_cache.fp8 != kv8 || a.v_cache.fp8 != kv8 {
        return Err(cuda_error(
            OP,
            format!(
                "8-bit caches (BufRole::Pool8) take their scales and caches in the storage type \
                 none: k_cache 8-bit {}, v_cache 8-bit {}, scales given {kv8}",
                a.k_cache.fp8, a.v_cache.fp8
            ),
        ));
    }
    let Some(sc) = &a.kv_scales else {
        return Ok((false, (0, 0)));
    };
    if !be.has_fp8() {
        return Err(cuda_error(
            OP,
            format!(
                "8-bit KV caches need compute capability 8.9 or later (E4M3 conversions); this \
                 device is {}.{}",
                be.arch.0, be.arch.1
            ),
        ));
    }
    let lanes = a.geom.head_dim / (16 / be.esize());
    if lanes == 0 || !32usize.is_multiple_of(lanes) {
        return Err(cuda_error(
            OP,
            format!(
                "8-bit KV caches take head_dim {} only where a head spans a power of two of lanes \
                 up to 32 ({lanes} here)",
                a.geom.head_dim
            ),
        ));
    }
    need("kv_scales.k", sc.k.len, entries)?;
    need("kv_scales.v", sc.v.len, entries)?;
    if !sc.k.f32 || !sc.v.f32 {
        return Err(cuda_error(
            OP,
            "the KV scales must be f32 tables (BufRole::Table)",
        ));
    }
    Ok((true, (sc.k.mem.ptr(), sc.v.mem.ptr())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(rows: usize, kv_heads: usize) -> HeadGeom {
        HeadGeom {
            rows,
            time: 1,
            q_heads: 4 * kv_heads,
            kv_heads,
            head_dim: 128,
        }
    }

    #[test]
    fn decode_plan_fills_one_wave_and_covers_the_context() {
        let wave = DECODE_BLOCKS_PER_SM * 132;
        for rows in [1, 2, 6, 16, 40, 64, 256] {
            for (max_blocks, bs) in [(55, 256), (12, 256), (188, 16), (3, 64)] {
                let p = decode_plan(132, &geom(rows, 8), bs, max_blocks, false);
                let ctx = bs * max_blocks;
                assert!(!p.group_pairs);
                assert!(p.splits * p.split_len >= ctx && (p.splits - 1) * p.split_len < ctx);
                assert!(p.split_len.is_multiple_of(SPLIT_QUANTUM) && p.split_len <= SPLIT_MAX);
                assert!(
                    p.splits == 1 || rows * 8 * p.splits <= wave || p.split_len == SPLIT_MAX,
                    "rows {rows}, {p:?}"
                );
            }
        }
        // Qwen3, one song (16 pairs) at 14,080 positions: 32 splits of 448, 512 blocks.
        let p = decode_plan(132, &geom(2, 8), 256, 55, false);
        assert_eq!((p.splits, p.split_len), (32, 448));
        // 128 songs: one pass per 2,048 positions.
        let p = decode_plan(132, &geom(256, 8), 256, 55, false);
        assert_eq!((p.splits, p.split_len), (7, 2048));
        // The depth decoder (16/16 heads): one block of 16 positions.
        let depth = HeadGeom {
            q_heads: 16,
            ..geom(256, 16)
        };
        let p = decode_plan(132, &depth, 16, 1, false);
        assert!(p.group_pairs && p.splits == 1 && p.split_len == 16);
        assert!(!decode_plan(132, &geom(256, 16), 16, 1, false).group_pairs);
    }

    #[test]
    fn invariant_plan_splits_by_position_alone() {
        for rows in [1, 2, 16, 64, 256] {
            let p = decode_plan(132, &geom(rows, 8), 256, 55, true);
            assert_eq!(
                (p.splits, p.split_len),
                ((256 * 55usize).div_ceil(SPLIT_INVARIANT), SPLIT_INVARIANT),
                "rows {rows}"
            );
        }
    }
}
