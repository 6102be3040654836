//! conv1d against a plain-loop f64 reference, including streaming and slot addressing.

mod common;

use chorus_core::{Backend, BufRole, Conv1dArgs, Conv1dGeom};
use chorus_cpu::CpuBackend;
use common::*;

/// Reference: `out[r, t, o] = bias + residual + sum w[o, j, i] * xin[r, t + j d, i]`, with
/// `xin = concat(hist[r], f(x[r]))`; returns the output and the new history per row.
fn reference(
    g: &Conv1dGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    hist: &[Vec<f32>],
) -> (Vec<f64>, Vec<Vec<f32>>) {
    let (t, ci, co, k, d, h) = (g.time, g.c_in, g.c_out, g.kernel, g.dilation, g.history());
    let mut out = vec![0.0; g.rows * t * co];
    let mut new_hist = Vec::new();
    for r in 0..g.rows {
        let mut xin: Vec<f32> = hist[r].clone();
        for v in &x[r * t * ci..(r + 1) * t * ci] {
            xin.push(if g.elu_input {
                elu(*v as f64) as f32
            } else {
                *v
            });
        }
        for tt in 0..t {
            for o in 0..co {
                let mut acc = bias.map_or(0.0, |b| b[o] as f64);
                acc += residual.map_or(0.0, |res| res[(r * t + tt) * co + o] as f64);
                for j in 0..k {
                    for i in 0..ci {
                        let xv = xin[(tt + j * d) * ci + i] as f64;
                        acc += w[(o * k + j) * ci + i] as f64 * xv;
                    }
                }
                out[(r * t + tt) * co + o] = acc;
            }
        }
        new_hist.push(xin[t * ci..(t + h) * ci].to_vec());
    }
    (out, new_hist)
}

struct Case {
    geom: Conv1dGeom,
    bias: bool,
    residual: bool,
    slots: Vec<i32>,
    total_rows: usize,
}

/// Runs one call from a random state and checks output, touched state rows and untouched ones.
fn check_case(be: &CpuBackend, c: &Case, seed: u64) {
    let g = c.geom;
    let mut rng = Rng::new(seed);
    let (t, ci, co, h) = (g.time, g.c_in, g.c_out, g.history());
    let x = rng.vec(g.rows * t * ci, 1.5);
    let w = rng.vec(co * g.kernel * ci, 0.3);
    let bias = rng.vec(co, 0.5);
    let residual = rng.vec(g.rows * t * co, 1.0);
    let state0 = rng.vec(c.total_rows * h * ci, 1.0);
    let hist: Vec<Vec<f32>> = c
        .slots
        .iter()
        .map(|&s| state0[s as usize * h * ci..(s as usize + 1) * h * ci].to_vec())
        .collect();
    let (want, want_hist) = reference(
        &g,
        &x,
        &w,
        c.bias.then_some(&bias[..]),
        c.residual.then_some(&residual[..]),
        &hist,
    );
    let up = |v: &[f32]| be.upload(v, BufRole::Activation).unwrap();
    let (xb, wb, bb, rb) = (up(&x), up(&w), up(&bias), up(&residual));
    let mut state = up(&state0);
    let slots = be.ints(g.rows, 0).unwrap();
    let mut slots = slots;
    for (i, &s) in c.slots.iter().enumerate() {
        be.fill_ints(&mut slots, i, s).unwrap();
    }
    let mut out = be.zeros(g.rows * t * co, BufRole::Activation).unwrap();
    be.conv1d(Conv1dArgs {
        x: &xb,
        w: &wb,
        bias: c.bias.then_some(&bb),
        state: (h > 0).then_some(&mut state),
        slots: &slots,
        residual: c.residual.then_some(&rb),
        out: &mut out,
        geom: g,
    })
    .unwrap();
    let dummy = c.total_rows - 1;
    let got = be.download(&out).unwrap();
    let live: Vec<usize> = (0..g.rows)
        .filter(|&r| c.slots[r] as usize != dummy)
        .collect();
    let pick = |v: &[f32], n: usize| -> Vec<f32> {
        live.iter()
            .flat_map(|&r| v[r * n..(r + 1) * n].to_vec())
            .collect()
    };
    let want_live: Vec<f64> = live
        .iter()
        .flat_map(|&r| want[r * t * co..(r + 1) * t * co].to_vec())
        .collect();
    assert_close(
        &format!("conv1d out {g:?}"),
        &pick(&got, t * co),
        &want_live,
    );
    let st = be.download(&state).unwrap();
    for row in 0..c.total_rows {
        let got_row = &st[row * h * ci..(row + 1) * h * ci];
        match c.slots.iter().position(|&s| s as usize == row) {
            Some(r) if row != dummy => {
                let want_row: Vec<f64> = want_hist[r].iter().map(|&v| v as f64).collect();
                assert_close("conv1d state", got_row, &want_row);
            }
            Some(_) => {}
            None => assert_eq!(
                got_row,
                &state0[row * h * ci..(row + 1) * h * ci],
                "row {row} touched"
            ),
        }
    }
}

fn geom(
    rows: usize,
    time: usize,
    c_in: usize,
    c_out: usize,
    kernel: usize,
    dilation: usize,
    elu: bool,
) -> Conv1dGeom {
    Conv1dGeom {
        rows,
        time,
        c_in,
        c_out,
        kernel,
        dilation,
        elu_input: elu,
    }
}

#[test]
fn conv1d_matches_reference_over_geometries() {
    let be = backend();
    let mut seed = 1;
    for &rows in &[1usize, 3] {
        for &time in &[1usize, 2, 16, 70] {
            for &dil in &[1usize, 2] {
                for &(elu, bias, residual) in &[
                    (false, false, false),
                    (true, true, false),
                    (true, true, true),
                    (false, false, true),
                ] {
                    for &(ci, co, k) in &[(5usize, 7usize, 3usize), (16, 8, 7), (8, 4, 1)] {
                        let slots: Vec<i32> = if rows == 1 { vec![2] } else { vec![3, 0, 1] };
                        let case = Case {
                            geom: geom(rows, time, ci, co, k, dil, elu),
                            bias,
                            residual,
                            slots,
                            total_rows: 5,
                        };
                        check_case(&be, &case, seed);
                        seed += 1;
                    }
                }
            }
        }
    }
}

/// Long rows are processed a few rows at a time (bounded scratch): chunk edges must not matter.
#[test]
fn conv1d_rows_split_into_chunks() {
    let be = backend();
    for &(elu, dil) in &[(true, 1usize), (false, 2)] {
        let case = Case {
            geom: geom(3, 2100, 64, 4, 3, dil, elu),
            bias: true,
            residual: true,
            slots: vec![2, 0, 3],
            total_rows: 5,
        };
        check_case(&be, &case, 31 + dil as u64);
    }
}

/// Long convolutions run in tiles of outputs whose windows start in the state or the input: a
/// history longer than the input (every window partly state, the new state partly old state) and
/// a length that leaves a short last tile.
#[test]
fn conv1d_tiles_with_a_history_longer_than_the_input() {
    let be = backend();
    for &(time, dil, elu) in &[(70usize, 16usize, true), (70, 16, false), (331, 9, true)] {
        let case = Case {
            geom: geom(2, time, 8, 6, 7, dil, elu),
            bias: true,
            residual: true,
            slots: vec![1, 3],
            total_rows: 5,
        };
        check_case(&be, &case, 500 + time as u64 + dil as u64);
    }
}

/// Long two-tap convolutions (the encoder's downsampling as super-columns) run their outputs in
/// pairs through three products (`pairs.rs`): even and odd tile lengths, a short last tile, every
/// prologue and epilogue.
#[test]
fn conv1d_two_taps_in_pairs_match_the_reference() {
    let be = backend();
    let mut seed = 700;
    for &time in &[65usize, 70, 331] {
        for &(elu, bias, residual) in &[
            (true, true, true),
            (false, false, false),
            (true, false, true),
        ] {
            let case = Case {
                geom: geom(2, time, 12, 9, 2, 1, elu),
                bias,
                residual,
                slots: vec![3, 1],
                total_rows: 5,
            };
            check_case(&be, &case, seed);
            seed += 1;
        }
    }
}

#[test]
fn conv1d_padded_rows_only_touch_the_dummy_row() {
    let be = backend();
    for &time in &[2usize, 100] {
        let case = Case {
            geom: geom(4, time, 6, 5, 3, 1, true),
            bias: true,
            residual: true,
            slots: vec![3, 0, 4, 4],
            total_rows: 5,
        };
        check_case(&be, &case, 77 + time as u64);
    }
}

/// Calling the op on consecutive chunks equals one call on the concatenation.
#[test]
fn conv1d_streaming_equals_one_call() {
    let be = backend();
    for &(rows, dil, elu) in &[(1usize, 1usize, true), (3, 2, false), (2, 1, false)] {
        let (ci, co, k) = (6, 5, 4);
        let chunks = [3usize, 1, 2, 80, 1];
        let total: usize = chunks.iter().sum();
        let mut rng = Rng::new(1000 + rows as u64);
        let full_g = geom(rows, total, ci, co, k, dil, elu);
        let h = full_g.history();
        let x = rng.vec(rows * total * ci, 1.0);
        let w = rng.vec(co * k * ci, 0.4);
        let bias = rng.vec(co, 0.4);
        let zero_hist = vec![vec![0.0; h * ci]; rows];
        let (want, _) = reference(&full_g, &x, &w, Some(&bias), None, &zero_hist);
        let total_rows = rows + 2;
        let mut state = be.zeros(total_rows * h * ci, BufRole::State).unwrap();
        let slots_v: Vec<i32> = (0..rows as i32).rev().map(|s| s + 1).collect();
        let mut slots = be.ints(rows, 0).unwrap();
        for (i, &s) in slots_v.iter().enumerate() {
            be.fill_ints(&mut slots, i, s).unwrap();
        }
        let (wb, bb) = (
            be.upload(&w, BufRole::Weight).unwrap(),
            be.upload(&bias, BufRole::Weight).unwrap(),
        );
        let mut got = vec![0.0f32; rows * total * co];
        let mut t0 = 0;
        for &n in &chunks {
            let mut xc = Vec::new();
            for r in 0..rows {
                xc.extend_from_slice(&x[(r * total + t0) * ci..(r * total + t0 + n) * ci]);
            }
            let xb = be.upload(&xc, BufRole::Activation).unwrap();
            let mut out = be.zeros(rows * n * co, BufRole::Activation).unwrap();
            be.conv1d(Conv1dArgs {
                x: &xb,
                w: &wb,
                bias: Some(&bb),
                state: Some(&mut state),
                slots: &slots,
                residual: None,
                out: &mut out,
                geom: geom(rows, n, ci, co, k, dil, elu),
            })
            .unwrap();
            let o = be.download(&out).unwrap();
            for r in 0..rows {
                got[(r * total + t0) * co..(r * total + t0 + n) * co]
                    .copy_from_slice(&o[r * n * co..(r + 1) * n * co]);
            }
            t0 += n;
        }
        assert_close("conv1d streamed", &got, &want);
    }
}

#[test]
fn conv1d_steady_state_does_not_grow_scratch() {
    let be = backend();
    let case = Case {
        geom: geom(3, 16, 32, 16, 3, 1, true),
        bias: true,
        residual: false,
        slots: vec![0, 1, 2],
        total_rows: 4,
    };
    check_case(&be, &case, 5);
    let after_first = be.scratch_elements();
    assert!(after_first > 0);
    check_case(&be, &case, 6);
    assert_eq!(be.scratch_elements(), after_first);
}
