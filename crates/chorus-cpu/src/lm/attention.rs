//! Causal GQA attention over a paged KV cache (prefill and decode alike).
//!
//! Two phases. First every new token's k and v are written to its cache entry, sequentially in
//! token order (padded rows all point at the null block 0 and may write the same entries; the
//! last write wins, and nothing real reads block 0). Then every (token, query head) pair attends
//! to the keys `0..=p` of its row (with a window `w`, `p + 1 - w..=p` over a ring of entries),
//! reading the cache only: in parallel over tasks of one token and a run of up to [`MAX_HEADS`]
//! query heads of one kv head, which share each key's load.
//!
//! One query's softmax is an online (streaming) softmax over blocks of [`CHUNK`] keys: scores of
//! a block on the stack, the running max subtracted before every `exp`, and the output rescaled
//! when the max grows. No scratch is needed whatever the context length, and the keys of one
//! query are visited in one fixed order with its own accumulators, so its result does not depend
//! on `rows`, on the run it shares, or on whether its keys were written in this call or earlier.

use crate::simd::dispatch;
use crate::{check, math, CpuBackend};
use chorus_core::fp8;
use chorus_core::lm_ops::PagedAttentionArgs;
use chorus_core::{Error, Result};
use rayon::prelude::*;

/// Keys per online-softmax block (the stack array of scores).
const CHUNK: usize = 64;
/// Most query heads one task runs together over the same keys (the stack arrays' height).
const MAX_HEADS: usize = 8;
/// Multiply-adds per rayon task at least (decode tasks with short contexts are tiny).
const TASK_WORK: usize = 32 * 1024;

/// The cache geometry of one call, validated.
struct Paged {
    block_size: usize,
    /// Entries of a row's block table; positions wrap modulo it under a window (else never reach
    /// it).
    ring: usize,
    /// Keys per query under a sliding window.
    window: Option<usize>,
    /// Floats per cache entry: `kv_heads * head_dim`.
    kv_dim: usize,
    num_blocks: usize,
}

fn validate(a: &PagedAttentionArgs<'_, CpuBackend>) -> Result<Paged> {
    const OP: &str = "paged_attention";
    let g = a.geom;
    if g.head_dim == 0
        || g.kv_heads == 0
        || !g.q_heads.is_multiple_of(g.kv_heads)
        || a.block_size == 0
    {
        return Err(Error::input(
            OP,
            format!(
                "unsupported geometry {g:?}, block_size {} (need head_dim, kv_heads, block_size \
                 >= 1 and q_heads a multiple of kv_heads)",
                a.block_size
            ),
        ));
    }
    // The call's tokens end here in `qkv` and `out`.
    let end = a.first_token + g.tokens();
    let kv_dim = g.kv_heads * g.head_dim;
    let block_len = a.block_size * kv_dim;
    let num_blocks = a.k_cache.len() / block_len;
    check::at_least(OP, "qkv", a.qkv.len(), end * g.qkv_width())?;
    check::at_least(OP, "v_cache", a.v_cache.len(), num_blocks * block_len)?;
    if let Some(sc) = &a.kv_scales {
        let entries = num_blocks * a.block_size * g.kv_heads;
        check::at_least(OP, "kv_scales.k", sc.k.len(), entries)?;
        check::at_least(OP, "kv_scales.v", sc.v.len(), entries)?;
    }
    check::at_least(
        OP,
        "block_tables",
        a.block_tables.len(),
        g.rows * a.max_blocks,
    )?;
    check::at_least(OP, "start", a.start.len(), g.rows)?;
    check::at_least(OP, "out", a.out.len(), end * g.q_heads * g.head_dim)?;
    let ring = a.block_size * a.max_blocks;
    let pg = Paged {
        block_size: a.block_size,
        ring,
        window: a.window,
        kv_dim,
        num_blocks,
    };
    if let Some(w) = a.window {
        if w == 0 || ring < w + g.time.max(1) - 1 {
            return Err(Error::input(
                OP,
                format!(
                    "window {w} over a ring of {ring} entries ({} blocks of {}): need a window of \
                     at least 1 and a ring of at least window + time - 1 = {}",
                    a.max_blocks,
                    a.block_size,
                    w + g.time.max(1) - 1
                ),
            ));
        }
    }
    if g.time == 0 {
        return Ok(pg);
    }
    // Every block a row touches must exist: O(rows * blocks in use), far below the attention.
    for r in 0..g.rows {
        let s = a.start.0[r];
        let s = usize::try_from(s)
            .map_err(|_| Error::input(OP, format!("row {r}: negative start {s}")))?;
        let last = s + g.time - 1;
        // Under a window the ring wraps: once past it, every block of the table is in use.
        let last_block = match a.window {
            Some(_) if last >= ring => a.max_blocks - 1,
            _ => last / a.block_size,
        };
        if last_block >= a.max_blocks {
            return Err(Error::input(
                OP,
                format!(
                    "row {r}: position {} needs block {last_block}, past max_blocks {}",
                    s + g.time - 1,
                    a.max_blocks
                ),
            ));
        }
        for (b, &id) in a.block_tables.0[r * a.max_blocks..][..=last_block]
            .iter()
            .enumerate()
        {
            if id < 0 || id as usize >= num_blocks {
                return Err(Error::input(
                    OP,
                    format!("row {r}: block_tables[{b}] = {id} is outside the {num_blocks} blocks"),
                ));
            }
        }
    }
    Ok(pg)
}

pub(super) fn paged_attention(
    be: &CpuBackend,
    a: PagedAttentionArgs<'_, CpuBackend>,
) -> Result<()> {
    let pg = validate(&a)?;
    let g = a.geom;
    let (tokens, width, hd) = (g.tokens(), g.qkv_width(), g.head_dim);
    if tokens == 0 {
        return Ok(());
    }
    let cache_len = pg.num_blocks * pg.block_size * pg.kv_dim;
    let first = a.first_token;
    let qkv = &a.qkv.0[first * width..(first + tokens) * width];
    let (tables, start) = (
        &a.block_tables.0[..g.rows * a.max_blocks],
        &a.start.0[..g.rows],
    );
    let k_cache = &mut a.k_cache.0[..cache_len];
    let v_cache = &mut a.v_cache.0[..cache_len];
    // Phase 1: the writes, in token order. Block ids and positions were checked in `validate`.
    let k_at = g.q_heads * hd;
    let v_at = k_at + pg.kv_dim;
    let mut scales = a.kv_scales.map(|s| (&mut s.k.0, &mut s.v.0));
    for (tok, row) in qkv.chunks_exact(width).enumerate() {
        let (r, t) = (tok / g.time, tok % g.time);
        let at = pg.entry(&tables[r * a.max_blocks..], start[r] as usize + t);
        k_cache[at..at + pg.kv_dim].copy_from_slice(&row[k_at..k_at + pg.kv_dim]);
        v_cache[at..at + pg.kv_dim].copy_from_slice(&row[v_at..v_at + pg.kv_dim]);
        // An 8-bit cache holds each head vector as its E4M3 values times its scale.
        if let Some((ks, vs)) = scales.as_mut() {
            let pos = at / pg.kv_dim;
            for h in 0..g.kv_heads {
                let head = at + h * hd..at + (h + 1) * hd;
                let s = fp8::scale_index(pos, h, a.block_size, g.kv_heads);
                ks[s] = fp8::quantize_head(&mut k_cache[head.clone()]);
                vs[s] = fp8::quantize_head(&mut v_cache[head]);
            }
        }
    }
    // Phase 2: one task per token and run of `heads` query heads sharing one kv head, so each
    // key and value is loaded once for the run; each task writes its own `heads * head_dim`.
    let (k_cache, v_cache): (&[f32], &[f32]) = (k_cache, v_cache);
    let group = g.q_heads / g.kv_heads;
    let heads = (1..=MAX_HEADS.min(group))
        .rev()
        .find(|&d| group.is_multiple_of(d))
        .unwrap_or(1);
    let runs = g.q_heads / heads;
    let context_hint = (start[0] as usize + g.time).min(a.window.unwrap_or(usize::MAX));
    let min_len = (TASK_WORK / (2 * heads * hd * context_hint).max(1)).max(1);
    let out = &mut a.out.0[first * g.q_heads * hd..(first + tokens) * g.q_heads * hd];
    be.install(|| {
        out.par_chunks_mut(heads * hd)
            .with_min_len(min_len)
            .enumerate()
            .for_each(|(task, o)| {
                let (tok, h0) = (task / runs, (task % runs) * heads);
                let r = tok / g.time;
                let at = tok * width + h0 * hd;
                let query = Queries {
                    hd,
                    pg: &pg,
                    q: &qkv[at..at + heads * hd],
                    k_cache,
                    v_cache,
                    table: &tables[r * a.max_blocks..(r + 1) * a.max_blocks],
                    head_off: (h0 / group) * hd,
                    p: start[r] as usize + tok % g.time,
                };
                attend(&query, o);
            });
    });
    Ok(())
}

/// A run of query heads of one token that share one kv head.
struct Queries<'a> {
    hd: usize,
    pg: &'a Paged,
    /// `[heads, head_dim]`, already normed and rotated (`heads <= MAX_HEADS`).
    q: &'a [f32],
    k_cache: &'a [f32],
    v_cache: &'a [f32],
    /// The row's `[max_blocks]` block table.
    table: &'a [i32],
    /// Offset of the kv head within a cache entry.
    head_off: usize,
    /// The token's position: it attends to keys `0..=p` (`p + 1 - window..=p` under a window).
    p: usize,
}

impl Paged {
    /// Offset of position `kp`'s entry in a cache, through the row's table (wrapped under a
    /// window; its blocks were checked in `validate`).
    #[inline(always)]
    fn entry(&self, table: &[i32], kp: usize) -> usize {
        let i = if self.window.is_some() {
            kp % self.ring
        } else {
            kp
        };
        let block = table[i / self.block_size] as usize;
        (block * self.block_size + i % self.block_size) * self.kv_dim
    }
}

impl Queries<'_> {
    /// Offset of position `kp`'s kv head in the caches (`kp <= p`).
    #[inline(always)]
    fn key_at(&self, kp: usize) -> usize {
        self.pg.entry(self.table, kp) + self.head_off
    }

    /// The first key the query reads.
    fn first_key(&self) -> usize {
        self.pg.window.map_or(0, |w| (self.p + 1).saturating_sub(w))
    }
}

dispatch! {
    /// `o[j] = softmax(q[j] . k / sqrt(head_dim)) v` over the query's keys for each head `j` of the
    /// run, by online softmax. Each head's arithmetic is its own and in key order, exactly as if
    /// it ran alone: the run only shares the loads.
    fn attend(a: &Queries<'_>, o: &mut [f32]) {
        let hd = a.hd;
        let heads = a.q.len() / hd;
        let scale = 1.0 / (hd as f32).sqrt();
        let n = a.p + 1;
        // `scores[i][j]`: key `first + i` for head `j`.
        let mut scores = [[0.0_f32; MAX_HEADS]; CHUNK];
        let mut max = [f32::NEG_INFINITY; MAX_HEADS];
        let mut sum = [0.0_f32; MAX_HEADS];
        o.fill(0.0);
        let mut first = a.first_key();
        while first < n {
            let count = CHUNK.min(n - first);
            for (i, si) in scores[..count].iter_mut().enumerate() {
                let at = a.key_at(first + i);
                let k = &a.k_cache[at..at + hd];
                for (sc, q) in si.iter_mut().zip(a.q.chunks_exact(hd)) {
                    *sc = math::dot(q, k) * scale;
                }
            }
            for (j, oj) in o.chunks_exact_mut(hd).enumerate() {
                let block_max = scores[..count]
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, si| if si[j] > m { si[j] } else { m });
                if block_max > max[j] {
                    // Rescale what was accumulated under the old max (nothing on the first block).
                    let alpha = if max[j] == f32::NEG_INFINITY {
                        0.0
                    } else {
                        math::exp_nonpositive(max[j] - block_max)
                    };
                    sum[j] *= alpha;
                    oj.iter_mut().for_each(|v| *v *= alpha);
                    max[j] = block_max;
                }
            }
            for (i, si) in scores[..count].iter().enumerate() {
                let at = a.key_at(first + i);
                let v = &a.v_cache[at..at + hd];
                for (j, oj) in o.chunks_exact_mut(hd).enumerate() {
                    let w = math::exp_nonpositive(si[j] - max[j]);
                    sum[j] += w;
                    math::axpy(oj, w, v);
                }
            }
            first += count;
        }
        for (j, oj) in o.chunks_exact_mut(hd).enumerate().take(heads) {
            let inv = 1.0 / sum[j];
            oj.iter_mut().for_each(|v| *v *= inv);
        }
    }
}
