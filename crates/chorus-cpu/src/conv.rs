//! Stride-one causal convolution with per-slot history.
//!
//! Each row's input is laid out once as the channels-last concatenation `xin = [history + time,
//! c_in]` (state columns, then the (ELU'd) new columns). With weights `[c_out, kernel, c_in]`, the
//! im2col row of output `t` at dilation 1 is the contiguous run of `kernel * c_in` values starting at
//! row `t` of `xin`, so long convolutions are one GEMM per row whose lhs rows overlap (row stride
//! `c_in`), with no im2col copy. Short ones (a few time steps) instead copy an explicit im2col
//! matrix for the whole chunk of rows so that one product reads the weights once for all rows; that
//! product is `rowdot.rs`, whose per-element summation order does not depend on the row count, so
//! a row's output is the same in every batch bucket (long ones run one same-shape GEMM per row).

use crate::gemm::MatMul;
use crate::rowdot::RowDot;
use crate::{check, math, CpuBackend};
use chorus_core::{Conv1dArgs, Result};
use rayon::prelude::*;

/// Up to this many time steps, rows are batched into one product through an explicit im2col copy
/// (for a single row too, so that it sums in the same order as in a batch).
const IM2COL_MAX_TIME: usize = 64;
/// Scratch elements one chunk of rows may use; bounds memory at large buckets.
pub(crate) const CHUNK_SCRATCH_ELEMS: usize = 4 << 20;
/// Scratch elements a chunk aims for when its weights are small: the chunk's activations then
/// stay in L2 between the input copy and the GEMM instead of streaming through memory.
const CACHE_CHUNK_ELEMS: usize = 256 << 10;
/// Elements per task when one row's input is ELU'd in parallel.
const FILL_GRAIN: usize = 16 << 10;

/// Rows per chunk: enough that re-reading the weights per chunk costs no more than the chunk's own
/// activations, few enough that those activations stay in cache when the weights are small.
pub(crate) fn chunk_rows(rows: usize, per_row: usize, weights: usize) -> usize {
    let budget = weights.clamp(CACHE_CHUNK_ELEMS, CHUNK_SCRATCH_ELEMS);
    (budget / per_row.max(1)).clamp(1, rows.max(1))
}

pub(crate) fn conv1d(be: &CpuBackend, a: Conv1dArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "conv1d";
    let g = a.geom;
    let (rows, time, ci, co, kernel, dil) = (g.rows, g.time, g.c_in, g.c_out, g.kernel, g.dilation);
    let hist = g.history();
    let len = hist + time;
    check::at_least(OP, "x", a.x.len(), rows * time * ci)?;
    check::at_least(OP, "w", a.w.len(), co * kernel * ci)?;
    check::at_least(OP, "out", a.out.len(), rows * time * co)?;
    check::at_least(OP, "slots", a.slots.len(), rows)?;
    if let Some(b) = a.bias {
        check::at_least(OP, "bias", b.len(), co)?;
    }
    if let Some(r) = a.residual {
        check::at_least(OP, "residual", r.len(), rows * time * co)?;
    }
    let state_row = hist * ci;
    let state: &mut [f32] = match a.state {
        Some(s) => &mut s.0,
        None if hist == 0 => &mut [],
        None => {
            return Err(chorus_core::Error::input(
                OP,
                "state is required when history > 0",
            ))
        }
    };
    // Stateless geometries (no history or tail) accept any slot id.
    let total_rows = state.len().checked_div(state_row).unwrap_or(usize::MAX);
    for &s in &a.slots.0[..rows] {
        check::slot(OP, s, total_rows)?;
    }
    if rows == 0 || time == 0 {
        return Ok(());
    }
    let slots = &a.slots.0[..rows];
    let x = &a.x.0[..rows * time * ci];
    let w = &a.w.0[..co * kernel * ci];
    let out = &mut a.out.0[..rows * time * co];
    let bias = a.bias.map(|b| &b.0[..co]);
    let residual = a.residual.map(|r| &r.0[..rows * time * co]);

    let batched = time <= IM2COL_MAX_TIME;
    let cols_row = if batched { time * kernel * ci } else { 0 };
    let per_row = len * ci + cols_row;
    let chunk = chunk_rows(rows, per_row, w.len());
    let ctx = Ctx {
        time,
        ci,
        co,
        kernel,
        dil,
        hist,
        elu: g.elu_input,
        threads: be.threads,
    };
    be.scratch.with(chunk * per_row, |scratch| {
        be.install(|| -> Result<()> {
            for r0 in (0..rows).step_by(chunk) {
                let n = chunk.min(rows - r0);
                let (xin, cols) = scratch.split_at_mut(chunk * len * ci);
                let xin = &mut xin[..n * len * ci];
                let sl = &slots[r0..r0 + n];
                fill_input(
                    &ctx,
                    xin,
                    &x[r0 * time * ci..(r0 + n) * time * ci],
                    state,
                    sl,
                );
                // Sequential write-back: padded rows share the dummy row, so rows may collide.
                for (r, &s) in sl.iter().enumerate() {
                    let s = s as usize;
                    let src = &xin[(r * len + time) * ci..(r + 1) * len * ci];
                    state[s * state_row..(s + 1) * state_row].copy_from_slice(src);
                }
                let o = &mut out[r0 * time * co..(r0 + n) * time * co];
                let res = residual.map(|v| &v[r0 * time * co..(r0 + n) * time * co]);
                let accumulate = prefill(o, bias, res, co);
                if batched {
                    let dst = Dst { out: o, accumulate };
                    gemm_im2col(&ctx, dst, xin, &mut cols[..n * cols_row], w);
                } else {
                    gemm_direct(&ctx, o, xin, w, accumulate)?;
                }
            }
            Ok(())
        })
    })
}

/// Sizes shared by the helpers of one call.
struct Ctx {
    time: usize,
    ci: usize,
    co: usize,
    kernel: usize,
    dil: usize,
    hist: usize,
    elu: bool,
    threads: usize,
}

/// `xin[r] = concat(state[slots[r]], f(x[r]))`; the ELU runs in parallel blocks.
fn fill_input(c: &Ctx, xin: &mut [f32], x: &[f32], state: &[f32], slots: &[i32]) {
    let (len, state_row) = (c.hist + c.time, c.hist * c.ci);
    for ((dst, src), &s) in xin
        .chunks_exact_mut(len * c.ci)
        .zip(x.chunks_exact(c.time * c.ci))
        .zip(slots)
    {
        let s = s as usize;
        let (h, body) = dst.split_at_mut(state_row);
        h.copy_from_slice(&state[s * state_row..(s + 1) * state_row]);
        if c.elu {
            body.par_chunks_mut(FILL_GRAIN)
                .zip(src.par_chunks(FILL_GRAIN))
                .for_each(|(d, x)| math::elu_into(d, x));
        } else {
            body.copy_from_slice(src);
        }
    }
}

/// Writes `bias + residual` into `out`; returns whether the GEMM must accumulate onto it.
fn prefill(out: &mut [f32], bias: Option<&[f32]>, residual: Option<&[f32]>, co: usize) -> bool {
    match (bias, residual) {
        (None, None) => false,
        (None, Some(r)) => {
            out.copy_from_slice(r);
            true
        }
        (Some(b), None) => {
            out.chunks_exact_mut(co).for_each(|o| o.copy_from_slice(b));
            true
        }
        (Some(b), Some(r)) => {
            for (o, rr) in out.chunks_exact_mut(co).zip(r.chunks_exact(co)) {
                for i in 0..co {
                    o[i] = b[i] + rr[i];
                }
            }
            true
        }
    }
}

/// One GEMM per row over the overlapping rows of `xin` (one per tap when dilated).
fn gemm_direct(c: &Ctx, out: &mut [f32], xin: &[f32], w: &[f32], accumulate: bool) -> Result<()> {
    let len = c.hist + c.time;
    let rows = out.len() / (c.time * c.co);
    let threads = if rows > 1 { 1 } else { c.threads };
    let one_row = |o: &mut [f32], xr: &[f32]| -> Result<()> {
        if c.dil == 1 {
            return MatMul {
                m: c.time,
                n: c.co,
                k: c.kernel * c.ci,
                dst: o,
                dst_rs: c.co,
                lhs: xr,
                lhs_rs: c.ci,
                lhs_cs: 1,
                rhs: w,
                rhs_rs: 1,
                rhs_cs: c.kernel * c.ci,
                accumulate,
                threads,
            }
            .run("conv1d");
        }
        for j in 0..c.kernel {
            MatMul {
                m: c.time,
                n: c.co,
                k: c.ci,
                dst: &mut *o,
                dst_rs: c.co,
                lhs: &xr[j * c.dil * c.ci..],
                lhs_rs: c.ci,
                lhs_cs: 1,
                rhs: &w[j * c.ci..],
                rhs_rs: 1,
                rhs_cs: c.kernel * c.ci,
                accumulate: accumulate || j > 0,
                threads,
            }
            .run("conv1d")?;
        }
        Ok(())
    };
    if rows == 1 {
        return one_row(out, xin);
    }
    out.par_chunks_mut(c.time * c.co)
        .zip(xin.par_chunks(len * c.ci))
        .try_for_each(|(o, xr)| one_row(o, xr))
}

/// Copies the im2col matrix of every row, then runs one row-invariant product over all of them.
/// Where a product's rows go, and whether they add to what is there (bias or residual).
struct Dst<'a> {
    out: &'a mut [f32],
    accumulate: bool,
}

fn gemm_im2col(c: &Ctx, dst: Dst<'_>, xin: &[f32], cols: &mut [f32], w: &[f32]) {
    let Dst { out, accumulate } = dst;
    let (len, kc) = (c.hist + c.time, c.kernel * c.ci);
    cols.par_chunks_mut(c.time * kc)
        .zip(xin.par_chunks(len * c.ci))
        .for_each(|(cr, xr)| {
            for t in 0..c.time {
                for j in 0..c.kernel {
                    let src = (t + j * c.dil) * c.ci;
                    let dst = t * kc + j * c.ci;
                    cr[dst..dst + c.ci].copy_from_slice(&xr[src..src + c.ci]);
                }
            }
        });
    RowDot {
        n: out.len() / c.co,
        m: c.co,
        k: kc,
        x: cols,
        x_rs: kc,
        w,
        accumulate,
        threads: c.threads,
    }
    .run(out);
}
