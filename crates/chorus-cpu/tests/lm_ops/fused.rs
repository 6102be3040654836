//! `fused_linear` on the CPU: every epilogue, with and without the norm, dense and int8, against
//! an f64 reference; bit-identical to the ops it composes (so fusing it changed no CPU result) and
//! for a row alone and among others; the named errors.

use super::*;
use crate::common::Rng;
use chorus_core::convrot;
use chorus_core::lm_ops::{
    Epilogue, FusedLinearArgs, LinearQ8Args, LinearScratch, LinearWeight, RmsNormArgs, RowNorm,
    SwigluArgs,
};
use chorus_core::LinearArgs;

const EPS: f32 = 1e-6;
const GROUP: usize = 16;

/// One case's host operands.
struct Case {
    n: usize,
    k: usize,
    m: usize,
    x: Vec<f32>,
    w: Vec<f32>,
    gamma: Vec<f32>,
    prior: Vec<f32>,
    q: Vec<i8>,
    scales: Vec<f32>,
}

fn case(seed: u64, n: usize, k: usize, m: usize) -> Case {
    let mut r = Rng::new(seed);
    Case {
        n,
        k,
        m,
        x: (0..n * k).map(|_| r.uniform(3.0) + 0.5).collect(),
        w: r.vec(m * k, 0.2),
        gamma: (0..k).map(|_| r.uniform(1.0) + 1.0).collect(),
        prior: r.vec(n * m, 1.0),
        q: (0..m * k)
            .map(|_| (r.next_u64() % 256) as u8 as i8)
            .collect(),
        scales: (0..m).map(|_| 1e-3 + r.uniform(1e-2).abs()).collect(),
    }
}

fn out_cols(c: &Case, e: Epilogue) -> usize {
    if e == Epilogue::Swiglu {
        c.m / 2
    } else {
        c.m
    }
}

/// `fused_linear` on `be`, returning `out` (which starts as the case's prior rows).
fn fused(be: &CpuBackend, c: &Case, e: Epilogue, norm: bool, q8: bool) -> Vec<f32> {
    let x = buf(be, &c.x);
    let gamma = buf(be, &c.gamma);
    let dense = buf(be, &c.w);
    let qw = be.upload_q8(&c.q, &c.scales, c.m, c.k).unwrap();
    let mut out = buf(be, &c.prior[..c.n * out_cols(c, e)]);
    let mut normed = be.zeros(c.n * c.k, BufRole::Activation).unwrap();
    let mut rot = be.zeros(c.n * c.k, BufRole::Activation).unwrap();
    let mut product = be.zeros(c.n * c.m, BufRole::Activation).unwrap();
    be.fused_linear(FusedLinearArgs {
        x: &x,
        norm: norm.then_some(RowNorm {
            weight: &gamma,
            eps: EPS,
        }),
        w: if q8 {
            LinearWeight::Q8 {
                weight: &qw,
                group: GROUP,
            }
        } else {
            LinearWeight::Dense(&dense)
        },
        out: &mut out,
        scratch: LinearScratch {
            normed: &mut normed,
            rot: &mut rot,
            product: &mut product,
        },
        n: c.n,
        k: c.k,
        m: c.m,
        epilogue: e,
    })
    .unwrap();
    down(be, &out)
}

/// The f64 reference of the op's formula (`FusedLinearArgs`).
fn reference(c: &Case, e: Epilogue, norm: bool, q8: bool) -> Vec<f64> {
    let (n, k, m) = (c.n, c.k, c.m);
    let mut y = vec![0f64; n * m];
    for i in 0..n {
        let row = &c.x[i * k..(i + 1) * k];
        let mut u: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        if norm {
            let ms = u.iter().map(|v| v * v).sum::<f64>() / k as f64;
            let inv = 1.0 / (ms + f64::from(EPS)).sqrt();
            for (j, v) in u.iter_mut().enumerate() {
                *v *= inv * f64::from(c.gamma[j]);
            }
        }
        if q8 {
            // The rotation in f32 as the op specifies it, on the f32 input.
            let mut uf: Vec<f32> = u.iter().map(|&v| v as f32).collect();
            convrot::rotate(&mut uf, GROUP).unwrap();
            u = uf.iter().map(|&v| f64::from(v)).collect();
        }
        for j in 0..m {
            let dot: f64 = if q8 {
                let q = &c.q[j * k..(j + 1) * k];
                u.iter().zip(q).map(|(a, &b)| a * f64::from(b)).sum::<f64>()
                    * f64::from(c.scales[j])
            } else {
                let w = &c.w[j * k..(j + 1) * k];
                u.iter().zip(w).map(|(a, &b)| a * f64::from(b)).sum()
            };
            y[i * m + j] = dot;
        }
    }
    match e {
        Epilogue::Store => y,
        Epilogue::Accumulate => y
            .iter()
            .zip(&c.prior)
            .map(|(a, &p)| a + f64::from(p))
            .collect(),
        Epilogue::Swiglu => {
            let h = m / 2;
            (0..n * h)
                .map(|t| {
                    let (i, j) = (t / h, t % h);
                    let (g, u) = (y[i * m + j], y[i * m + h + j]);
                    g / (1.0 + (-g).exp()) * u
                })
                .collect()
        }
    }
}

const EPILOGUES: [Epilogue; 3] = [Epilogue::Store, Epilogue::Accumulate, Epilogue::Swiglu];

#[test]
fn fused_linear_matches_f64_for_every_fusion() {
    let be = common::backend();
    for (n, k, m) in [(1, 64, 40), (3, 128, 66), (6, 48, 20)] {
        let c = case((n * k + m) as u64, n, k, m);
        for e in EPILOGUES {
            for (norm, q8) in [(false, false), (true, false), (false, true), (true, true)] {
                let got = fused(&be, &c, e, norm, q8);
                let want = reference(&c, e, norm, q8);
                let what = format!("fused_linear n={n} k={k} m={m} {e:?} norm={norm} q8={q8}");
                // The int8 reference rotates in f32 first, like the op: the same tolerance holds.
                assert_near(&what, &got, &want);
            }
        }
    }
}

/// The composition the CPU runs is the ops it names, bit for bit: fusing the model's products
/// into `fused_linear` left the CPU backend's results unchanged.
#[test]
fn fused_linear_is_the_composed_ops_bit_for_bit() {
    let be = common::backend();
    let c = case(5, 4, 96, 50);
    let (n, k, m) = (c.n, c.k, c.m);
    // Norm, dense product, SwiGLU, through the ops apart.
    let mut residual = buf(&be, &c.x);
    let gamma = buf(&be, &c.gamma);
    let mut normed = be.zeros(n * k, BufRole::Activation).unwrap();
    be.rms_norm(RmsNormArgs {
        residual: &mut residual,
        delta: None,
        weight: &gamma,
        out: &mut normed,
        n,
        dim: k,
        eps: EPS,
    })
    .unwrap();
    let w = buf(&be, &c.w);
    let mut gu = be.zeros(n * m, BufRole::Activation).unwrap();
    be.linear(LinearArgs {
        x: &normed,
        w: &w,
        out: &mut gu,
        n,
        k,
        m,
    })
    .unwrap();
    let mut act = be.zeros(n * m / 2, BufRole::Activation).unwrap();
    be.swiglu(SwigluArgs {
        x: &gu,
        out: &mut act,
        n,
        inter: m / 2,
    })
    .unwrap();
    let apart = down(&be, &act);
    assert_bits(
        "norm + product + SwiGLU",
        &fused(&be, &c, Epilogue::Swiglu, true, false),
        &apart,
    );
    // The residual add: the old order (product into delta, then residual += delta).
    let mut delta = be.zeros(n * m, BufRole::Activation).unwrap();
    let x = buf(&be, &c.x);
    be.linear(LinearArgs {
        x: &x,
        w: &w,
        out: &mut delta,
        n,
        k,
        m,
    })
    .unwrap();
    let d = down(&be, &delta);
    let added: Vec<f32> = c.prior.iter().zip(&d).map(|(p, v)| p + v).collect();
    assert_bits(
        "product + residual add",
        &fused(&be, &c, Epilogue::Accumulate, false, false),
        &added,
    );
    // int8: the rotation, then the product with its scales, then the add.
    let qw = be.upload_q8(&c.q, &c.scales, m, k).unwrap();
    let mut rotated = c.x.clone();
    for row in rotated.chunks_mut(k) {
        convrot::rotate(row, GROUP).unwrap();
    }
    let rb = buf(&be, &rotated);
    let mut q8out = buf(&be, &c.prior);
    be.linear_q8(LinearQ8Args {
        x: &rb,
        w: &qw,
        out: &mut q8out,
        n,
        k,
        m,
        accumulate: true,
    })
    .unwrap();
    assert_bits(
        "rotation + int8 product + residual add",
        &fused(&be, &c, Epilogue::Accumulate, false, true),
        &down(&be, &q8out),
    );
}

#[test]
fn fused_linear_rows_are_batch_invariant() {
    let be = common::backend();
    let c = case(9, 7, 64, 34);
    for e in EPILOGUES {
        let all = fused(&be, &c, e, true, false);
        let cols = out_cols(&c, e);
        for i in [0, 3, 6] {
            let one = Case {
                n: 1,
                x: c.x[i * c.k..(i + 1) * c.k].to_vec(),
                prior: c.prior[i * c.m..(i + 1) * c.m].to_vec(),
                w: c.w.clone(),
                gamma: c.gamma.clone(),
                q: c.q.clone(),
                scales: c.scales.clone(),
                ..c
            };
            let alone = fused(&be, &one, e, true, false);
            assert_bits(
                &format!("{e:?} row {i}"),
                &alone,
                &all[i * cols..(i + 1) * cols],
            );
        }
    }
}

#[test]
fn fused_linear_names_short_buffers() {
    let be = common::backend();
    let c = case(3, 2, 32, 8);
    let x = buf(&be, &c.x[..40]);
    let w = buf(&be, &c.w);
    let gamma = buf(&be, &c.gamma);
    let mut out = be.zeros(16, BufRole::Activation).unwrap();
    let mut normed = be.zeros(64, BufRole::Activation).unwrap();
    let mut rot = be.zeros(64, BufRole::Activation).unwrap();
    let mut product = be.zeros(16, BufRole::Activation).unwrap();
    let err = be
        .fused_linear(FusedLinearArgs {
            x: &x,
            norm: Some(RowNorm {
                weight: &gamma,
                eps: EPS,
            }),
            w: LinearWeight::Dense(&w),
            out: &mut out,
            scratch: LinearScratch {
                normed: &mut normed,
                rot: &mut rot,
                product: &mut product,
            },
            n: 2,
            k: 32,
            m: 8,
            epilogue: Epilogue::Store,
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("fused_linear") && err.contains("`x`"), "{err}");
}
