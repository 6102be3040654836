//! Long dense transposed convolutions as independent tasks over tiles of input steps.
//!
//! A task for input steps `t0..t1` of a row produces outputs `t0 * stride..t1 * stride`: its own
//! steps' products, plus the overlap of the `back` steps before `t0` (recomputed: one step at
//! Mimi's `kernel = 2 * stride`), or of the slot's stored tail for the first tile. So a single row
//! keeps every thread busy, and a task's input, products and accumulator stay in L2 instead of
//! streaming a `[time, kernel * c_out]` intermediate through memory. The tile length depends on
//! the input length alone, so a row is cut the same way whatever shares its call.

use crate::buffers::PairSum;
use crate::conv::tile_len;
use crate::gemm::MatMul;
use crate::math;
use crate::pairs::{self, Pairs, Rhs, Taps};
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
pub(crate) fn row_scratch(g: &ConvTr1dGeom, paired: bool) -> usize {
    let tt = input_tile(g);
    g.time.div_ceil(tt) * Layout::of(g, tt, paired).per_task
}

/// Where a task's parts lie in its scratch.
struct Layout {
    /// Its accumulator's start (after its input and products).
    acc: usize,
    per_task: usize,
}

impl Layout {
    fn of(g: &ConvTr1dGeom, tt: usize, paired: bool) -> Self {
        let (ci, n) = (g.c_in, g.stride * g.c_out);
        if paired {
            // Blocks t0..=t1 in pairs, from the step before t0 on (`pairs_task`).
            let cap = (tt + 2) / 2;
            let acc = (2 * cap + 1) * ci + pairs::scratch_len(cap, ci, n);
            return Self {
                acc,
                per_task: acc + 2 * cap * n,
            };
        }
        let steps = tt + back(g);
        let acc = steps * ci + steps * g.kernel * g.c_out;
        Self {
            acc,
            per_task: acc + (tt * g.stride + g.tail()) * g.c_out,
        }
    }
}

/// The operands of one chunk of rows.
pub(crate) struct LongIo<'a> {
    pub g: ConvTr1dGeom,
    /// `[rows, time, c_in]`, before the ELU.
    pub x: &'a [f32],
    /// `[c_in, kernel * c_out]` with row stride `w_rs`.
    pub w: &'a [f32],
    pub w_rs: usize,
    /// The kernel's two halves summed, where `kernel == 2 * stride` runs in pairs of blocks.
    pub pair_sum: Option<&'a PairSum>,
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
    let layout = Layout::of(&g, tt, io.pair_sum.is_some());
    let (tiles, per_task) = (g.time.div_ceil(tt), layout.per_task);
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
                        let tl = Tile { r, t0, t1 };
                        let acc = match io.pair_sum {
                            Some(sum) => pairs_task(io, sum, &tl, state, tt, w)?,
                            None => task(io, &tl, state, tt, w)?,
                        };
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
        let at = r * per_row + last * per_task + layout.acc + head;
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

/// [`task`] for `kernel == 2 * stride` in pairs of output blocks (`pairs.rs`): block `q` is
/// `x[q - 1] B + x[q] A` (`A`, `B` the kernel's halves), a two-tap convolution over the input steps
/// from the one before `t0` (zero before the row's start, whose part is the stored tail) to `t1`.
fn pairs_task<'w>(
    io: &LongIo<'_>,
    sum: &PairSum,
    tl: &Tile,
    state: &[f32],
    tt: usize,
    work: &'w mut [f32],
) -> Result<&'w [f32]> {
    let g = io.g;
    let (ci, n) = (g.c_in, g.stride * g.c_out);
    let blocks = tl.t1 - tl.t0 + 1;
    let pairs = blocks.div_ceil(2);
    // The parts at the offsets of a whole tile's (`Layout`): `run` finds the last tail there.
    let cap = (tt + 2) / 2;
    let (v, rest) = work.split_at_mut((2 * cap + 1) * ci);
    let (scratch, acc) = rest.split_at_mut(pairs::scratch_len(cap, ci, n));
    let v = &mut v[..(2 * pairs + 1) * ci];
    let acc = &mut acc[..2 * pairs * n];
    // v[j] = f(x[t0 - 1 + j]) where the row has that step, else zero.
    v.fill(0.0);
    let p0 = tl.t0.saturating_sub(1);
    let src = &io.x[(tl.r * g.time + p0) * ci..(tl.r * g.time + tl.t1) * ci];
    let dst = &mut v[(p0 + 1 - tl.t0) * ci..(tl.t1 + 1 - tl.t0) * ci];
    if g.elu_input {
        math::elu_into(dst, src);
    } else {
        dst.copy_from_slice(src);
    }
    acc.fill(0.0);
    if tl.t0 == 0 {
        let slot = io.slots[tl.r] as usize;
        acc[..n].copy_from_slice(&state[slot * n..(slot + 1) * n]);
    }
    let half = |at: usize| Rhs {
        data: &io.w[at..],
        rs: io.w_rs,
        cs: 1,
    };
    let taps = Taps {
        p: half(n),
        q: half(0),
        sum: Rhs {
            data: &sum.data,
            rs: sum.stride,
            cs: 1,
        },
    };
    Pairs {
        v,
        pairs,
        k: ci,
        n,
        taps,
        accumulate: true,
    }
    .run(acc, scratch)?;
    Ok(&acc[..blocks * n])
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
