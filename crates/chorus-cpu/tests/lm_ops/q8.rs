//! The int8 ConvRot ops: `linear_q8` against an f64 reference and bit-identical for a row alone
//! and among others; `hadamard` equal to `convrot::rotate` bit for bit, and the named errors.

use super::*;
use crate::common::Rng;
use chorus_core::convrot;
use chorus_core::lm_ops::{HadamardArgs, LinearQ8Args};

/// Int8 values and scales of an `[m, k]` weight.
fn q8_weight(rng: &mut Rng, m: usize, k: usize) -> (Vec<i8>, Vec<f32>) {
    let q = (0..m * k)
        .map(|_| (rng.next_u64() % 256) as u8 as i8)
        .collect();
    let s = (0..m).map(|_| 1e-3 + rng.uniform(1e-2).abs()).collect();
    (q, s)
}

fn run_q8(be: &CpuBackend, x: &[f32], w: &chorus_cpu::CpuQWeight, n: usize) -> Vec<f32> {
    let (m, k) = (w.rows(), w.cols());
    let xb = buf(be, x);
    let mut out = be.zeros(n * m, BufRole::Activation).unwrap();
    be.linear_q8(LinearQ8Args {
        x: &xb,
        w,
        out: &mut out,
        n,
        k,
        m,
        accumulate: false,
    })
    .unwrap();
    down(be, &out)
}

#[test]
fn linear_q8_matches_f64_and_is_batch_invariant() {
    let be = common::backend();
    let mut rng = Rng::new(81);
    // k with a partial 16-lane block, m over several tiles, n over a partial row block.
    for (n, k, m) in [(1, 256, 64), (7, 83, 37), (5, 1024, 300)] {
        let (q, s) = q8_weight(&mut rng, m, k);
        let w = be.upload_q8(&q, &s, m, k).unwrap();
        let x = rng.vec(n * k, 1.0);
        let got = run_q8(&be, &x, &w, n);
        let want: Vec<f64> = (0..n * m)
            .map(|o| {
                let (i, j) = (o / m, o % m);
                let dot: f64 = (0..k)
                    .map(|kk| x[i * k + kk] as f64 * q[j * k + kk] as f64)
                    .sum();
                dot * s[j] as f64
            })
            .collect();
        assert_near(&format!("linear_q8 n={n} k={k} m={m}"), &got, &want);
        for i in 0..n {
            let alone = run_q8(&be, &x[i * k..(i + 1) * k], &w, 1);
            assert_bits("linear_q8 row alone", &alone, &got[i * m..(i + 1) * m]);
        }
    }
}

#[test]
fn hadamard_is_the_convrot_rotation_bit_for_bit() {
    let be = common::backend();
    let mut rng = Rng::new(82);
    for (n, dim, group) in [(3, 512, 256), (2, 384, 64), (1, 48, 16), (4, 16, 4)] {
        let x = rng.vec(n * dim, 3.0);
        let xb = buf(&be, &x);
        let mut out = be.zeros(n * dim, BufRole::Activation).unwrap();
        be.hadamard(HadamardArgs {
            x: &xb,
            out: &mut out,
            n,
            dim,
            group,
        })
        .unwrap();
        let mut want = x.clone();
        convrot::rotate(&mut want, group).unwrap();
        assert_bits(
            &format!("hadamard dim={dim} group={group}"),
            &down(&be, &out),
            &want,
        );
    }
}

#[test]
fn bad_groups_and_shapes_are_named() {
    let be = common::backend();
    let xb = buf(&be, &[0.0; 256]);
    let mut out = be.zeros(256, BufRole::Activation).unwrap();
    for (dim, group) in [(256, 128), (256, 0), (192, 256)] {
        let e = be
            .hadamard(HadamardArgs {
                x: &xb,
                out: &mut out,
                n: 1,
                dim,
                group,
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("hadamard") && e.contains("group"), "{e}");
    }
    let e = be
        .upload_q8(&[0; 10], &[1.0; 2], 2, 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("upload_q8"), "{e}");
    let w = be.upload_q8(&[1; 8], &[1.0; 2], 2, 4).unwrap();
    let e = be
        .linear_q8(LinearQ8Args {
            x: &xb,
            w: &w,
            out: &mut out,
            n: 1,
            k: 8,
            m: 2,
            accumulate: false,
        })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("linear_q8") && e.contains("[2, 8]") && e.contains("[2, 4]"),
        "{e}"
    );
}
