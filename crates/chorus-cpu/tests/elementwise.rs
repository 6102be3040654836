//! linear, linear_acc, layer_norm, layer_norm_linear, gelu, embed_codes, advance_tokens, staging
//! and fills.

mod common;

use chorus_core::{
    Backend, BufRole, EmbedArgs, LayerNormArgs, LinearArgs, NormLinearArgs, ResetRowsArgs,
    StagingDims, NO_CODE, NO_ROW,
};
use common::*;

#[test]
fn linear_matches_reference() {
    let be = backend();
    let mut rng = Rng::new(21);
    for &(n, k, m) in &[
        (1usize, 512usize, 1536usize),
        (2, 64, 33),
        (16, 512, 2048),
        (7, 3, 5),
    ] {
        let x = rng.vec(n * k, 1.0);
        let w = rng.vec(m * k, 0.1);
        let mut want = vec![0.0; n * m];
        for i in 0..n {
            for j in 0..m {
                want[i * m + j] = (0..k)
                    .map(|kk| x[i * k + kk] as f64 * w[j * k + kk] as f64)
                    .sum();
            }
        }
        let (xb, wb) = (
            be.upload(&x, BufRole::Activation).unwrap(),
            be.upload(&w, BufRole::Weight).unwrap(),
        );
        let mut out = be.zeros(n * m, BufRole::Activation).unwrap();
        be.linear(LinearArgs {
            x: &xb,
            w: &wb,
            out: &mut out,
            n,
            k,
            m,
        })
        .unwrap();
        assert_close("linear", &be.download(&out).unwrap(), &want);
    }
}

#[test]
fn layer_norm_matches_reference() {
    let be = backend();
    let mut rng = Rng::new(22);
    for &(n, dim) in &[(1usize, 512usize), (6, 512), (3, 7), (40, 512)] {
        let x: Vec<f32> = rng.vec(n * dim, 2.0).iter().map(|v| v + 0.7).collect();
        let (gamma, beta) = (rng.vec(dim, 1.0), rng.vec(dim, 0.5));
        let eps = 1e-5;
        let mut want = Vec::new();
        for r in x.chunks(dim) {
            let mean = r.iter().map(|&v| v as f64).sum::<f64>() / dim as f64;
            let var = r.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / dim as f64;
            for i in 0..dim {
                want.push(
                    (r[i] as f64 - mean) / (var + eps).sqrt() * gamma[i] as f64 + beta[i] as f64,
                );
            }
        }
        let up = |v: &[f32]| be.upload(v, BufRole::Activation).unwrap();
        let (xb, gb, bb) = (up(&x), up(&gamma), up(&beta));
        let mut out = be.zeros(n * dim, BufRole::Activation).unwrap();
        be.layer_norm(LayerNormArgs {
            x: &xb,
            gamma: &gb,
            beta: &bb,
            out: &mut out,
            n,
            dim,
            eps: eps as f32,
        })
        .unwrap();
        assert_close("layer_norm", &be.download(&out).unwrap(), &want);
    }
}

#[test]
fn gelu_matches_erf_reference_and_leaves_the_rest() {
    let be = backend();
    let mut rng = Rng::new(23);
    let x = rng.vec(70_000, 6.0);
    let len = 65_537;
    let mut buf = be.upload(&x, BufRole::Activation).unwrap();
    be.gelu(&mut buf, len).unwrap();
    let got = be.download(&buf).unwrap();
    let want: Vec<f64> = x[..len]
        .iter()
        .map(|&v| 0.5 * v as f64 * (1.0 + libm::erf(v as f64 / std::f64::consts::SQRT_2)))
        .collect();
    assert_close("gelu", &got[..len], &want);
    assert_eq!(&got[len..], &x[len..]);
}

#[test]
fn linear_acc_adds_the_product_to_out() {
    let be = backend();
    let mut rng = Rng::new(24);
    for &(n, k, m) in &[(2usize, 512usize, 512usize), (5, 96, 12), (3, 7, 5)] {
        let (acc, x, w) = (
            rng.vec(n * m, 1.0),
            rng.vec(n * k, 1.0),
            rng.vec(m * k, 0.1),
        );
        let want: Vec<f64> = (0..n * m)
            .map(|e| {
                let (i, j) = (e / m, e % m);
                acc[e] as f64
                    + (0..k)
                        .map(|kk| x[i * k + kk] as f64 * w[j * k + kk] as f64)
                        .sum::<f64>()
            })
            .collect();
        let mut out = be.upload(&acc, BufRole::Activation).unwrap();
        let (xb, wb) = (
            be.upload(&x, BufRole::Activation).unwrap(),
            be.upload(&w, BufRole::Weight).unwrap(),
        );
        be.linear_acc(LinearArgs {
            x: &xb,
            w: &wb,
            out: &mut out,
            n,
            k,
            m,
        })
        .unwrap();
        assert_close("linear_acc", &be.download(&out).unwrap(), &want);
    }
}

#[test]
fn layer_norm_linear_is_the_norm_then_the_product_then_gelu() {
    let be = backend();
    let mut rng = Rng::new(26);
    let (n, k, m) = (3, 40, 7);
    let x: Vec<f32> = rng.vec(n * k, 2.0).iter().map(|v| v + 1.5).collect();
    let (gamma, beta, w) = (rng.vec(k, 1.0), rng.vec(k, 0.5), rng.vec(m * k, 0.3));
    // f64 reference: two-pass mean and biased variance, eps 1e-5.
    let normed: Vec<f64> = x
        .chunks(k)
        .flat_map(|row| {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / k as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / k as f64;
            let inv = 1.0 / (var + 1e-5).sqrt();
            let (gamma, beta) = (&gamma, &beta);
            (0..k)
                .map(move |c| (row[c] as f64 - mean) * inv * gamma[c] as f64 + beta[c] as f64)
                .collect::<Vec<_>>()
        })
        .collect();
    for gelu in [false, true] {
        let want: Vec<f64> = (0..n * m)
            .map(|e| {
                let (i, j) = (e / m, e % m);
                let y: f64 = (0..k)
                    .map(|c| normed[i * k + c] * w[j * k + c] as f64)
                    .sum();
                if gelu {
                    0.5 * y * (1.0 + libm::erf(y / std::f64::consts::SQRT_2))
                } else {
                    y
                }
            })
            .collect();
        let (xb, gb, bb, wb) = (
            be.upload(&x, BufRole::Activation).unwrap(),
            be.upload(&gamma, BufRole::Weight).unwrap(),
            be.upload(&beta, BufRole::Weight).unwrap(),
            be.upload(&w, BufRole::Weight).unwrap(),
        );
        let mut norm = be.zeros(n * k, BufRole::Activation).unwrap();
        let mut out = be.zeros(n * m, BufRole::Activation).unwrap();
        be.layer_norm_linear(NormLinearArgs {
            norm: LayerNormArgs {
                x: &xb,
                gamma: &gb,
                beta: &bb,
                out: &mut norm,
                n,
                dim: k,
                eps: 1e-5,
            },
            w: &wb,
            out: &mut out,
            m,
            gelu,
        })
        .unwrap();
        assert_close("layer_norm_linear", &be.download(&out).unwrap(), &want);
    }
}

#[test]
fn embed_codes_sums_present_codebooks() {
    let be = backend();
    let mut rng = Rng::new(25);
    let (rows, q, card, dim) = (3usize, 4usize, 9usize, 6usize);
    let table = rng.vec(q * card * dim, 1.0);
    let latents = rng.vec(rows * dim, 1.0);
    let codes: Vec<i32> = vec![
        0, 8, NO_CODE, 3, NO_CODE, NO_CODE, NO_CODE, NO_CODE, 5, 5, 5, 5,
    ];
    let mut want = Vec::new();
    for r in 0..rows {
        for d in 0..dim {
            let mut v = latents[r * dim + d] as f64;
            for cb in 0..q {
                let c = codes[r * q + cb];
                if c != NO_CODE {
                    v += table[(cb * card + c as usize) * dim + d] as f64;
                }
            }
            want.push(v);
        }
    }
    let mut cb = be.ints(rows * q, 0).unwrap();
    for (i, &c) in codes.iter().enumerate() {
        be.fill_ints(&mut cb, i, c).unwrap();
    }
    let (tb, lb) = (
        be.upload(&table, BufRole::Weight).unwrap(),
        be.upload(&latents, BufRole::Activation).unwrap(),
    );
    let mut out = be.zeros(rows * dim, BufRole::Activation).unwrap();
    be.embed_codes(EmbedArgs {
        codes: &cb,
        table: &tb,
        latents: &lb,
        out: &mut out,
        rows,
        codebooks: q,
        cardinality: card,
        dim,
    })
    .unwrap();
    assert_close("embed_codes", &be.download(&out).unwrap(), &want);
}

#[test]
fn advance_tokens_skips_the_dummy() {
    let be = backend();
    let mut tokens = be.ints(5, 0).unwrap();
    be.fill_ints(&mut tokens, 1, 7).unwrap();
    let mut slots = be.ints(4, 4).unwrap();
    be.fill_ints(&mut slots, 0, 1).unwrap();
    be.fill_ints(&mut slots, 1, 3).unwrap();
    be.advance_tokens(&mut tokens, &slots, 4, 2, 4).unwrap();
    assert_eq!(be.download_ints(&tokens).unwrap(), vec![0, 9, 0, 2, 0]);
    let bad = be.ints(1, 9).unwrap();
    assert!(be.advance_tokens(&mut tokens, &bad, 1, 2, 4).is_err());
}

fn ints_of<B: Backend>(be: &B, v: &[i32]) -> B::Ints {
    let mut ints = be.ints(v.len(), 0).unwrap();
    for (i, &x) in v.iter().enumerate() {
        be.fill_ints(&mut ints, i, x).unwrap();
    }
    ints
}

#[test]
fn reset_rows_and_ints_touch_the_listed_rows_only() {
    let be = backend();
    let (rows, len) = (6usize, 5usize);
    let start: Vec<f32> = (0..rows * len).map(|i| i as f32 + 1.0).collect();
    let src: Vec<f32> = (0..len).map(|i| -(i as f32) - 0.5).collect();
    let src_buf = be.upload(&src, BufRole::Activation).unwrap();
    let list = ints_of(&be, &[4, NO_ROW, 1, NO_ROW]);
    for with_src in [false, true] {
        let mut buf = be.upload(&start, BufRole::State).unwrap();
        be.reset_rows(ResetRowsArgs {
            buf: &mut buf,
            row_len: len,
            list: &list,
            count: 4,
            src: with_src.then_some(&src_buf),
        })
        .unwrap();
        let mut want = start.clone();
        for r in [1, 4] {
            for (i, w) in want[r * len..(r + 1) * len].iter_mut().enumerate() {
                *w = if with_src { src[i] } else { 0.0 };
            }
        }
        assert_eq!(be.download(&buf).unwrap(), want, "src {with_src}");
    }
    let mut ints = ints_of(&be, &[5, 6, 7, 8, 9, 10]);
    be.reset_ints(&mut ints, &list, 3, 0).unwrap();
    assert_eq!(be.download_ints(&ints).unwrap(), vec![5, 0, 7, 8, 0, 10]);
    // A row past the buffer is an error naming the op; nothing is written.
    let bad = ints_of(&be, &[2, rows as i32]);
    let mut buf = be.upload(&start, BufRole::State).unwrap();
    let e = be
        .reset_rows(ResetRowsArgs {
            buf: &mut buf,
            row_len: len,
            list: &bad,
            count: 2,
            src: None,
        })
        .unwrap_err();
    assert!(e.to_string().contains("reset_rows"), "{e}");
    assert_eq!(be.download(&buf).unwrap(), start);
}

#[test]
fn staging_round_trip_and_row_fill() {
    let be = backend();
    let dims = StagingDims {
        rows: 2,
        codebooks: 3,
        latent_dim: 4,
        samples: 5,
    };
    let mut st = be.staging(dims).unwrap();
    {
        let v = be.staging_view(&mut st).unwrap();
        v.slots.copy_from_slice(&[4, 1]);
        v.codes.copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        v.latents
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f32);
    }
    let (mut slots, mut codes) = (be.ints(2, 0).unwrap(), be.ints(6, 0).unwrap());
    let mut lat = be.zeros(8, BufRole::Activation).unwrap();
    be.stage_in(&st, &mut slots, &mut codes, &mut lat).unwrap();
    assert_eq!(be.download_ints(&slots).unwrap(), vec![4, 1]);
    assert_eq!(be.download_ints(&codes).unwrap(), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(
        be.download(&lat).unwrap(),
        (0..8).map(|i| i as f32).collect::<Vec<_>>()
    );
    let mut pcm = be
        .upload(
            &(0..10).map(|i| i as f32 * 0.5).collect::<Vec<_>>(),
            BufRole::Activation,
        )
        .unwrap();
    be.stage_out(&pcm, &mut st).unwrap();
    assert_eq!(
        be.staging_view(&mut st).unwrap().pcm,
        &be.download(&pcm).unwrap()[..]
    );
    be.zero_row(&mut pcm, 1, 4).unwrap();
    let z = be.download(&pcm).unwrap();
    assert_eq!(&z[4..8], &[0.0; 4]);
    assert_eq!(z[3], 1.5);
    assert_eq!(z[8], 4.0);
    assert!(be.zero_row(&mut pcm, 2, 4).is_err());
}
