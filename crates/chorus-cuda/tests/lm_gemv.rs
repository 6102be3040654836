//! The skinny-product path of `linear` (the GEMV kernel for at most 16 rows, cuBLAS above) against
//! the CPU backend, and the bandwidth it streams weights at on the LM's real shapes.

mod common;

use chorus_core::{Backend, BufRole, LinearArgs, Precision};
use common::*;

/// Runs `out = x w^T` inside a captured program on `be` and returns `out`.
fn product<B: Backend>(be: &B, x: &[f32], w: &[f32], (n, k, m): (usize, usize, usize)) -> Vec<f32> {
    let xb = be.upload(x, BufRole::Activation).unwrap();
    let wb = be.upload(w, BufRole::Weight).unwrap();
    let mut out = be.zeros(n * m, BufRole::Activation).unwrap();
    be.run(n * 1_000_003 + m, &mut |b: &B| {
        b.linear(LinearArgs {
            x: &xb,
            w: &wb,
            out: &mut out,
            n,
            k,
            m,
        })
    })
    .unwrap();
    be.download(&out).unwrap()
}

#[test]
fn gemv_and_cublas_products_match_the_cpu() {
    let cpu = cpu();
    for precision in PRECISIONS {
        let Some(cuda) = cuda(precision) else { return };
        // Row counts on both sides of the GEMV limit; k with and without a full unrolled tail.
        for (n, k, m) in [
            (1, 256, 1024),
            (2, 4096, 16385),
            (3, 1032, 517),
            (8, 12288, 256),
            (16, 4096, 1024),
            (17, 512, 384),
        ] {
            let mut r = Rng::new((n * k + m) as u64);
            let x = r.vec(n * k, 1.0);
            let w = r.vec(m * k, (3.0 / k as f32).sqrt());
            let want = product(&cpu, &x, &w, (n, k, m));
            let got = product(&cuda, &x, &w, (n, k, m));
            assert_parity(&format!("linear n={n} k={k} m={m}"), precision, &got, &want);
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
fn skinny_products_stream_weights_near_the_copy_bandwidth() {
    let Some(be) = cuda(Precision::Bf16) else {
        return;
    };
    // Four LM layers' linears (fused q/k/v, o, fused gate/up, down): 1.55 GB, far past the L2.
    let (h, qkv, inter) = (4096usize, 6144usize, 12288usize);
    let shapes = [(h, qkv), (h, h), (h, 2 * inter), (inter, h)];
    let layers = 4;
    let weights: Vec<_> = (0..layers)
        .flat_map(|_| {
            shapes
                .iter()
                .map(|&(k, m)| be.zeros(k * m, BufRole::Weight).unwrap())
        })
        .collect();
    let bytes: usize = layers * shapes.iter().map(|&(k, m)| k * m * 2).sum::<usize>();
    for n in [2usize, 4, 8, 16, 32, 128] {
        let x = be.zeros(n * inter, BufRole::Activation).unwrap();
        let mut out = be.zeros(n * 2 * inter, BufRole::Activation).unwrap();
        let key = 9_000 + n;
        be.run(key, &mut |b: &chorus_cuda::CudaBackend| {
            for (i, w) in weights.iter().enumerate() {
                let (k, m) = shapes[i % shapes.len()];
                b.linear(LinearArgs {
                    x: &x,
                    w,
                    out: &mut out,
                    n,
                    k,
                    m,
                })?;
            }
            Ok(())
        })
        .unwrap();
        let ms = median_ms(&be, key);
        let path = if n <= 2 { "GEMV kernel" } else { "cuBLAS" };
        eprintln!(
            "skinny products n={n:>3} ({path}): {ms:.3} ms for {:.2} GB of weights = {:.0} GB/s",
            bytes as f64 / 1e9,
            bytes as f64 / ms / 1e6
        );
        assert!(ms > 0.0);
    }
}
