//! RMSNorm (with and without the fused residual add), q/k RMSNorm + RoPE, SwiGLU.

use super::*;
use crate::common::Rng;
use chorus_core::lm_ops::{HeadGeom, QkNormRopeArgs, RmsNormArgs, SwigluArgs};

/// `x * rsqrt(mean(x^2) + eps) * w` in f64.
fn rms_ref(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &wv)| v as f64 * inv * wv as f64)
        .collect()
}

/// One `rms_norm` call; returns (residual, out).
fn run_rms(
    be: &CpuBackend,
    res: &[f32],
    delta: Option<&[f32]>,
    w: &CpuBuf,
    n: usize,
) -> (Vec<f32>, Vec<f32>) {
    let dim = w.len();
    let mut residual = buf(be, res);
    let delta = delta.map(|d| buf(be, d));
    let mut out = be.zeros(n * dim, BufRole::Activation).unwrap();
    be.rms_norm(RmsNormArgs {
        residual: &mut residual,
        delta: delta.as_ref(),
        weight: w,
        out: &mut out,
        n,
        dim,
        eps: 1e-6,
    })
    .unwrap();
    (down(be, &residual), down(be, &out))
}

#[test]
fn rms_norm_matches_f64_reference_with_and_without_delta() {
    let be = common::backend();
    let mut rng = Rng::new(10);
    let (n, dim) = (5, 200);
    let (res, delta, w_host) = (
        rng.vec(n * dim, 2.0),
        rng.vec(n * dim, 1.0),
        rng.vec(dim, 1.5),
    );
    let w = buf(&be, &w_host);
    let (r0, out0) = run_rms(&be, &res, None, &w, n);
    assert_bits("residual untouched without delta", &r0, &res);
    let want: Vec<f64> = res
        .chunks(dim)
        .flat_map(|x| rms_ref(x, &w_host, 1e-6))
        .collect();
    assert_near("rms_norm", &out0, &want);

    let (r1, out1) = run_rms(&be, &res, Some(&delta), &w, n);
    let sum: Vec<f32> = res.iter().zip(&delta).map(|(a, b)| a + b).collect();
    assert_bits("residual += delta", &r1, &sum);
    let want: Vec<f64> = sum
        .chunks(dim)
        .flat_map(|x| rms_ref(x, &w_host, 1e-6))
        .collect();
    assert_near("add + rms_norm", &out1, &want);

    let mut short = be.zeros(n * dim - 1, BufRole::Activation).unwrap();
    let r = be.rms_norm(RmsNormArgs {
        residual: &mut buf(&be, &res),
        delta: None,
        weight: &w,
        out: &mut short,
        n,
        dim,
        eps: 1e-6,
    });
    assert!(r.is_err(), "out one element short");
}

#[test]
fn rms_norm_rows_are_batch_invariant() {
    let be = common::backend();
    let mut rng = Rng::new(11);
    let dim = 1000;
    let (res, delta, w) = (
        rng.vec(64 * dim, 3.0),
        rng.vec(64 * dim, 1.0),
        buf(&be, &rng.vec(dim, 1.0)),
    );
    for n in [6, 64] {
        let (rb, ob) = run_rms(&be, &res[..n * dim], Some(&delta[..n * dim]), &w, n);
        for r in [0, 3, n - 1] {
            let row = r * dim..(r + 1) * dim;
            let (ra, oa) = run_rms(&be, &res[row.clone()], Some(&delta[row.clone()]), &w, 1);
            assert_bits(&format!("row {r} of {n}: out"), &ob[row.clone()], &oa);
            assert_bits(&format!("row {r} of {n}: residual"), &rb[row], &ra);
        }
    }
}

#[test]
fn qk_norm_rope_matches_f64_reference() {
    // With the q/k norm (Qwen3) and RoPE alone (Llama-style models).
    for with_norm in [true, false] {
        qk_norm_rope_case(with_norm);
    }
}

fn qk_norm_rope_case(with_norm: bool) {
    let be = common::backend();
    let mut rng = Rng::new(12);
    let g = HeadGeom {
        rows: 3,
        time: 2,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 32,
    };
    let (hd, half, width, eps) = (g.head_dim, g.head_dim / 2, g.qkv_width(), 1e-6_f32);
    let start_host = [0, 7, 3];
    let max_pos = 12;
    let qkv_host = rng.vec(g.tokens() * width, 2.0);
    let (qn, kn) = (rng.vec(hd, 1.5), rng.vec(hd, 1.5));
    // A genuine cos/sin table: angle = p * theta^(-2j/d).
    let mut rope = vec![0.0_f32; max_pos * hd];
    for p in 0..max_pos {
        for j in 0..half {
            let a = p as f32 * 1e4_f32.powf(-((2 * j) as f32) / hd as f32);
            rope[p * hd + j] = a.cos();
            rope[p * hd + half + j] = a.sin();
        }
    }
    let mut qkv = buf(&be, &qkv_host);
    let (qnb, knb, rb, start) = (
        buf(&be, &qn),
        buf(&be, &kn),
        buf(&be, &rope),
        ints(&be, &start_host),
    );
    be.qk_norm_rope(QkNormRopeArgs {
        first_token: 0,
        qkv: &mut qkv,
        qk_norm: with_norm.then_some([&qnb, &knb]),
        rope: &rb,
        start: &start,
        geom: g,
        eps,
    })
    .unwrap();
    let got = down(&be, &qkv);
    let normed = (g.q_heads + g.kv_heads) * hd;
    let (mut got_qk, mut want) = (Vec::new(), Vec::new());
    for tok in 0..g.tokens() {
        let p = start_host[tok / g.time] as usize + tok % g.time;
        let row = &qkv_host[tok * width..(tok + 1) * width];
        for h in 0..g.q_heads + g.kv_heads {
            let w = if h < g.q_heads { &qn } else { &kn };
            let x = &row[h * hd..(h + 1) * hd];
            let y: Vec<f64> = if with_norm {
                rms_ref(x, w, eps)
            } else {
                x.iter().map(|&v| v as f64).collect()
            };
            for j in 0..half {
                let (c, s) = (rope[p * hd + j] as f64, rope[p * hd + half + j] as f64);
                want.push(y[j] * c - y[j + half] * s);
            }
            for j in 0..half {
                let (c, s) = (rope[p * hd + j] as f64, rope[p * hd + half + j] as f64);
                want.push(y[j + half] * c + y[j] * s);
            }
        }
        got_qk.extend_from_slice(&got[tok * width..tok * width + normed]);
        assert_bits(
            "v untouched",
            &got[tok * width + normed..(tok + 1) * width],
            &row[normed..],
        );
    }
    assert_near("qk_norm_rope", &got_qk, &want);

    // Row 1 reaches position 8; a table of 8 positions is one short.
    let short = buf(&be, &rope[..8 * hd]);
    let r = be.qk_norm_rope(QkNormRopeArgs {
        first_token: 0,
        qkv: &mut qkv,
        qk_norm: with_norm.then_some([&qnb, &knb]),
        rope: &short,
        start: &start,
        geom: g,
        eps,
    });
    assert!(r.is_err(), "rope table too short");
}

#[test]
fn swiglu_matches_f64_reference() {
    let be = common::backend();
    let mut rng = Rng::new(13);
    let (n, inter) = (6, 70);
    let x_host = rng.vec(n * 2 * inter, 6.0);
    let x = buf(&be, &x_host);
    let mut out = be.zeros(n * inter, BufRole::Activation).unwrap();
    be.swiglu(SwigluArgs {
        x: &x,
        out: &mut out,
        n,
        inter,
    })
    .unwrap();
    let mut want = Vec::new();
    for r in 0..n {
        for j in 0..inter {
            let (a, u) = (
                x_host[r * 2 * inter + j] as f64,
                x_host[r * 2 * inter + inter + j] as f64,
            );
            want.push(a / (1.0 + (-a).exp()) * u);
        }
    }
    assert_near("swiglu", &down(&be, &out), &want);
    assert!(be
        .swiglu(SwigluArgs {
            x: &x,
            out: &mut out,
            n: n + 1,
            inter
        })
        .is_err());
}
