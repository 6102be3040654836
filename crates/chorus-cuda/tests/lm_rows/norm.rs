//! `rms_norm` (with and without the fused add), `add_row` and `swiglu`.

use super::*;
use chorus_core::lm_ops::{AddRowArgs, RmsNormArgs, SwigluArgs};

/// Two chained norms as in a layer: the first without delta, the second fusing the add.
fn run_rms<B: LmOps>(be: &B, n: usize, dim: usize, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let mut residual = be.upload(&rvec(&mut r, n * dim, 2.0), BufRole::Activation)?;
    let delta = be.upload(&rvec(&mut r, n * dim, 1.0), BufRole::Activation)?;
    let w1 = be.upload(&rvec(&mut r, dim, 1.5), BufRole::Weight)?;
    let w2 = be.upload(&rvec(&mut r, dim, 1.5), BufRole::Weight)?;
    let mut out1 = be.zeros(n * dim, BufRole::Activation)?;
    let mut out2 = be.zeros(n * dim, BufRole::Activation)?;
    let eps = 1e-6;
    be.run(0, &mut |b: &B| {
        b.rms_norm(RmsNormArgs {
            residual: &mut residual,
            delta: None,
            weight: &w1,
            out: &mut out1,
            n,
            dim,
            eps,
        })?;
        b.rms_norm(RmsNormArgs {
            residual: &mut residual,
            delta: Some(&delta),
            weight: &w2,
            out: &mut out2,
            n,
            dim,
            eps,
        })
    })?;
    Ok(vec![
        be.download(&out1)?,
        be.download(&residual)?,
        be.download(&out2)?,
    ])
}

fn check_rms(name: &str, n: usize, dim: usize) {
    let want = run_rms(&cpu(), n, dim, 5).expect("cpu rms_norm");
    check(
        name,
        &[
            ("out, no delta", Exact::Never),
            // One f32 add of two stored values: exact in f32, one rounding in bf16.
            ("residual += delta", Exact::F32),
            ("out, fused add", Exact::Never),
        ],
        &want,
        |be| run_rms(be, n, dim, 5),
    );
}

#[test]
fn rms_norm_hidden_rows() {
    check_rms("rms_norm 67x4096", 67, 4096);
}

#[test]
fn rms_norm_small_and_scalar_widths() {
    check_rms("rms_norm 5x128", 5, 128);
    check_rms("rms_norm 6x99 scalar", 6, 99);
}

/// Rows too wide for the register-cached path (more than 2048 chunks in both precisions).
#[test]
fn rms_norm_wide_rows_reload_path() {
    check_rms("rms_norm 3x16392", 3, 16392);
}

fn run_add_row<B: LmOps>(
    be: &B,
    n: usize,
    dim: usize,
    row: usize,
    seed: u64,
) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let mut x = be.upload(&rvec(&mut r, n * dim + 4, 1.0), BufRole::Activation)?;
    let table = be.upload(&rvec(&mut r, (row + 3) * dim, 1.0), BufRole::Weight)?;
    be.run(0, &mut |b: &B| {
        b.add_row(AddRowArgs {
            x: &mut x,
            table: &table,
            row,
            n,
            dim,
        })
    })?;
    Ok(vec![be.download(&x)?])
}

#[test]
fn add_row_position_rows() {
    for (n, dim, row) in [(18, 1024, 5), (4, 99, 2), (3, 96, 0)] {
        let name = format!("add_row {n}x{dim} row {row}");
        let want = run_add_row(&cpu(), n, dim, row, 6).expect("cpu add_row");
        check(&name, &[("x", Exact::F32)], &want, |be| {
            run_add_row(be, n, dim, row, 6)
        });
    }
}

fn run_swiglu<B: LmOps>(be: &B, n: usize, inter: usize, seed: u64) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    // Gates up to +-12: silu's tails (exp overflow side included) are exercised.
    let x = be.upload(&rvec(&mut r, n * 2 * inter, 12.0), BufRole::Activation)?;
    let mut out = be.upload(&rvec(&mut r, n * inter + 5, 1.0), BufRole::Activation)?;
    be.run(0, &mut |b: &B| {
        b.swiglu(SwigluArgs {
            x: &x,
            out: &mut out,
            n,
            inter,
        })
    })?;
    Ok(vec![be.download(&out)?])
}

#[test]
fn swiglu_mlp_widths() {
    for (n, inter) in [(22, 3072), (3, 99)] {
        let name = format!("swiglu {n}x{inter}");
        let want = run_swiglu(&cpu(), n, inter, 7).expect("cpu swiglu");
        check(&name, &[("out", Exact::Never)], &want, |be| {
            run_swiglu(be, n, inter, 7)
        });
    }
}
