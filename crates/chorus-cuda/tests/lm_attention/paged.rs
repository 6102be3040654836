//! The paged-attention harness: head layouts, one layer's caches and block tables on a backend,
//! the f64 causal-attention reference and scattered block tables.

use super::*;
use chorus_core::lm_ops::{HeadGeom, KvScales, PagedAttentionArgs, RopeAttentionArgs, RopeOf};

/// Head layout of a model.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Heads {
    pub(crate) q: usize,
    pub(crate) kv: usize,
    pub(crate) hd: usize,
}

impl Heads {
    pub(crate) fn width(&self) -> usize {
        (self.q + 2 * self.kv) * self.hd
    }

    pub(crate) fn kv_dim(&self) -> usize {
        self.kv * self.hd
    }

    pub(crate) fn geom(&self, rows: usize, time: usize) -> HeadGeom {
        HeadGeom {
            rows,
            time,
            q_heads: self.q,
            kv_heads: self.kv,
            head_dim: self.hd,
        }
    }
}

pub(crate) const QWEN: Heads = Heads {
    q: 32,
    kv: 8,
    hd: 128,
};
pub(crate) const SMALL: Heads = Heads {
    q: 8,
    kv: 2,
    hd: 64,
};
pub(crate) const DEPTH: Heads = Heads {
    q: 16,
    kv: 16,
    hd: 256,
};

/// One layer's caches and block tables on a backend.
pub(crate) struct Paged<B: LmOps> {
    pub(crate) heads: Heads,
    pub(crate) k: B::Buf,
    pub(crate) v: B::Buf,
    pub(crate) tables: B::Ints,
    pub(crate) block_size: usize,
    pub(crate) max_blocks: usize,
    /// Sliding-window attention over rings of `max_blocks * block_size` entries.
    pub(crate) window: Option<usize>,
    /// 8-bit caches (`BufRole::Pool8`): the k and v scales of every entry's heads.
    pub(crate) scales: Option<(B::Buf, B::Buf)>,
}

impl<B: LmOps> Paged<B> {
    pub(crate) fn new(
        be: &B,
        heads: Heads,
        (block_size, max_blocks): (usize, usize),
        tables: &[i32],
        (k, v): (&[f32], &[f32]),
    ) -> Result<Self> {
        Ok(Self {
            heads,
            k: be.upload(k, BufRole::Pool)?,
            v: be.upload(v, BufRole::Pool)?,
            tables: ints(be, tables)?,
            block_size,
            max_blocks,
            window: None,
            scales: None,
        })
    }

    /// Zeroed 8-bit caches of `blocks` blocks with their scales.
    pub(crate) fn new_fp8(
        be: &B,
        heads: Heads,
        (block_size, max_blocks, blocks): (usize, usize, usize),
        tables: &[i32],
    ) -> Result<Self> {
        let entries = blocks * block_size;
        Ok(Self {
            heads,
            k: be.zeros(entries * heads.kv_dim(), BufRole::Pool8)?,
            v: be.zeros(entries * heads.kv_dim(), BufRole::Pool8)?,
            tables: ints(be, tables)?,
            block_size,
            max_blocks,
            window: None,
            scales: Some((
                be.zeros(entries * heads.kv, BufRole::Table)?,
                be.zeros(entries * heads.kv, BufRole::Table)?,
            )),
        })
    }

    /// One call over `start.len()` rows of `qkv` (`[rows * time, width]`); returns the output.
    pub(crate) fn call(&mut self, be: &B, qkv: &[f32], start: &[i32]) -> Result<Vec<f32>> {
        self.call_at(be, qkv, start, 0)
    }

    /// [`Paged::call`] with `first` other tokens before the call's own in `qkv` and `out`
    /// (`first_token`): it must read and write its own tokens only.
    pub(crate) fn call_at(
        &mut self,
        be: &B,
        qkv: &[f32],
        start: &[i32],
        first: usize,
    ) -> Result<Vec<f32>> {
        const OTHER_IN: f32 = 7.5;
        const OTHER_OUT: f32 = -3.0;
        let h = self.heads;
        let rows = start.len();
        let g = h.geom(rows, qkv.len() / h.width() / rows);
        let mut padded = vec![OTHER_IN; first * h.width()];
        padded.extend_from_slice(qkv);
        let mut qkv = be.upload(&padded, BufRole::Activation)?;
        let start = ints(be, start)?;
        let n = h.q * h.hd;
        let mut out = be.upload(
            &vec![OTHER_OUT; (first + g.tokens()) * n],
            BufRole::Activation,
        )?;
        let (k, v, tables) = (&mut self.k, &mut self.v, &self.tables);
        let scales = &mut self.scales;
        let (block_size, max_blocks, window) = (self.block_size, self.max_blocks, self.window);
        be.run(key(), &mut |b: &B| {
            b.paged_attention(PagedAttentionArgs {
                kv_scales: scales.as_mut().map(|(k, v)| KvScales { k, v }),
                first_token: first,
                qkv: &mut qkv,
                k_cache: &mut *k,
                v_cache: &mut *v,
                block_tables: tables,
                start: &start,
                out: &mut out,
                geom: g,
                block_size,
                max_blocks,
                window,
            })
        })?;
        let mut got = be.download(&out)?;
        assert!(
            got[..first * n].iter().all(|&v| v == OTHER_OUT),
            "paged_attention wrote outside its own tokens"
        );
        Ok(got.split_off(first * n))
    }
}

/// What a rotating call takes besides its tokens: the RoPE table and the optional q/k norms.
pub(crate) struct RopeBufs<B: LmOps> {
    pub(crate) table: B::Buf,
    pub(crate) norms: Option<(B::Buf, B::Buf)>,
}

impl<B: LmOps> Paged<B> {
    /// One `rope_paged_attention` call (q and k of `qkv` not yet rotated); returns the output
    /// and the call's `qkv` after it (its rotated q and k).
    pub(crate) fn call_rope(
        &mut self,
        be: &B,
        qkv: &[f32],
        start: &[i32],
        rope: &RopeBufs<B>,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let h = self.heads;
        let rows = start.len();
        let g = h.geom(rows, qkv.len() / h.width() / rows);
        let mut qkv = be.upload(qkv, BufRole::Activation)?;
        let start = ints(be, start)?;
        let mut out = be.zeros(g.tokens() * h.q * h.hd, BufRole::Activation)?;
        let (k, v, tables) = (&mut self.k, &mut self.v, &self.tables);
        let scales = &mut self.scales;
        let (block_size, max_blocks, window) = (self.block_size, self.max_blocks, self.window);
        be.run(key(), &mut |b: &B| {
            b.rope_paged_attention(RopeAttentionArgs {
                rope: RopeOf {
                    qk_norm: rope.norms.as_ref().map(|(q, k)| [q, k]),
                    rope: &rope.table,
                    eps: 1e-6,
                },
                attn: PagedAttentionArgs {
                    kv_scales: scales.as_mut().map(|(k, v)| KvScales { k, v }),
                    first_token: 0,
                    qkv: &mut qkv,
                    k_cache: &mut *k,
                    v_cache: &mut *v,
                    block_tables: tables,
                    start: &start,
                    out: &mut out,
                    geom: g,
                    block_size,
                    max_blocks,
                    window,
                },
            })
        })?;
        Ok((be.download(&out)?, be.download(&qkv)?))
    }
}

/// Causal GQA attention in f64 of one token (`q`: its qkv row) over the keys and values
/// `[n, kv_dim]` of positions `0..n`.
pub(crate) fn naive(h: Heads, q: &[f32], keys: &[f32], vals: &[f32], n: usize) -> Vec<f64> {
    let (hd, kvd, group) = (h.hd, h.kv_dim(), h.q / h.kv);
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0.0; h.q * hd];
    for head in 0..h.q {
        let at = (head / group) * hd;
        let qh = &q[head * hd..(head + 1) * hd];
        let scores: Vec<f64> = (0..n)
            .map(|kp| {
                let k = &keys[kp * kvd + at..kp * kvd + at + hd];
                qh.iter()
                    .zip(k)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        let o = &mut out[head * hd..(head + 1) * hd];
        for (kp, w) in e.iter().enumerate() {
            let v = &vals[kp * kvd + at..kp * kvd + at + hd];
            for (od, &vd) in o.iter_mut().zip(v) {
                *od += w / sum * vd as f64;
            }
        }
    }
    out
}

/// The k (`which = 0`) or v (`1`) part of a qkv row.
pub(crate) fn kv_part(h: Heads, row: &[f32], which: usize) -> &[f32] {
    let at = (h.q + which * h.kv) * h.hd;
    &row[at..at + h.kv_dim()]
}

/// Scattered block tables: row `r` gets `blocks[r]` distinct ids from a shuffled `1..num_blocks`
/// (none for padded rows, which point at the null block 0). Entries past a row's blocks hold ids
/// outside the pool: nothing may read them.
pub(crate) fn scattered_tables(
    rng: &mut Rng,
    blocks: &[usize],
    max_blocks: usize,
    num_blocks: usize,
) -> Vec<i32> {
    let mut ids: Vec<i32> = (1..num_blocks as i32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i + 1));
    }
    let mut next = ids.into_iter();
    let mut tables = Vec::new();
    for &n in blocks {
        for b in 0..max_blocks {
            tables.push(if n == 0 {
                0
            } else if b < n {
                next.next().expect("enough blocks")
            } else {
                -3 - b as i32
            });
        }
    }
    tables
}
