//! Batch invariance: a row's result must not depend on how many other rows share the call, so a
//! decode stream's output is the same bit for bit in every batch bucket.

mod common;

use chorus_core::{
    Backend, BufRole, Conv1dArgs, Conv1dGeom, ConvTr1dArgs, ConvTr1dGeom, LinearArgs,
};
use chorus_cpu::{CpuBackend, CpuBuf};
use common::*;

/// Largest lhs row count the linear check covers (35 streams of 2 tokens, past every bucket edge).
const LINEAR_MAX_ROWS: usize = 70;
/// Every row count up to this one is checked for the convolutions...
const CONV_MAX_ROWS: usize = 9;
/// ...and these larger batch buckets too (long convolutions use `gemm`, whose blocking changes
/// with the total row count).
const CONV_BIG_ROWS: [usize; 2] = [16, 32];

fn upload(be: &CpuBackend, v: &[f32]) -> CpuBuf {
    be.upload(v, BufRole::Activation).unwrap()
}

fn linear_rows(be: &CpuBackend, x: &CpuBuf, w: &CpuBuf, n: usize, k: usize, m: usize) -> Vec<f32> {
    let mut out = be.zeros(n * m, BufRole::Activation).unwrap();
    be.linear(LinearArgs {
        x,
        w,
        out: &mut out,
        n,
        k,
        m,
    })
    .unwrap();
    be.download(&out).unwrap()
}

#[test]
fn linear_rows_do_not_depend_on_the_row_count() {
    let be = backend();
    let mut rng = Rng::new(31);
    for &(k, m) in &[(512usize, 1536usize), (2048, 512)] {
        let x = rng.vec(LINEAR_MAX_ROWS * k, 1.0);
        let w = upload(&be, &rng.vec(m * k, 0.1));
        let alone: Vec<Vec<f32>> = x
            .chunks_exact(k)
            .map(|row| linear_rows(&be, &upload(&be, row), &w, 1, k, m))
            .collect();
        let xb = upload(&be, &x);
        for n in 1..=LINEAR_MAX_ROWS {
            let got = linear_rows(&be, &xb, &w, n, k, m);
            for (i, row) in got.chunks_exact(m).enumerate() {
                assert!(
                    row == alone[i].as_slice(),
                    "k {k} m {m}: row {i} of {n} differs from the same row alone"
                );
            }
        }
    }
}

/// Runs one conv1d with `rows` copies of the same input row and the same history per slot.
fn conv_copies(
    be: &CpuBackend,
    g: Conv1dGeom,
    x_row: &[f32],
    hist_row: &[f32],
    w: &CpuBuf,
    b: &CpuBuf,
) -> Vec<f32> {
    let rows = g.rows;
    let x = upload(be, &x_row.repeat(rows));
    let mut state = upload(be, &hist_row.repeat(rows + 1));
    let slots = be.ints(rows, 0).unwrap();
    let mut slots = slots;
    for r in 0..rows {
        be.fill_ints(&mut slots, r, r as i32).unwrap();
    }
    let mut out = be
        .zeros(rows * g.time * g.c_out, BufRole::Activation)
        .unwrap();
    be.conv1d(Conv1dArgs {
        x: &x,
        w,
        bias: Some(b),
        state: (g.history() > 0).then_some(&mut state),
        slots: &slots,
        residual: None,
        out: &mut out,
        geom: g,
    })
    .unwrap();
    be.download(&out).unwrap()
}

#[test]
fn conv1d_rows_do_not_depend_on_the_row_count() {
    let be = backend();
    let mut rng = Rng::new(32);
    // (time, c_in, c_out, kernel): the Mimi decoder's shortest and longest convolutions.
    for &(time, ci, co, kernel) in &[
        (2usize, 512usize, 1024usize, 7usize),
        (16, 512, 256, 3),
        (96, 256, 128, 3),
        (1920, 64, 32, 3),
    ] {
        let g1 = Conv1dGeom {
            rows: 1,
            time,
            c_in: ci,
            c_out: co,
            kernel,
            dilation: 1,
            elu_input: true,
        };
        let x_row = rng.vec(time * ci, 1.0);
        let hist_row = rng.vec(g1.history() * ci, 1.0);
        let w = upload(&be, &rng.vec(co * kernel * ci, 0.05));
        let b = upload(&be, &rng.vec(co, 0.1));
        let alone = conv_copies(&be, g1, &x_row, &hist_row, &w, &b);
        for rows in (1..=CONV_MAX_ROWS).chain(CONV_BIG_ROWS) {
            let got = conv_copies(&be, Conv1dGeom { rows, ..g1 }, &x_row, &hist_row, &w, &b);
            for (r, row) in got.chunks_exact(time * co).enumerate() {
                assert!(
                    row == alone.as_slice(),
                    "conv {ci}->{co} k{kernel} t{time}: row {r} of {rows} differs from the row alone"
                );
            }
        }
    }
}

/// Runs one conv_tr1d with `rows` copies of the same input row and the same tail per slot.
fn convtr_copies(
    be: &CpuBackend,
    g: ConvTr1dGeom,
    x_row: &[f32],
    tail_row: &[f32],
    w: &CpuBuf,
    b: &CpuBuf,
) -> Vec<f32> {
    let rows = g.rows;
    let x = upload(be, &x_row.repeat(rows));
    let mut state = upload(be, &tail_row.repeat(rows + 1));
    let mut slots = be.ints(rows, 0).unwrap();
    for r in 0..rows {
        be.fill_ints(&mut slots, r, r as i32).unwrap();
    }
    let mut out = be
        .zeros(rows * g.time * g.stride * g.c_out, BufRole::Activation)
        .unwrap();
    be.conv_tr1d(ConvTr1dArgs {
        x: &x,
        w,
        bias: (!g.depthwise).then_some(b),
        state: &mut state,
        slots: &slots,
        out: &mut out,
        geom: g,
    })
    .unwrap();
    be.download(&out).unwrap()
}

#[test]
fn conv_tr1d_rows_do_not_depend_on_the_row_count() {
    let be = backend();
    let mut rng = Rng::new(33);
    // (time, c_in, c_out, kernel, stride, depthwise): Mimi's transposed convolutions.
    for &(time, ci, co, kernel, stride, depthwise) in &[
        (2usize, 1024usize, 512usize, 16usize, 8usize, false),
        (16, 512, 256, 12, 6, false),
        (96, 256, 128, 10, 5, false),
        (480, 128, 64, 8, 4, false),
        (1, 512, 512, 4, 2, true),
    ] {
        let g1 = ConvTr1dGeom {
            rows: 1,
            time,
            c_in: ci,
            c_out: co,
            kernel,
            stride,
            depthwise,
            elu_input: !depthwise,
        };
        let x_row = rng.vec(time * ci, 1.0);
        let tail_row = rng.vec(g1.tail() * co, 1.0);
        let w_len = if depthwise {
            co * kernel
        } else {
            ci * kernel * co
        };
        let w = upload(&be, &rng.vec(w_len, 0.05));
        let b = upload(&be, &rng.vec(co, 0.1));
        let alone = convtr_copies(&be, g1, &x_row, &tail_row, &w, &b);
        for rows in (1..=CONV_MAX_ROWS).chain(CONV_BIG_ROWS) {
            let got = convtr_copies(&be, ConvTr1dGeom { rows, ..g1 }, &x_row, &tail_row, &w, &b);
            for (r, row) in got.chunks_exact(time * stride * co).enumerate() {
                assert!(
                    row == alone.as_slice(),
                    "convtr {ci}->{co} k{kernel} s{stride} t{time}: row {r} of {rows} differs from the row alone"
                );
            }
        }
    }
}
