//! Stride-one causal convolution with per-slot history.
//!
//! Each row's input is laid out once as the channels-last concatenation `xin = [history + time,
//! c_in]` (state columns, then the (ELU'd) new columns). With weights `[c_out, kernel, c_in]`, the
//! im2col row of output `t` at dilation 1 is the contiguous run of `kernel * c_in` values starting at
//! row `t` of `xin`, so long convolutions are GEMMs whose lhs rows overlap (row stride `c_in`), with
//! no im2col copy. They run as independent tasks of [`time_tile`] outputs: each task builds its own
//! window of `xin` (history from the state or from the input itself, since a window's history is
//! input, not output), so a single row keeps every thread busy and the window stays in L2. Short
//! ones (a few time steps) instead copy an explicit im2col matrix for the whole chunk of rows so
//! that one product reads the weights once for all rows; that product is `rowdot.rs`, whose
//! per-element summation order does not depend on the row count, so a row's output is the same in
//! every batch bucket (long ones run the same tiles of the same shapes for a row in any batch).

use crate::buffers::PairSum;
use crate::gemm::MatMul;
use crate::pairs::{self, Pairs, Rhs, Taps};
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
/// A long convolution's row is cut into about this many tasks (both cores busy on one row)...
const TILES_PER_ROW: usize = 4;
/// ...of at least this many outputs (the product's fixed costs stay small)...
const TIME_TILE_MIN: usize = 64;
/// ...and at most this many (a task's window stays in L2).
const TIME_TILE_MAX: usize = 512;

/// Outputs per task of a long convolution of `time` steps: a function of the length alone, never
/// of the row or thread count, so that a row is cut into the same products whatever shares its call.
fn time_tile(time: usize) -> usize {
    tile_len(time, TIME_TILE_MIN, TIME_TILE_MAX)
}

/// `len` cut into about `TILES_PER_ROW` tiles, rounded up to 16 steps, within `min..=max`.
pub(crate) fn tile_len(len: usize, min: usize, max: usize) -> usize {
    (len.div_ceil(TILES_PER_ROW).div_ceil(16) * 16).clamp(min, max)
}

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
    let tt = time_tile(time);
    let tiles = time.div_ceil(tt);
    // Long two-tap convolutions (the encoder's downsampling as super-columns) run in pairs.
    let pair_sum = (!batched && kernel == 2 && dil == 1)
        .then(|| a.w.pair_sum(co, ci))
        .flatten();
    let task = (hist + tt) * ci + pair_sum.map_or(0, |_| pairs::scratch_len(tt / 2, ci, co));
    let per_row = if batched {
        len * ci + time * kernel * ci
    } else {
        tiles * task
    };
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
                let sl = &slots[r0..r0 + n];
                let xs = &x[r0 * time * ci..(r0 + n) * time * ci];
                let o = &mut out[r0 * time * co..(r0 + n) * time * co];
                let res = residual.map(|v| &v[r0 * time * co..(r0 + n) * time * co]);
                if !batched {
                    let io = TileIo {
                        x: xs,
                        state,
                        slots: sl,
                        w,
                        pair_sum,
                        bias,
                        residual: res,
                    };
                    tiled(&ctx, io, o, &mut scratch[..n * per_row])?;
                    write_back(&ctx, xs, state, sl);
                    continue;
                }
                let (xin, cols) = scratch.split_at_mut(chunk * len * ci);
                let xin = &mut xin[..n * len * ci];
                fill_input(&ctx, xin, xs, state, sl);
                // Sequential write-back: padded rows share the dummy row, so rows may collide.
                for (r, &s) in sl.iter().enumerate() {
                    let s = s as usize;
                    let src = &xin[(r * len + time) * ci..(r + 1) * len * ci];
                    state[s * state_row..(s + 1) * state_row].copy_from_slice(src);
                }
                let accumulate = prefill(o, bias, res, co);
                let dst = Dst { out: o, accumulate };
                gemm_im2col(&ctx, dst, xin, &mut cols[..n * time * kernel * ci], w);
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

/// The operands of a long convolution over one chunk of rows.
struct TileIo<'a> {
    x: &'a [f32],
    state: &'a [f32],
    slots: &'a [i32],
    w: &'a [f32],
    /// The two taps summed, where a long two-tap convolution runs in pairs.
    pair_sum: Option<&'a PairSum>,
    bias: Option<&'a [f32]>,
    residual: Option<&'a [f32]>,
}

/// A long convolution as independent tasks of `time_tile` outputs per row, in parallel: each
/// builds its window of `xin` in its part of `scratch` and runs one product (one per tap when
/// dilated, three per pair of outputs for two taps) on the calling thread.
fn tiled(c: &Ctx, io: TileIo<'_>, out: &mut [f32], scratch: &mut [f32]) -> Result<()> {
    let tt = time_tile(c.time);
    let tiles = c.time.div_ceil(tt);
    let window = (c.hist + tt) * c.ci
        + io.pair_sum
            .map_or(0, |_| pairs::scratch_len(tt / 2, c.ci, c.co));
    // Rows in parallel, and each row's tiles (the last may be shorter).
    out.par_chunks_mut(c.time * c.co)
        .zip(scratch.par_chunks_mut(tiles * window))
        .enumerate()
        .try_for_each(|(r, (o_row, s_row))| {
            o_row
                .par_chunks_mut(tt * c.co)
                .zip(s_row.par_chunks_mut(window))
                .enumerate()
                .try_for_each(|(t, (o, win))| tile(c, &io, (r, t * tt), o, win))
        })
}

/// Outputs `t0..t0 + o.len() / c_out` of row `r`.
fn tile(
    c: &Ctx,
    io: &TileIo<'_>,
    (r, t0): (usize, usize),
    o: &mut [f32],
    task: &mut [f32],
) -> Result<()> {
    let n_t = o.len() / c.co;
    // Virtual rows of xin: `hist` state rows, then the (ELU'd) input; the window is t0..t1 + hist.
    let (v0, v1) = (t0, t0 + n_t + c.hist);
    let (win, pair_scratch) = task.split_at_mut((v1 - v0) * c.ci);
    let from_state = c.hist.min(v1).saturating_sub(v0);
    if from_state > 0 {
        let s = io.slots[r] as usize * c.hist * c.ci;
        win[..from_state * c.ci]
            .copy_from_slice(&io.state[s + v0 * c.ci..s + (v0 + from_state) * c.ci]);
    }
    let x_row = &io.x[r * c.time * c.ci..(r + 1) * c.time * c.ci];
    let x0 = v0 + from_state - c.hist;
    let src = &x_row[x0 * c.ci..(v1 - c.hist) * c.ci];
    let dst = &mut win[from_state * c.ci..];
    if c.elu {
        math::elu_into(dst, src);
    } else {
        dst.copy_from_slice(src);
    }
    let span = r * c.time * c.co + t0 * c.co..r * c.time * c.co + (t0 + n_t) * c.co;
    let res = io.residual.map(|v| &v[span]);
    let accumulate = prefill(o, io.bias, res, c.co);
    if let Some(sum) = io.pair_sum {
        return two_taps(c, io.w, sum, (win, pair_scratch), o, accumulate);
    }
    let taps = if c.dil == 1 { 1 } else { c.kernel };
    // Dilation 1: one product whose lhs rows overlap; otherwise one product per tap.
    let (k, lhs_step) = if taps == 1 {
        (c.kernel * c.ci, 0)
    } else {
        (c.ci, c.dil * c.ci)
    };
    for j in 0..taps {
        MatMul {
            m: n_t,
            n: c.co,
            k,
            dst: &mut *o,
            dst_rs: c.co,
            lhs: &win[j * lhs_step..],
            lhs_rs: c.ci,
            lhs_cs: 1,
            rhs: &io.w[j * c.ci..],
            rhs_rs: 1,
            rhs_cs: c.kernel * c.ci,
            accumulate: accumulate || j > 0,
            threads: 1,
        }
        .run("conv1d")?;
    }
    Ok(())
}

/// A two-tap tile (`kernel == 2`, dilation 1): its outputs in pairs (`pairs.rs`), an odd last one
/// directly.
fn two_taps(
    c: &Ctx,
    w: &[f32],
    sum: &PairSum,
    (win, scratch): (&[f32], &mut [f32]),
    o: &mut [f32],
    accumulate: bool,
) -> Result<()> {
    let (ci, co) = (c.ci, c.co);
    let n_t = o.len() / co;
    let pairs = n_t / 2;
    // `w` is `[c_out, 2, c_in]`: tap j of output o at `o * 2 c_in + j c_in`.
    let tap = |j: usize| Rhs {
        data: &w[j * ci..],
        rs: 1,
        cs: 2 * ci,
    };
    let taps = Taps {
        p: tap(0),
        q: tap(1),
        sum: Rhs {
            data: &sum.data,
            rs: 1,
            cs: sum.stride,
        },
    };
    Pairs {
        v: &win[..(2 * pairs + 1) * ci],
        pairs,
        k: ci,
        n: co,
        taps,
        accumulate,
    }
    .run(o, scratch)?;
    if n_t % 2 == 1 {
        MatMul {
            m: 1,
            n: co,
            k: 2 * ci,
            dst: &mut o[(n_t - 1) * co..],
            dst_rs: co,
            lhs: &win[(n_t - 1) * ci..],
            lhs_rs: ci,
            lhs_cs: 1,
            rhs: w,
            rhs_rs: 1,
            rhs_cs: 2 * ci,
            accumulate,
            threads: 1,
        }
        .run("conv1d")?;
    }
    Ok(())
}

/// New history of each row: the last `hist` virtual rows of its xin (old state rows while the
/// input is shorter than the history). Sequential: padded rows share the dummy row.
fn write_back(c: &Ctx, x: &[f32], state: &mut [f32], slots: &[i32]) {
    let (hist, ci) = (c.hist, c.ci);
    if hist == 0 {
        return;
    }
    for (r, &s) in slots.iter().enumerate() {
        let st = &mut state[s as usize * hist * ci..(s as usize + 1) * hist * ci];
        let kept = hist.saturating_sub(c.time);
        // Old rows kept move to the front (forward copy: the source lies after the destination).
        st.copy_within(c.time.min(hist) * ci.., 0);
        let x_row = &x[r * c.time * ci..(r + 1) * c.time * ci];
        let src = &x_row[(c.time - (hist - kept)) * ci..];
        if c.elu {
            math::elu_into(&mut st[kept * ci..], src);
        } else {
            st[kept * ci..].copy_from_slice(src);
        }
    }
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
