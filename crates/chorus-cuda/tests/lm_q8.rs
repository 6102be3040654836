//! The int8 ConvRot ops (`linear_q8`: the GEMV kernel for at most 4 rows, dequantization + cuBLAS
//! above or for `k` not a multiple of 16; `hadamard`) against the CPU backend, and the bandwidth the
//! int8 products stream weights at on the LM's real shapes.

mod common;

use chorus_core::lm_ops::{HadamardArgs, LinearQ8Args};
use chorus_core::{Backend, BufRole, LmOps, Precision};
use common::*;

/// Int8 values and scales of an `[m, k]` weight whose products have unit scale.
fn q8_weight(r: &mut Rng, m: usize, k: usize) -> (Vec<i8>, Vec<f32>) {
    let q = (0..m * k)
        .map(|_| (r.next_u64() % 256) as u8 as i8)
        .collect();
    let s = (0..m)
        .map(|_| (1.0 + r.uniform(0.5)) / (74.0 * (k as f32).sqrt()))
        .collect();
    (q, s)
}

/// A program key used once (a captured program replays with the buffers it was captured on).
fn next_key() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1 << 20);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// `out = (x . q^T) * s` inside a captured program on `be`.
fn product<B: LmOps>(
    be: &B,
    x: &[f32],
    q: &[i8],
    s: &[f32],
    (n, k, m): (usize, usize, usize),
) -> Vec<f32> {
    let xb = be.upload(x, BufRole::Activation).unwrap();
    let w = be.upload_q8(q, s, m, k).unwrap();
    let mut out = be.zeros(n * m, BufRole::Activation).unwrap();
    be.run(next_key(), &mut |b: &B| {
        b.linear_q8(LinearQ8Args {
            x: &xb,
            w: &w,
            out: &mut out,
            n,
            k,
            m,
            accumulate: false,
        })
    })
    .unwrap();
    be.download(&out).unwrap()
}

/// `out = x . blockdiag(H_group)` inside a captured program on `be`.
fn rotate<B: LmOps>(be: &B, x: &[f32], (n, dim, group): (usize, usize, usize)) -> Vec<f32> {
    let xb = be.upload(x, BufRole::Activation).unwrap();
    let mut out = be.zeros(n * dim, BufRole::Activation).unwrap();
    be.run(next_key(), &mut |b: &B| {
        b.hadamard(HadamardArgs {
            x: &xb,
            out: &mut out,
            n,
            dim,
            group,
        })
    })
    .unwrap();
    be.download(&out).unwrap()
}

#[test]
fn int8_products_match_the_cpu() {
    let cpu = cpu();
    for precision in PRECISIONS {
        let Some(cuda) = cuda(precision) else { return };
        // GEMV row capacities 2 and 4, then dequantization + cuBLAS (n > 4, and k not a multiple
        // of 16).
        for (n, k, m) in [
            (1, 256, 1024),
            (2, 4096, 6144),
            (3, 1040, 517),
            (8, 12288, 256),
            (16, 4096, 1024),
            (17, 512, 384),
            (40, 384, 130),
            (100, 256, 200),
            (2, 100, 33),
        ] {
            let mut r = Rng::new((n * k + m) as u64);
            let x = r.vec(n * k, 1.0);
            let (q, s) = q8_weight(&mut r, m, k);
            let want = product(&cpu, &x, &q, &s, (n, k, m));
            let got = product(&cuda, &x, &q, &s, (n, k, m));
            assert_parity(
                &format!("linear_q8 n={n} k={k} m={m}"),
                precision,
                &got,
                &want,
            );
        }
    }
}

#[test]
fn int8_gemv_rows_are_batch_invariant_up_to_its_row_limit() {
    for precision in PRECISIONS {
        let Some(cuda) = cuda(precision) else { return };
        let (n, k, m) = (4, 1024, 300);
        let mut r = Rng::new(41);
        let x = r.vec(n * k, 1.0);
        let (q, s) = q8_weight(&mut r, m, k);
        let all = product(&cuda, &x, &q, &s, (n, k, m));
        for i in [0, 3] {
            let alone = product(&cuda, &x[i * k..(i + 1) * k], &q, &s, (1, k, m));
            let same = alone
                .iter()
                .zip(&all[i * m..(i + 1) * m])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "row {i} alone differs from the row among {n} [{}]",
                precision.name()
            );
        }
    }
}

#[test]
fn hadamard_matches_the_cpu() {
    let cpu = cpu();
    for precision in PRECISIONS {
        let Some(cuda) = cuda(precision) else { return };
        for (n, dim, group) in [
            (2, 4096, 256),
            (3, 12288, 256),
            (2, 384, 64),
            (5, 48, 16),
            (1, 4096, 4096),
        ] {
            let x = Rng::new((n * dim + group) as u64).vec(n * dim, 2.0);
            let want = rotate(&cpu, &x, (n, dim, group));
            let got = rotate(&cuda, &x, (n, dim, group));
            assert_parity(
                &format!("hadamard n={n} dim={dim} group={group}"),
                precision,
                &got,
                &want,
            );
            if precision == Precision::F32 {
                // The same radix-4 order on both backends: equal bit for bit in f32.
                assert!(got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }
}

/// Median device time of the captured program `key` over 20 replays, in ms.
fn median_ms(be: &chorus_cuda::CudaBackend, key: usize) -> f64 {
    let mut t = be.time_replay(key, 20).unwrap();
    t.sort_by(f32::total_cmp);
    f64::from(t[t.len() / 2])
}

#[test]
fn int8_product_bandwidth_on_the_lm_shapes() {
    let Some(be) = cuda(Precision::Bf16) else {
        return;
    };
    // Eight LM layers' int8 linears (fused q/k/v, o, fused gate/up, down): 1.55 GB, far past the L2.
    let (h, qkv, inter) = (4096usize, 6144usize, 12288usize);
    let shapes = [(h, qkv), (h, h), (h, 2 * inter), (inter, h)];
    let layers = 8;
    let zeros = vec![0i8; h * 2 * inter];
    let weights: Vec<_> = (0..layers)
        .flat_map(|_| {
            shapes
                .iter()
                .map(|&(k, m)| be.upload_q8(&zeros[..k * m], &vec![1.0; m], m, k).unwrap())
        })
        .collect::<Vec<_>>();
    let bytes: usize = layers * shapes.iter().map(|&(k, m)| k * m + 4 * m).sum::<usize>();
    for n in [2usize, 4, 8, 16, 32, 64, 128] {
        let x = be.zeros(n * inter, BufRole::Activation).unwrap();
        let mut rot = be.zeros(n * inter, BufRole::Activation).unwrap();
        let mut out = be.zeros(n * 2 * inter, BufRole::Activation).unwrap();
        for rotated in [false, true] {
            let key = 19_000 + 2 * n + usize::from(rotated);
            be.run(key, &mut |b: &chorus_cuda::CudaBackend| {
                for (i, w) in weights.iter().enumerate() {
                    let (k, m) = shapes[i % shapes.len()];
                    if rotated {
                        b.hadamard(HadamardArgs {
                            x: &x,
                            out: &mut rot,
                            n,
                            dim: k,
                            group: 256,
                        })?;
                    }
                    b.linear_q8(LinearQ8Args {
                        x: &rot,
                        w,
                        out: &mut out,
                        n,
                        k,
                        m,
                        accumulate: false,
                    })?;
                }
                Ok(())
            })
            .unwrap();
            let ms = median_ms(&be, key);
            let path = if n <= 4 {
                "GEMV kernel"
            } else {
                "dequantize + cuBLAS"
            };
            let what = if rotated { " + hadamard" } else { "" };
            eprintln!(
                "int8 products n={n:>3} ({path}{what}): {ms:.3} ms for {:.2} GB of weights = {:.0} GB/s",
                bytes as f64 / 1e9,
                bytes as f64 / ms / 1e6
            );
            assert!(ms > 0.0);
        }
    }
}
