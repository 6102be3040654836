//! conv_tr1d against a full transposed convolution in f64, dense and depthwise, streamed.

mod common;

use chorus_core::{Backend, BufRole, ConvTr1dArgs, ConvTr1dGeom};
use chorus_cpu::CpuBackend;
use common::*;

/// Full transposed convolution of `f(x)` for one row: `[time * stride + tail, c_out]`, no bias.
fn full_convtr(g: &ConvTr1dGeom, x: &[f32], w: &[f32], time: usize) -> Vec<f64> {
    let (ci, co, k, s) = (g.c_in, g.c_out, g.kernel, g.stride);
    let mut y = vec![0.0; (time * s + g.tail()) * co];
    for t in 0..time {
        for j in 0..k {
            for o in 0..co {
                let at = (t * s + j) * co + o;
                if g.depthwise {
                    let xv = x[t * ci + o] as f64;
                    let xv = if g.elu_input { elu(xv) } else { xv };
                    y[at] += xv * w[o * k + j] as f64;
                } else {
                    for i in 0..ci {
                        let xv = x[t * ci + i] as f64;
                        let xv = if g.elu_input { elu(xv) } else { xv };
                        y[at] += xv * w[(i * k + j) * co + o] as f64;
                    }
                }
            }
        }
    }
    y
}

struct Case {
    rows: usize,
    c_in: usize,
    c_out: usize,
    kernel: usize,
    stride: usize,
    depthwise: bool,
    elu: bool,
    bias: bool,
    slots: Vec<i32>,
    total_rows: usize,
    chunks: Vec<usize>,
}

/// Streams `chunks` through the op and compares the concatenated output with the full
/// transposed convolution (plus bias) trimmed to `total_time * stride`, starting from zero tails;
/// rows not named by `slots` must stay untouched.
fn check(be: &CpuBackend, c: &Case, seed: u64) {
    let mut rng = Rng::new(seed);
    let total: usize = c.chunks.iter().sum();
    let g_of = |time| ConvTr1dGeom {
        rows: c.rows,
        time,
        c_in: c.c_in,
        c_out: c.c_out,
        kernel: c.kernel,
        stride: c.stride,
        depthwise: c.depthwise,
        elu_input: c.elu,
    };
    let g = g_of(total);
    let (ci, co, s, tail) = (c.c_in, c.c_out, c.stride, g.tail());
    let x = rng.vec(c.rows * total * ci, 1.5);
    let w_len = if c.depthwise {
        co * c.kernel
    } else {
        ci * c.kernel * co
    };
    let w = rng.vec(w_len, 0.3);
    let bias = rng.vec(co, 0.5);
    let mut state0 = rng.vec(c.total_rows * tail * co, 1.0);
    for &sl in &c.slots {
        state0[sl as usize * tail * co..(sl as usize + 1) * tail * co].fill(0.0);
    }
    let dummy = c.total_rows - 1;
    let mut want = Vec::new();
    let mut want_tail = Vec::new();
    for r in 0..c.rows {
        let y = full_convtr(&g, &x[r * total * ci..(r + 1) * total * ci], &w, total);
        for (i, v) in y[..total * s * co].iter().enumerate() {
            want.push(v + if c.bias { bias[i % co] as f64 } else { 0.0 });
        }
        want_tail.push(y[total * s * co..].to_vec());
    }
    let up = |v: &[f32]| be.upload(v, BufRole::Activation).unwrap();
    let (wb, bb) = (up(&w), up(&bias));
    let mut state = up(&state0);
    let mut slots = be.ints(c.rows, 0).unwrap();
    for (i, &sl) in c.slots.iter().enumerate() {
        be.fill_ints(&mut slots, i, sl).unwrap();
    }
    let mut got = vec![0.0f32; c.rows * total * s * co];
    let mut t0 = 0;
    for &n in &c.chunks {
        let mut xc = Vec::new();
        for r in 0..c.rows {
            xc.extend_from_slice(&x[(r * total + t0) * ci..(r * total + t0 + n) * ci]);
        }
        let xb = up(&xc);
        let mut out = be.zeros(c.rows * n * s * co, BufRole::Activation).unwrap();
        be.conv_tr1d(ConvTr1dArgs {
            x: &xb,
            w: &wb,
            bias: c.bias.then_some(&bb),
            state: &mut state,
            slots: &slots,
            out: &mut out,
            geom: g_of(n),
        })
        .unwrap();
        let o = be.download(&out).unwrap();
        for r in 0..c.rows {
            let at = (r * total + t0) * s * co;
            got[at..at + n * s * co].copy_from_slice(&o[r * n * s * co..(r + 1) * n * s * co]);
        }
        t0 += n;
    }
    let row_len = total * s * co;
    let live: Vec<usize> = (0..c.rows)
        .filter(|&r| c.slots[r] as usize != dummy)
        .collect();
    let got_live: Vec<f32> = live
        .iter()
        .flat_map(|&r| got[r * row_len..(r + 1) * row_len].to_vec())
        .collect();
    let want_live: Vec<f64> = live
        .iter()
        .flat_map(|&r| want[r * row_len..(r + 1) * row_len].to_vec())
        .collect();
    assert_close(&format!("conv_tr1d {g:?}"), &got_live, &want_live);
    let st = be.download(&state).unwrap();
    for row in 0..c.total_rows {
        let got_row = &st[row * tail * co..(row + 1) * tail * co];
        match c.slots.iter().position(|&sl| sl as usize == row) {
            Some(r) if row != dummy => assert_close("conv_tr1d tail", got_row, &want_tail[r]),
            Some(_) => {}
            None => assert_eq!(
                got_row,
                &state0[row * tail * co..(row + 1) * tail * co],
                "row {row} touched"
            ),
        }
    }
}

#[test]
fn conv_tr1d_matches_reference_streamed() {
    let be = backend();
    let mut seed = 10;
    for &depthwise in &[false, true] {
        for &(rows, ref slots) in &[(1usize, vec![2i32]), (3, vec![3, 0, 1])] {
            for &(elu, bias) in &[(false, false), (true, true), (true, false)] {
                for &(k, s) in &[(4usize, 2usize), (16, 8), (5, 2), (3, 3)] {
                    for chunks in [vec![1usize], vec![2, 2], vec![16], vec![1, 3, 2, 1]] {
                        let (ci, co) = if depthwise { (6, 6) } else { (5, 7) };
                        let case = Case {
                            rows,
                            c_in: ci,
                            c_out: co,
                            kernel: k,
                            stride: s,
                            depthwise,
                            elu,
                            bias,
                            slots: slots.clone(),
                            total_rows: 5,
                            chunks,
                        };
                        check(&be, &case, seed);
                        seed += 1;
                    }
                }
            }
        }
    }
}

/// Long inputs run as tiles of input steps that recompute the steps before them (`back` of 2
/// for kernel 5 at stride 2, 39 for kernel 40 at stride 1, none without a tail): every tile
/// edge, streamed across calls.
#[test]
fn conv_tr1d_long_inputs_in_tiles_match_the_reference() {
    let be = backend();
    let mut seed = 700;
    for &(rows, ref slots) in &[(1usize, vec![2i32]), (3, vec![3, 0, 1])] {
        for &(k, s) in &[(4usize, 2usize), (16, 8), (5, 2), (3, 3), (40, 1)] {
            for &(elu, bias) in &[(true, true), (false, false)] {
                let case = Case {
                    rows,
                    c_in: 9,
                    c_out: 6,
                    kernel: k,
                    stride: s,
                    depthwise: false,
                    elu,
                    bias,
                    slots: slots.clone(),
                    total_rows: 5,
                    chunks: vec![70, 1, 333, 65],
                };
                check(&be, &case, seed);
                seed += 1;
            }
        }
    }
}

/// Rows with large outputs are processed one chunk at a time: chunk edges must not matter.
#[test]
fn conv_tr1d_rows_split_into_chunks() {
    let be = backend();
    for &depthwise in &[false, true] {
        let case = Case {
            rows: 3,
            c_in: 64,
            // Dense: 8 * 72 output columns span two blocks of the few-row kernel.
            c_out: if depthwise { 64 } else { 72 },
            kernel: 8,
            stride: 4,
            depthwise,
            elu: true,
            bias: true,
            slots: vec![1, 3, 0],
            total_rows: 5,
            chunks: if depthwise {
                vec![1500, 700]
            } else {
                vec![300, 1]
            },
        };
        check(&be, &case, 123);
    }
}

#[test]
fn conv_tr1d_padded_rows_only_touch_the_dummy_row() {
    let be = backend();
    for &depthwise in &[false, true] {
        let case = Case {
            rows: 4,
            c_in: 8,
            c_out: 8,
            kernel: 8,
            stride: 4,
            depthwise,
            elu: true,
            bias: true,
            slots: vec![4, 2, 4, 0],
            total_rows: 5,
            chunks: vec![2, 1, 5],
        };
        check(&be, &case, 99);
    }
}
