//! Long dense transposed convolutions as independent tasks over tiles of input steps.
//!
//! A task for input steps `t0..t1` of a row produces outputs `t0 * stride..t1 * stride`: its own
//! steps' products, plus the overlap of the `back` steps before `t0` (recomputed: one step at
//! Mimi's `kernel = 2 * stride`), or of the slot's stored tail for the first tile. So a single row
//! keeps every thread busy, and a task's input, products and accumulator stay in L2 instead of
//! streaming a `[time, kernel * c_out]` intermediate through memory. The tile length depends on
//! the input length alone, so a row is cut the same way whatever shares its call.

use crate::conv::tile_len;
use crate::gemm::MatMul;
use crate::math;
use chorus_core::{ConvTr1dGeom, Result};
use rayon::prelude::*;

/// A row's tasks (about `conv::TILES_PER_ROW` of them) have at least this many input steps...
const TILE_MIN: usize = 32;
/// ...and at most this many (a task's products of `kernel * c_out` columns stay in L2).
const TILE_MAX: usize = 256;

/// Input steps per task: a function of the geometry alone, and never fewer than `back`, so that
/// only the first tile's outputs reach back into the stored tail.
pub(crate) fn input_tile(g: &ConvTr1dGeom) -> usize {
    tile_len(g.time, TILE_MIN, TILE_MAX).max(back(g))
}

/// Earlier input steps whose kernels reach into a tile's outputs.
fn back(g: &ConvTr1dGeom) -> usize {
    g.tail().div_ceil(g.stride)
}

/// Scratch elements one row needs: per task its (ELU'd) input, products and accumulator.
pub(crate) fn row_scratch(g: &ConvTr1dGeom) -> usize {
    let tt = input_tile(g);
    g.time.div_ceil(tt) * task_scratch(g, tt)
}

fn task_scratch(g: &ConvTr1dGeom, tt: usize) -> usize {
    acc_offset(g, tt) + (tt * g.stride + g.tail()) * g.c_out
}

/// Where a task's accumulator starts in its scratch (after its input and products).
fn acc_offset(g: &ConvTr1dGeom, tt: usize) -> usize {
    let steps = tt + back(g);
    steps * g.c_in + steps * g.kernel * g.c_out
}

/// The operands of one chunk of rows.
pub(crate) struct LongIo<'a> {
    pub g: ConvTr1dGeom,
    /// `[rows, time, c_in]`, before the ELU.
    pub x: &'a [f32],
    /// `[c_in, kernel * c_out]` with row stride `w_rs`.
    pub w: &'a [f32],
    pub w_rs: usize,
    pub bias: Option<&'a [f32]>,
    pub slots: &'a [i32],
}

/// Every row of the chunk into `out` (`[rows, time * stride, c_out]`), then each row's new tail
/// into `state`.
pub(crate) fn run(
    io: &LongIo<'_>,
    out: &mut [f32],
    state: &mut [f32],
    scratch: &mut [f32],
) -> Result<()> {
    let g = io.g;
    let (co, s) = (g.c_out, g.stride);
    let tt = input_tile(&g);
    let (tiles, per_task) = (g.time.div_ceil(tt), task_scratch(&g, tt));
    let per_row = tiles * per_task;
    let work = &mut scratch[..io.slots.len() * per_row];
    {
        let state: &[f32] = state;
        out.par_chunks_mut(g.time * s * co)
            .zip(work.par_chunks_mut(per_row))
            .enumerate()
            .try_for_each(|(r, (o_row, w_row))| {
                o_row
                    .par_chunks_mut(tt * s * co)
                    .zip(w_row.par_chunks_mut(per_task))
                    .enumerate()
                    .try_for_each(|(t, (o, w))| {
                        let t0 = t * tt;
                        let t1 = (t0 + tt).min(g.time);
                        let acc = task(io, &Tile { r, t0, t1 }, state, tt, w)?;
                        write_out(io.bias, co, acc, o);
                        Ok(())
                    })
            })?;
    }
    // New tails: the rest of each row's last accumulator, in row order (padded rows share the
    // dummy row).
    let last = tiles - 1;
    let head = (g.time - last * tt) * s * co;
    let st = g.tail() * co;
    for (r, &slot) in io.slots.iter().enumerate() {
        let at = r * per_row + last * per_task + acc_offset(&g, tt) + head;
        let slot = slot as usize;
        state[slot * st..(slot + 1) * st].copy_from_slice(&work[at..at + st]);
    }
    Ok(())
}

/// Input steps `t0..t1` of row `r`.
struct Tile {
    r: usize,
    t0: usize,
    t1: usize,
}

/// Fills the task's accumulator for outputs `t0 * stride..t1 * stride + tail` (bias-free) and
/// returns it.
fn task<'w>(
    io: &LongIo<'_>,
    tl: &Tile,
    state: &[f32],
    tt: usize,
    work: &'w mut [f32],
) -> Result<&'w [f32]> {
    let g = io.g;
    let (ci, co, s, kco) = (g.c_in, g.c_out, g.stride, g.kernel * g.c_out);
    let p0 = tl.t0.saturating_sub(back(&g));
    let steps = tl.t1 - p0;
    let cap = tt + back(&g);
    let (xin, rest) = work.split_at_mut(cap * ci);
    let (y, acc) = rest.split_at_mut(cap * kco);
    let (xin, y) = (&mut xin[..steps * ci], &mut y[..steps * kco]);
    let acc = &mut acc[..((tl.t1 - tl.t0) * s + g.tail()) * co];
    let src = &io.x[(tl.r * g.time + p0) * ci..(tl.r * g.time + tl.t1) * ci];
    if g.elu_input {
        math::elu_into(xin, src);
    } else {
        xin.copy_from_slice(src);
    }
    MatMul {
        m: steps,
        n: kco,
        k: ci,
        dst: y,
        dst_rs: kco,
        lhs: xin,
        lhs_rs: ci,
        lhs_cs: 1,
        rhs: io.w,
        rhs_rs: io.w_rs,
        rhs_cs: 1,
        accumulate: false,
        threads: 1,
    }
    .run("conv_tr1d")?;
    acc.fill(0.0);
    if tl.t0 == 0 {
        let st = g.tail() * co;
        let slot = io.slots[tl.r] as usize;
        acc[..st].copy_from_slice(&state[slot * st..(slot + 1) * st]);
    }
    // Step p covers outputs p * s..p * s + kernel; the accumulator starts at output t0 * s.
    let base = tl.t0 * s;
    for (i, yp) in y.chunks_exact(kco).enumerate() {
        let first = (p0 + i) * s;
        let skip = base.saturating_sub(first);
        let at = first + skip - base;
        math::axpy(
            &mut acc[at * co..(at + g.kernel - skip) * co],
            1.0,
            &yp[skip * co..],
        );
    }
    Ok(acc)
}

/// Writes `out.len()` outputs: the accumulator's head plus bias.
pub(crate) fn write_out(bias: Option<&[f32]>, co: usize, acc: &[f32], out: &mut [f32]) {
    let head = out.len();
    match bias {
        Some(b) => {
            for (oc, ac) in out.chunks_exact_mut(co).zip(acc[..head].chunks_exact(co)) {
                for i in 0..co {
                    oc[i] = ac[i] + b[i];
                }
            }
        }
        None => out.copy_from_slice(&acc[..head]),
    }
}
