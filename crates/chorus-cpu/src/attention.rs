//! Sliding-window causal attention over per-slot KV rings with absolute rotate-half RoPE.
//!
//! Two phases: first every row's new k (rotated) and v are written into its ring, in row order
//! (padded rows share the dummy row); then every new token attends to its window, tokens in
//! parallel, reading the rings only. Writing all keys first is correct because the ring holds
//! `window + time - 1` positions (checked), so no new key evicts one a query of this step needs.

use crate::simd::dispatch;
use crate::{check, math, CpuBackend};
use chorus_core::{AttentionArgs, AttentionGeom, Error, Result};
use rayon::prelude::*;

pub(crate) fn attention(be: &CpuBackend, a: AttentionArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "attention";
    let g = a.geom;
    let (rows, time, hd) = (g.rows, g.time, g.head_dim);
    let hdim = g.heads * hd;
    if hd == 0 || hd % 2 != 0 || g.window == 0 || g.window + time > g.ring + 1 {
        return Err(Error::input(
            OP,
            format!(
                "unsupported geometry {g:?} (need even head_dim, 0 < window <= ring + 1 - time)"
            ),
        ));
    }
    let total_rows = a.tokens.len();
    check::at_least(OP, "qkv", a.qkv.len(), rows * time * 3 * hdim)?;
    check::at_least(OP, "kv", a.kv.len(), total_rows * g.ring * 2 * hdim)?;
    check::at_least(OP, "slots", a.slots.len(), rows)?;
    check::at_least(OP, "out", a.out.len(), rows * time * hdim)?;
    for &s in &a.slots.0[..rows] {
        let s = check::slot(OP, s, total_rows)?;
        if a.tokens.0[s] < 0 {
            return Err(Error::input(
                OP,
                format!("slot {s} has a negative token count"),
            ));
        }
    }
    let tokens_n = rows * time;
    if tokens_n == 0 {
        return Ok(());
    }
    let half = hd / 2;
    let rope_len = tokens_n * hd;
    // Per (row, head) task: its scores, its rotated query, and its `[time, head_dim]` output.
    let task_len = g.window + hd + time * hd;
    let (qkv, kv) = (&a.qkv.0[..tokens_n * 3 * hdim], &mut a.kv.0);
    let (slots, tokens) = (&a.slots.0[..rows], &a.tokens.0);
    let out = &mut a.out.0[..tokens_n * hdim];
    be.scratch
        .with(half + rope_len + rows * g.heads * task_len, |scratch| {
            let (inv_freq, rest) = scratch.split_at_mut(half);
            let (rope, tasks) = rest.split_at_mut(rope_len);
            // transformers' default RoPE: inv_freq = 1 / theta^(2i / d), all in f32.
            for (i, f) in inv_freq.iter_mut().enumerate() {
                *f = 1.0 / g.rope_theta.powf((2 * i) as f32 / hd as f32);
            }
            for (tok, tab) in rope.chunks_exact_mut(hd).enumerate() {
                let p = (tokens[slots[tok / time] as usize] as usize + tok % time) as f32;
                let (cos, sin) = tab.split_at_mut(half);
                for i in 0..half {
                    let angle = p * inv_freq[i];
                    cos[i] = angle.cos();
                    sin[i] = angle.sin();
                }
            }
            write_ring(&g, qkv, kv, rope, Positions { slots, tokens });
            let kv: &[f32] = kv;
            let rope: &[f32] = rope;
            be.install(|| {
                // Each task reads one head's keys once per query of its row (they stay in cache).
                tasks
                    .par_chunks_mut(task_len)
                    .enumerate()
                    .for_each(|(task, buf)| {
                        let (r, h) = (task / g.heads, task % g.heads);
                        let s = slots[r] as usize;
                        let head = Head {
                            g: &g,
                            h,
                            p0: tokens[s] as usize,
                            qkv: &qkv[r * time * 3 * hdim..(r + 1) * time * 3 * hdim],
                            ring: &kv[s * g.ring * 2 * hdim..(s + 1) * g.ring * 2 * hdim],
                            rope: &rope[r * time * hd..(r + 1) * time * hd],
                        };
                        attend_head(&head, buf);
                    });
                let tasks: &[f32] = tasks;
                out.par_chunks_mut(hdim).enumerate().for_each(|(tok, o)| {
                    let (r, t) = (tok / time, tok % time);
                    for h in 0..g.heads {
                        let at = (r * g.heads + h) * task_len + g.window + hd + t * hd;
                        o[h * hd..(h + 1) * hd].copy_from_slice(&tasks[at..at + hd]);
                    }
                });
            });
        });
    Ok(())
}

/// `dst = rope(src)` with rotate-half pairing `(i, i + d/2)`, then scaled.
#[inline(always)]
fn rotate(dst: &mut [f32], src: &[f32], tab: &[f32], scale: f32) {
    let half = src.len() / 2;
    let (cos, sin) = tab.split_at(half);
    let (x1, x2) = src.split_at(half);
    let (d1, d2) = dst.split_at_mut(half);
    for i in 0..half {
        d1[i] = (x1[i] * cos[i] - x2[i] * sin[i]) * scale;
        d2[i] = (x2[i] * cos[i] + x1[i] * sin[i]) * scale;
    }
}

/// Each row's slot, and each slot's tokens before this step: the positions of the new tokens.
struct Positions<'a> {
    slots: &'a [i32],
    tokens: &'a [i32],
}

/// Writes each new token's rotated k and its v to ring entry `position % ring` of its slot.
fn write_ring(g: &AttentionGeom, qkv: &[f32], kv: &mut [f32], rope: &[f32], pos: Positions<'_>) {
    let Positions { slots, tokens } = pos;
    let (hd, time) = (g.head_dim, g.time);
    let hdim = g.heads * hd;
    for (tok, row) in qkv.chunks_exact(3 * hdim).enumerate() {
        let s = slots[tok / time] as usize;
        let p = tokens[s] as usize + tok % time;
        let tab = &rope[tok * hd..(tok + 1) * hd];
        for h in 0..g.heads {
            let k_at = entry_at(g, s, h, 0, p % g.ring);
            let v_at = entry_at(g, s, h, 1, p % g.ring);
            let k = &row[hdim + h * hd..hdim + (h + 1) * hd];
            rotate(&mut kv[k_at..k_at + hd], k, tab, 1.0);
            kv[v_at..v_at + hd].copy_from_slice(&row[2 * hdim + h * hd..2 * hdim + (h + 1) * hd]);
        }
    }
}

/// Offset in `kv` of ring entry `e` of slot `s`, head `h` (k: which = 0, v: which = 1): the
/// layout is `[slots, heads, 2, ring, head_dim]`, so a head's keys (and its values) are contiguous.
fn entry_at(g: &AttentionGeom, s: usize, h: usize, which: usize, e: usize) -> usize {
    (((s * g.heads + h) * 2 + which) * g.ring + e) * g.head_dim
}

/// One (row, head) pair of a call.
struct Head<'a> {
    g: &'a AttentionGeom,
    h: usize,
    /// Position of the row's first new token.
    p0: usize,
    /// The row's `[time, 3 * heads * head_dim]` projections.
    qkv: &'a [f32],
    /// The slot's `[heads, 2, ring, head_dim]` ring.
    ring: &'a [f32],
    /// The row's `[time, head_dim]` cos/sin table.
    rope: &'a [f32],
}

dispatch! {
    /// Softmax attention of each new query of one head over its window; writes `[time, head_dim]`
    /// at the end of `buf`.
    fn attend_head(a: &Head<'_>, buf: &mut [f32]) {
        let g = a.g;
        let hd = g.head_dim;
        let hdim = g.heads * hd;
        let scale = 1.0 / (hd as f32).sqrt();
        let (scores, rest) = buf.split_at_mut(g.window);
        let (qr, outs) = rest.split_at_mut(hd);
        for t in 0..g.time {
            let p = a.p0 + t;
            let n_keys = g.window.min(p + 1);
            let first = p + 1 - n_keys;
            let q = &a.qkv[t * 3 * hdim + a.h * hd..t * 3 * hdim + (a.h + 1) * hd];
            rotate(qr, q, &a.rope[t * hd..(t + 1) * hd], scale);
            let scores = &mut scores[..n_keys];
            let o = &mut outs[t * hd..(t + 1) * hd];
            let sum = scores_and_values(a, qr, first, scores, o);
            let inv = 1.0 / sum;
            outs[t * hd..(t + 1) * hd].iter_mut().for_each(|v| *v *= inv);
        }
    }
}

/// Scores of one rotated query against keys `first..first + scores.len()`, their softmax
/// numerators, and the unnormalised value sum in `o`; returns the softmax denominator.
#[inline(always)]
fn scores_and_values(
    a: &Head<'_>,
    qr: &[f32],
    first: usize,
    scores: &mut [f32],
    o: &mut [f32],
) -> f32 {
    let g = a.g;
    let hd = qr.len();
    // The head's keys, then its values, `[ring, head_dim]` each.
    let keys = &a.ring[a.h * 2 * g.ring * hd..(a.h * 2 + 1) * g.ring * hd];
    let values = &a.ring[(a.h * 2 + 1) * g.ring * hd..(a.h * 2 + 2) * g.ring * hd];
    // Ring entry of key i, without a division per key: the window wraps at most once.
    let start = first % g.ring;
    let entry = |i: usize| {
        let e = start + i;
        if e >= g.ring {
            e - g.ring
        } else {
            e
        }
    };
    for (i, sc) in scores.iter_mut().enumerate() {
        let at = entry(i) * hd;
        *sc = math::dot(qr, &keys[at..at + hd]);
    }
    let sum = math::softmax_unnormalized(scores);
    o.fill(0.0);
    for (i, &w) in scores.iter().enumerate() {
        let at = entry(i) * hd;
        math::axpy(o, w, &values[at..at + hd]);
    }
    sum
}
