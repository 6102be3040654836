//! Row-wise and elementwise ops: code embedding, LayerNorm, GELU, layer-scale residual, tokens.

use crate::{check, math, CpuBackend, CpuBuf, CpuInts};
use chorus_core::{EmbedArgs, LayerNormArgs, ResetRowsArgs, Result, NO_CODE, NO_ROW};
use rayon::prelude::*;

/// Elements per rayon task for flat elementwise loops (below this, splitting costs more than it saves).
const ELEMENTWISE_GRAIN: usize = 16 * 1024;

pub(crate) fn embed_codes(be: &CpuBackend, a: EmbedArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "embed_codes";
    let (rows, q, card, dim) = (a.rows, a.codebooks, a.cardinality, a.dim);
    check::at_least(OP, "codes", a.codes.len(), rows * q)?;
    check::at_least(OP, "table", a.table.len(), q * card * dim)?;
    check::at_least(OP, "latents", a.latents.len(), rows * dim)?;
    check::at_least(OP, "out", a.out.len(), rows * dim)?;
    let codes = &a.codes.0[..rows * q];
    let table = &a.table.0;
    let out = &mut a.out.0[..rows * dim];
    out.copy_from_slice(&a.latents.0[..rows * dim]);
    be.install(|| {
        out.par_chunks_mut(dim).enumerate().for_each(|(r, o)| {
            for (cb, &code) in codes[r * q..(r + 1) * q].iter().enumerate() {
                // Codes are validated at the API edge; an out-of-range one is skipped like NO_CODE.
                if code == NO_CODE || code < 0 || code as usize >= card {
                    continue;
                }
                let at = (cb * card + code as usize) * dim;
                for (d, &t) in o.iter_mut().zip(&table[at..at + dim]) {
                    *d += t;
                }
            }
        });
    });
    Ok(())
}

pub(crate) fn layer_norm(be: &CpuBackend, a: LayerNormArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "layer_norm";
    let (n, dim) = (a.n, a.dim);
    check::at_least(OP, "x", a.x.len(), n * dim)?;
    check::at_least(OP, "gamma", a.gamma.len(), dim)?;
    check::at_least(OP, "beta", a.beta.len(), dim)?;
    check::at_least(OP, "out", a.out.len(), n * dim)?;
    let (x, gamma, beta, eps) = (
        &a.x.0[..n * dim],
        &a.gamma.0[..dim],
        &a.beta.0[..dim],
        a.eps,
    );
    let out = &mut a.out.0[..n * dim];
    let norm_row = |(o, xr): (&mut [f32], &[f32])| {
        // Two-pass mean and biased variance in f32, as PyTorch's LayerNorm.
        let mean = xr.iter().sum::<f32>() / dim as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / dim as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for i in 0..dim {
            o[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
        }
    };
    if n * dim <= ELEMENTWISE_GRAIN {
        // Too small to repay the hand-off to the pool (a few microseconds).
        out.chunks_mut(dim).zip(x.chunks(dim)).for_each(norm_row);
        return Ok(());
    }
    let grain = (ELEMENTWISE_GRAIN / dim.max(1)).max(1);
    be.install(|| {
        out.par_chunks_mut(dim)
            .zip(x.par_chunks(dim))
            .with_min_len(grain)
            .for_each(norm_row);
    });
    Ok(())
}

pub(crate) fn gelu(be: &CpuBackend, x: &mut CpuBuf, len: usize) -> Result<()> {
    check::at_least("gelu", "x", x.len(), len)?;
    let x = &mut x.0[..len];
    be.install(|| {
        x.par_chunks_mut(ELEMENTWISE_GRAIN / 4)
            .for_each(math::gelu_in_place);
    });
    Ok(())
}

pub(crate) fn advance_tokens(
    tokens: &mut CpuInts,
    slots: &CpuInts,
    rows: usize,
    count: i32,
    dummy: usize,
) -> Result<()> {
    const OP: &str = "advance_tokens";
    check::at_least(OP, "slots", slots.len(), rows)?;
    check::at_least(OP, "tokens", tokens.len(), dummy + 1)?;
    for &s in &slots.0[..rows] {
        let s = check::slot(OP, s, tokens.len())?;
        tokens.0[s] += count;
    }
    tokens.0[dummy] = 0;
    Ok(())
}

/// The rows of `list[..count]` but its `NO_ROW` entries, each checked against `total_rows`.
fn listed_rows(
    op: &'static str,
    list: &CpuInts,
    count: usize,
    total_rows: usize,
) -> Result<Vec<usize>> {
    check::at_least(op, "list", list.len(), count)?;
    list.0[..count]
        .iter()
        .filter(|&&r| r != NO_ROW)
        .map(|&r| check::slot(op, r, total_rows))
        .collect()
}

pub(crate) fn reset_rows(a: ResetRowsArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "reset_rows";
    let len = a.row_len;
    if len == 0 {
        return Ok(());
    }
    if let Some(src) = a.src {
        check::at_least(OP, "src", src.len(), len)?;
    }
    for r in listed_rows(OP, a.list, a.count, a.buf.len() / len)? {
        let row = &mut a.buf.0[r * len..(r + 1) * len];
        match a.src {
            Some(src) => row.copy_from_slice(&src.0[..len]),
            None => row.fill(0.0),
        }
    }
    Ok(())
}

pub(crate) fn reset_ints(
    ints: &mut CpuInts,
    list: &CpuInts,
    count: usize,
    value: i32,
) -> Result<()> {
    for r in listed_rows("reset_ints", list, count, ints.len())? {
        ints.0[r] = value;
    }
    Ok(())
}
