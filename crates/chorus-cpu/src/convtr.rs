//! Streaming transposed convolution (dense through products, depthwise as a direct loop).
//!
//! Dense: `y[t] = f(x[t]) @ W` with `W = [c_in, kernel * c_out]` gives, for each input step, the
//! `kernel` output columns it touches; they are overlap-added at stride `stride` into a per-row
//! accumulator `[time * stride + tail, c_out]` that starts from the slot's stored tail. The first
//! `time * stride` columns plus bias are the output; the rest is the new bias-free tail. For short
//! inputs the product runs on a cached transpose of `W` through `rowdot.rs`, so that a row's output
//! does not depend on how many rows share the call; long ones run as tiles of input steps
//! (`convtr_long.rs`), cut the same way for a row in any batch.

use crate::conv::chunk_rows;
use crate::convtr_long::{self, LongIo};
use crate::rowdot::RowDot;
use crate::{check, math, CpuBackend};
use chorus_core::{ConvTr1dArgs, ConvTr1dGeom, Error, Result};
use rayon::prelude::*;

pub(crate) fn conv_tr1d(be: &CpuBackend, a: ConvTr1dArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "conv_tr1d";
    let g = a.geom;
    let (rows, time, ci, co, kernel, stride) =
        (g.rows, g.time, g.c_in, g.c_out, g.kernel, g.stride);
    if stride == 0 || kernel < stride || (g.depthwise && ci != co) {
        return Err(Error::input(
            OP,
            format!(
                "unsupported geometry {g:?} (need kernel >= stride > 0, depthwise c_in == c_out)"
            ),
        ));
    }
    let tail = g.tail();
    let w_len = if g.depthwise {
        co * kernel
    } else {
        ci * kernel * co
    };
    check::at_least(OP, "x", a.x.len(), rows * time * ci)?;
    check::at_least(OP, "w", a.w.len(), w_len)?;
    check::at_least(OP, "out", a.out.len(), rows * time * stride * co)?;
    check::at_least(OP, "slots", a.slots.len(), rows)?;
    if let Some(b) = a.bias {
        check::at_least(OP, "bias", b.len(), co)?;
    }
    let state_row = tail * co;
    // Stateless geometries (no history or tail) accept any slot id.
    let total_rows = a.state.len().checked_div(state_row).unwrap_or(usize::MAX);
    for &s in &a.slots.0[..rows] {
        check::slot(OP, s, total_rows)?;
    }
    if rows == 0 || time == 0 {
        return Ok(());
    }
    let ctx = Ctx {
        g,
        tail,
        acc_row: (time * stride + tail) * co,
        threads: be.threads,
    };
    let x = &a.x.0[..rows * time * ci];
    let kco = kernel * co;
    let transposed = (!g.depthwise && time <= ROW_INVARIANT_MAX_TIME)
        .then(|| a.w.transposed(ci, kco))
        .flatten();
    let out = &mut a.out.0[..rows * time * stride * co];
    let bias = a.bias.map(|b| &b.0[..co]);
    let slots = &a.slots.0[..rows];
    let state = &mut a.state.0;
    if !g.depthwise && transposed.is_none() {
        let (wc, w_rs) = match a.w.padded(ci, kco) {
            Some(p) => (&p.data[..], p.stride),
            None => (&a.w.0[..w_len], kco),
        };
        // Long inputs: tiles of input steps as independent tasks (`convtr_long.rs`), in pairs
        // of output blocks where the kernel is two strides.
        let pair_sum = (kernel == 2 * stride)
            .then(|| a.w.pair_sum(ci, stride * co))
            .flatten();
        let per_row = convtr_long::row_scratch(&g, pair_sum.is_some());
        let chunk = chunk_rows(rows, per_row, w_len);
        return be.scratch.with(chunk * per_row, |scratch| {
            be.install(|| -> Result<()> {
                for r0 in (0..rows).step_by(chunk) {
                    let n = chunk.min(rows - r0);
                    let io = LongIo {
                        g,
                        x: &x[r0 * time * ci..(r0 + n) * time * ci],
                        w: wc,
                        w_rs,
                        pair_sum,
                        bias,
                        slots: &slots[r0..r0 + n],
                    };
                    let o = &mut out[r0 * time * stride * co..(r0 + n) * time * stride * co];
                    convtr_long::run(&io, o, state, scratch)?;
                }
                Ok(())
            })
        });
    }

    let xe_row = if g.elu_input { time * ci } else { 0 };
    let y_row = if g.depthwise { 0 } else { time * kernel * co };
    let per_row = xe_row + y_row + ctx.acc_row;
    let chunk = chunk_rows(rows, per_row, w_len);
    let wt_len = if g.depthwise { kernel * co } else { 0 };
    // The dense short form's weights, `[kernel * c_out, c_in]` (unused when depthwise).
    let w_rows = transposed.map_or(&[][..], |t| &t.data[..]);
    be.scratch.with(chunk * per_row + wt_len, |scratch| {
        let (wt, scratch) = scratch.split_at_mut(wt_len);
        if g.depthwise {
            // [c_out, kernel] -> [kernel, c_out] so that the inner loop runs over channels.
            for c in 0..co {
                for j in 0..kernel {
                    wt[j * co + c] = a.w.0[c * kernel + j];
                }
            }
        }
        let (xe_all, rest) = scratch.split_at_mut(chunk * xe_row);
        let (y_all, acc_all) = rest.split_at_mut(chunk * y_row);
        be.install(|| -> Result<()> {
            for r0 in (0..rows).step_by(chunk) {
                let n = chunk.min(rows - r0);
                let xs = &x[r0 * time * ci..(r0 + n) * time * ci];
                let xin: &[f32] = if g.elu_input {
                    let xe = &mut xe_all[..n * xe_row];
                    xe.par_chunks_mut(xe_row)
                        .zip(xs.par_chunks(xe_row))
                        .for_each(|(d, s)| math::elu_into(d, s));
                    xe
                } else {
                    xs
                };
                let mut ch = Chunk {
                    slots: &slots[r0..r0 + n],
                    xin,
                    acc: &mut acc_all[..n * ctx.acc_row],
                };
                if g.depthwise {
                    depthwise(&ctx, &mut ch, wt, state);
                } else {
                    dense(&ctx, &mut ch, &mut y_all[..n * y_row], w_rows, state);
                }
                let o = &mut out[r0 * time * stride * co..(r0 + n) * time * stride * co];
                finish(&ctx, &ch, o, bias, state);
            }
            Ok(())
        })
    })
}

/// Up to this many input steps a dense transposed convolution runs through `rowdot.rs` on the
/// transposed weights, whose per-element order does not depend on the row count.
const ROW_INVARIANT_MAX_TIME: usize = 64;

/// Geometry of one call plus derived sizes.
struct Ctx {
    g: ConvTr1dGeom,
    tail: usize,
    acc_row: usize,
    threads: usize,
}

/// Starts a row's accumulator from the slot's stored tail, zeros elsewhere.
fn seed_acc(c: &Ctx, acc: &mut [f32], state: &[f32], slot: i32) {
    let st = c.tail * c.g.c_out;
    let s = slot as usize;
    acc[..st].copy_from_slice(&state[s * st..(s + 1) * st]);
    acc[st..].fill(0.0);
}

/// A chunk of rows: their slot ids, their (ELU'd) input, and their accumulators (stored tail
/// plus this step's contributions).
struct Chunk<'a> {
    slots: &'a [i32],
    xin: &'a [f32],
    acc: &'a mut [f32],
}

/// A short dense input (up to `ROW_INVARIANT_MAX_TIME` steps): one row-invariant product on the
/// transposed weights `wt`, then the overlap-add of each row's steps onto its stored tail.
fn dense(c: &Ctx, ch: &mut Chunk<'_>, y: &mut [f32], wt: &[f32], state: &[f32]) {
    let (slots, xin, acc) = (ch.slots, ch.xin, &mut *ch.acc);
    let g = c.g;
    let kco = g.kernel * g.c_out;
    RowDot {
        n: slots.len() * g.time,
        m: kco,
        k: g.c_in,
        x: xin,
        x_rs: g.c_in,
        w: wt,
        accumulate: false,
        threads: c.threads,
    }
    .run(y);
    let step = g.stride * g.c_out;
    acc.par_chunks_mut(c.acc_row)
        .zip(y.par_chunks(g.time * kco))
        .zip(slots.par_iter())
        .for_each(|((ar, yr), &s)| {
            seed_acc(c, ar, state, s);
            for t in 0..g.time {
                math::axpy(
                    &mut ar[t * step..t * step + kco],
                    1.0,
                    &yr[t * kco..(t + 1) * kco],
                );
            }
        });
}

fn depthwise(c: &Ctx, ch: &mut Chunk<'_>, wt: &[f32], state: &[f32]) {
    let (slots, xin, acc) = (ch.slots, ch.xin, &mut *ch.acc);
    let g = c.g;
    let co = g.c_out;
    acc.par_chunks_mut(c.acc_row)
        .zip(xin.par_chunks(g.time * co))
        .zip(slots.par_iter())
        .for_each(|((ar, xr), &s)| {
            seed_acc(c, ar, state, s);
            for t in 0..g.time {
                let xt = &xr[t * co..(t + 1) * co];
                for j in 0..g.kernel {
                    let at = (t * g.stride + j) * co;
                    let (dst, wj) = (&mut ar[at..at + co], &wt[j * co..(j + 1) * co]);
                    for i in 0..co {
                        dst[i] += xt[i] * wj[i];
                    }
                }
            }
        });
}

/// Output = accumulator head + bias (rows in parallel); new tail = accumulator rest (in row order,
/// since padded rows share the dummy row).
fn finish(c: &Ctx, ch: &Chunk<'_>, out: &mut [f32], bias: Option<&[f32]>, state: &mut [f32]) {
    let (slots, acc) = (ch.slots, &*ch.acc);
    let co = c.g.c_out;
    let head = c.g.time * c.g.stride * co;
    out.par_chunks_mut(head)
        .zip(acc.par_chunks(c.acc_row))
        .for_each(|(o, ar)| convtr_long::write_out(bias, co, ar, o));
    let st = c.tail * co;
    for (ar, &s) in acc.chunks_exact(c.acc_row).zip(slots) {
        let s = s as usize;
        state[s * st..(s + 1) * st].copy_from_slice(&ar[head..]);
    }
}
