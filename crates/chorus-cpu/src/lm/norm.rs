//! Row-wise LM ops: fused residual add + RMSNorm, per-head q/k RMSNorm + RoPE, SwiGLU.
//!
//! Each row's (or head's) sum of squares is one `math::dot` over that row alone: 16 lane
//! accumulators in a fixed order, so a row's result is the same bit for bit whatever the number of
//! rows in the call. Rows are split across the pool, never one row's reduction.

use crate::simd::dispatch;
use crate::{check, math, CpuBackend, CpuBuf};
use chorus_core::lm_ops::{QkNormRopeArgs, RmsNormArgs, SwigluArgs};
use chorus_core::{Error, Result};
use rayon::prelude::*;

/// Elements per rayon task (below this, splitting costs more than it saves).
const GRAIN_ELEMS: usize = 16 * 1024;

/// Rows per rayon task for rows of `width` elements.
fn grain(width: usize) -> usize {
    (GRAIN_ELEMS / width.max(1)).max(1)
}

/// `1 / sqrt(mean(x^2) + eps)` in f32, the sum in `math::dot`'s fixed order.
#[inline(always)]
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let mean = math::dot(x, x) / x.len() as f32;
    1.0 / (mean + eps).sqrt()
}

dispatch! {
    /// `x += d` (when given), then `o = x * inv_rms(x) * w`.
    fn norm_row(o: &mut [f32], x: &mut [f32], d: Option<&[f32]>, w: &[f32], eps: f32) {
        if let Some(d) = d {
            x.iter_mut().zip(d).for_each(|(v, &dv)| *v += dv);
        }
        let inv = inv_rms(x, eps);
        for ((ov, &xv), &wv) in o.iter_mut().zip(x.iter()).zip(w) {
            *ov = xv * inv * wv;
        }
    }
}

dispatch! {
    /// `o = x * inv_rms(x) * w` (the arithmetic of `norm_row` without the add).
    fn scale_row(o: &mut [f32], x: &[f32], w: &[f32], eps: f32) {
        let inv = inv_rms(x, eps);
        for ((ov, &xv), &wv) in o.iter_mut().zip(x).zip(w) {
            *ov = xv * inv * wv;
        }
    }
}

/// The normed rows of `x` (`[n, dim]`) into `out`, `x` unchanged: the input half of
/// `fused_linear`.
pub(super) fn norm_rows(
    be: &CpuBackend,
    x: &CpuBuf,
    weight: &CpuBuf,
    eps: f32,
    out: &mut CpuBuf,
    (n, dim): (usize, usize),
) -> Result<()> {
    const OP: &str = "fused_linear";
    check::at_least(OP, "x", x.len(), n * dim)?;
    check::at_least(OP, "norm.weight", weight.len(), dim)?;
    check::at_least(OP, "scratch.normed", out.len(), n * dim)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let (x, weight) = (&x.0[..n * dim], &weight.0[..dim]);
    let out = &mut out.0[..n * dim];
    be.install(|| {
        out.par_chunks_mut(dim)
            .zip(x.par_chunks(dim))
            .with_min_len(grain(dim))
            .for_each(|(o, xr)| scale_row(o, xr, weight, eps));
    });
    Ok(())
}

pub(super) fn rms_norm(be: &CpuBackend, a: RmsNormArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "rms_norm";
    let (n, dim, eps) = (a.n, a.dim, a.eps);
    check::at_least(OP, "residual", a.residual.len(), n * dim)?;
    if let Some(d) = a.delta {
        check::at_least(OP, "delta", d.len(), n * dim)?;
    }
    check::at_least(OP, "weight", a.weight.len(), dim)?;
    check::at_least(OP, "out", a.out.len(), n * dim)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let delta = a.delta.map(|d| &d.0[..n * dim]);
    let weight = &a.weight.0[..dim];
    let residual = &mut a.residual.0[..n * dim];
    let out = &mut a.out.0[..n * dim];
    be.install(|| {
        out.par_chunks_mut(dim)
            .zip(residual.par_chunks_mut(dim))
            .with_min_len(grain(dim))
            .enumerate()
            .for_each(|(r, (o, x))| {
                let d = delta.map(|d| &d[r * dim..(r + 1) * dim]);
                norm_row(o, x, d, weight, eps);
            });
    });
    Ok(())
}

dispatch! {
    /// One head in place: RMSNorm with `w`, then rotate-half RoPE with `tab = [cos; sin]`.
    fn norm_rope_head(x: &mut [f32], w: &[f32], tab: &[f32], eps: f32) {
        let half = x.len() / 2;
        let inv = inv_rms(x, eps);
        let (cos, sin) = tab.split_at(half);
        let (x1, x2) = x.split_at_mut(half);
        let (w1, w2) = w.split_at(half);
        for j in 0..half {
            let a = x1[j] * inv * w1[j];
            let b = x2[j] * inv * w2[j];
            x1[j] = a * cos[j] - b * sin[j];
            x2[j] = b * cos[j] + a * sin[j];
        }
    }
}

dispatch! {
    /// One head in place: rotate-half RoPE with `tab = [cos; sin]` (no norm).
    fn rope_head(x: &mut [f32], tab: &[f32]) {
        let half = x.len() / 2;
        let (cos, sin) = tab.split_at(half);
        let (x1, x2) = x.split_at_mut(half);
        for j in 0..half {
            let (a, b) = (x1[j], x2[j]);
            x1[j] = a * cos[j] - b * sin[j];
            x2[j] = b * cos[j] + a * sin[j];
        }
    }
}

pub(super) fn qk_norm_rope(be: &CpuBackend, a: QkNormRopeArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "qk_norm_rope";
    let g = a.geom;
    let (hd, time) = (g.head_dim, g.time);
    if hd == 0 || !hd.is_multiple_of(2) {
        return Err(Error::input(
            OP,
            format!("head_dim must be even and positive ({g:?})"),
        ));
    }
    let (tokens, width) = (g.tokens(), g.qkv_width());
    let first = a.first_token;
    check::at_least(OP, "qkv", a.qkv.len(), (first + tokens) * width)?;
    if let Some([q, k]) = a.qk_norm {
        check::at_least(OP, "q_norm", q.len(), hd)?;
        check::at_least(OP, "k_norm", k.len(), hd)?;
    }
    check::at_least(OP, "start", a.start.len(), g.rows)?;
    if tokens == 0 {
        return Ok(());
    }
    let start = &a.start.0[..g.rows];
    for &s in start {
        let s = usize::try_from(s)
            .map_err(|_| Error::input(OP, format!("negative start position {s}")))?;
        check::at_least(OP, "rope", a.rope.len(), (s + time) * hd)?;
    }
    let norms = a.qk_norm.map(|[q, k]| (&q.0[..hd], &k.0[..hd]));
    let (rope, eps, q_heads) = (&a.rope.0, a.eps, g.q_heads);
    let normed_heads = g.q_heads + g.kv_heads;
    let qkv = &mut a.qkv.0[first * width..(first + tokens) * width];
    be.install(|| {
        qkv.par_chunks_mut(width)
            .with_min_len(grain(width))
            .enumerate()
            .for_each(|(tok, row)| {
                // Non-negative and inside `rope`: checked above.
                let p = start[tok / time] as usize + tok % time;
                let tab = &rope[p * hd..(p + 1) * hd];
                for (h, x) in row[..normed_heads * hd].chunks_exact_mut(hd).enumerate() {
                    match norms {
                        Some((q, k)) => {
                            norm_rope_head(x, if h < q_heads { q } else { k }, tab, eps)
                        }
                        None => rope_head(x, tab),
                    }
                }
            });
    });
    Ok(())
}

pub(super) fn swiglu(be: &CpuBackend, a: SwigluArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "swiglu";
    let (n, inter) = (a.n, a.inter);
    check::at_least(OP, "x", a.x.len(), n * 2 * inter)?;
    check::at_least(OP, "out", a.out.len(), n * inter)?;
    if n == 0 || inter == 0 {
        return Ok(());
    }
    let x = &a.x.0[..n * 2 * inter];
    let out = &mut a.out.0[..n * inter];
    be.install(|| {
        out.par_chunks_mut(inter)
            .zip(x.par_chunks(2 * inter))
            .with_min_len(grain(2 * inter))
            .for_each(|(o, xr)| {
                let (gate, up) = xr.split_at(inter);
                for ((ov, &gv), &uv) in o.iter_mut().zip(gate).zip(up) {
                    *ov = gv / (1.0 + (-gv).exp()) * uv;
                }
            });
    });
    Ok(())
}
