//! The skinny-product paths of `linear`, `linear_acc` and `layer_norm_linear` (the GEMV kernels for
//! few rows, cuBLAS above) against the CPU backend, and the bandwidth the GEMV kernel streams
//! weights at on the LM's real shapes.

mod common;

use chorus_core::{Backend, BufRole, LayerNormArgs, LinearArgs, NormLinearArgs, Precision};
use common::*;

/// Runs `out = x w^T` inside a captured program on `be` and returns `out`.
fn product<B: Backend>(be: &B, x: &[f32], w: &[f32], shape: (usize, usize, usize)) -> Vec<f32> {
    let m = shape.2;
    product_onto(be, &vec![0.0; shape.0 * m], x, w, shape, false)
}

/// Runs `out = x w^T` (or `out = acc + x w^T` with `accumulate`, through `linear_acc`) inside a
/// captured program replayed twice over fresh inputs, and returns `out`.
fn product_onto<B: Backend>(
    be: &B,
    acc: &[f32],
    x: &[f32],
    w: &[f32],
    (n, k, m): (usize, usize, usize),
    accumulate: bool,
) -> Vec<f32> {
    let xb = be.upload(x, BufRole::Activation).unwrap();
    let wb = be.upload(w, BufRole::Weight).unwrap();
    let mut out = be.upload(acc, BufRole::Activation).unwrap();
    let key = n * 1_000_003 + m * 2 + usize::from(accumulate);
    let mut program = |b: &B| {
        let args = LinearArgs {
            x: &xb,
            w: &wb,
            out: &mut out,
            n,
            k,
            m,
        };
        if accumulate {
            b.linear_acc(args)
        } else {
            b.linear(args)
        }
    };
    be.run(key, &mut program).unwrap();
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

/// Row lengths from which the GEMV kernels take a product in the two A/B settings: the default
/// (the codec's short products too) and the LM's products only (short ones on cuBLAS).
const GEMV_MIN_KS: [usize; 2] = [chorus_cuda::GEMV_MIN_K, 4096];

/// A CUDA backend taking the GEMV kernels from `gemv_min_k`, or `None` without a device.
fn cuda_with(precision: Precision, gemv_min_k: usize) -> Option<chorus_cuda::CudaBackend> {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return None;
    }
    let opts = chorus_cuda::CudaOptions {
        precision,
        gemv_min_k,
        ..Default::default()
    };
    Some(chorus_cuda::CudaBackend::new(opts).unwrap())
}

/// `linear_acc` on the GEMV kernel (at most two rows, long enough rows) and on cuBLAS (`beta` 1),
/// each against the CPU; the codec's short products run both ways.
#[test]
fn accumulating_products_match_the_cpu() {
    let cpu = cpu();
    for precision in PRECISIONS {
        for gemv_min_k in GEMV_MIN_KS {
            let Some(cuda) = cuda_with(precision, gemv_min_k) else {
                return;
            };
            for (n, k, m) in [
                (2, 4096, 1030),
                (2, 512, 512),
                (1, 2048, 512),
                (6, 2048, 512),
            ] {
                let mut r = Rng::new((n * k + m) as u64);
                let acc = r.vec(n * m, 1.0);
                let x = r.vec(n * k, 1.0);
                let w = r.vec(m * k, (3.0 / k as f32).sqrt());
                let want = product_onto(&cpu, &acc, &x, &w, (n, k, m), true);
                let got = product_onto(&cuda, &acc, &x, &w, (n, k, m), true);
                let name = format!("linear_acc n={n} k={k} m={m} gemv_min_k={gemv_min_k}");
                assert_parity(&name, precision, &got, &want);
                // The product is really added: without `acc` the result differs.
                let plain = product(&cpu, &x, &w, (n, k, m));
                assert!(
                    plain.iter().zip(&want).any(|(a, b)| (a - b).abs() > 0.1),
                    "{name}"
                );
            }
        }
    }
}

/// `out = act(LayerNorm(x) w^T)` through `layer_norm_linear`, inside a captured program.
fn norm_product<B: Backend>(
    be: &B,
    x: &[f32],
    w: &[f32],
    (n, k, m): (usize, usize, usize),
    gelu: bool,
) -> Vec<f32> {
    let mut r = Rng::new(7);
    let gamma = be.upload(&r.vec(k, 1.0), BufRole::Weight).unwrap();
    let beta = be.upload(&r.vec(k, 0.5), BufRole::Weight).unwrap();
    let xb = be.upload(x, BufRole::Activation).unwrap();
    let wb = be.upload(w, BufRole::Weight).unwrap();
    let mut norm = be.zeros(n * k, BufRole::Activation).unwrap();
    let mut out = be.zeros(n * m, BufRole::Activation).unwrap();
    let key = 7_000_000 + n * 100_003 + m * 2 + usize::from(gelu);
    be.run(key, &mut |b: &B| {
        b.layer_norm_linear(NormLinearArgs {
            norm: LayerNormArgs {
                x: &xb,
                gamma: &gamma,
                beta: &beta,
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
    })
    .unwrap();
    be.download(&out).unwrap()
}

/// The pre-norm product fused into one GEMV kernel (at most two rows, `k` from the threshold up
/// to 4096) and apart (norm kernel, product, GELU kernel), against the CPU.
#[test]
fn norm_products_match_the_cpu() {
    let cpu = cpu();
    for precision in PRECISIONS {
        for gemv_min_k in GEMV_MIN_KS {
            let Some(cuda) = cuda_with(precision, gemv_min_k) else {
                return;
            };
            for (n, k, m, gelu) in [
                (1, 512, 1536, false),
                (2, 512, 2048, true),
                (2, 2048, 520, false),
                (2, 8192, 64, true),
                (6, 512, 96, true),
                (2, 64, 40, false),
            ] {
                let mut r = Rng::new((n * k + m) as u64);
                // Rows far from zero mean and unit variance, so that a missing norm shows.
                let x: Vec<f32> = r.vec(n * k, 3.0).iter().map(|v| v + 2.0).collect();
                let w = r.vec(m * k, (3.0 / k as f32).sqrt());
                let want = norm_product(&cpu, &x, &w, (n, k, m), gelu);
                let got = norm_product(&cuda, &x, &w, (n, k, m), gelu);
                let name = format!(
                    "layer_norm_linear n={n} k={k} m={m} gelu={gelu} gemv_min_k={gemv_min_k}"
                );
                assert_parity(&name, precision, &got, &want);
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

/// A CUDA backend whose products of at most two rows take the bulk-copy GEMV (`lm_gemv_tma`),
/// or `None` without a device or below sm_90 (where it does not run).
fn cuda_tma(precision: Precision) -> Option<chorus_cuda::CudaBackend> {
    let be = cuda_with_opts(chorus_cuda::CudaOptions {
        precision,
        gemv_tma: true,
        ..Default::default()
    })?;
    if be.arch().0 < 9 {
        eprintln!("skipped: the bulk-copy GEMV needs sm_90");
        return None;
    }
    Some(be)
}

fn cuda_with_opts(opts: chorus_cuda::CudaOptions) -> Option<chorus_cuda::CudaBackend> {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return None;
    }
    Some(chorus_cuda::CudaBackend::new(opts).unwrap())
}

/// The bulk-copy GEMV against the CPU, and bit for bit against the register GEMV (it sums in the
/// same order): rows of whole, several and partial segments, `linear` and `linear_acc`.
#[test]
fn bulk_copy_gemv_matches_the_cpu_and_the_register_gemv() {
    let cpu = cpu();
    for precision in PRECISIONS {
        let (Some(tma), Some(plain)) = (cuda_tma(precision), cuda(precision)) else {
            return;
        };
        for (n, k, m, accumulate) in [
            (2, 4096, 16385, false),
            (1, 4096, 3000, false),
            (2, 12288, 4096, true),
            (2, 1032, 517, false),
            (1, 520, 70, true),
            (2, 6144, 2113, true),
        ] {
            let mut r = Rng::new((n * k + m) as u64 + 77);
            let acc = r.vec(n * m, 1.0);
            let x = r.vec(n * k, 1.0);
            let w = r.vec(m * k, (3.0 / k as f32).sqrt());
            let name = format!("bulk-copy gemv n={n} k={k} m={m} acc={accumulate}");
            let before = tma.bulk_copy_gemvs();
            let got = product_onto(&tma, &acc, &x, &w, (n, k, m), accumulate);
            assert!(
                tma.bulk_copy_gemvs() > before,
                "{name}: the bulk-copy GEMV did not run"
            );
            let want = product_onto(&cpu, &acc, &x, &w, (n, k, m), accumulate);
            assert_parity(&name, precision, &got, &want);
            let reg = product_onto(&plain, &acc, &x, &w, (n, k, m), accumulate);
            let same = got
                .iter()
                .zip(&reg)
                .filter(|(a, b)| a.to_bits() == b.to_bits())
                .count();
            assert_eq!(
                same,
                got.len(),
                "{name}: {same} of {} outputs equal the register GEMV's",
                got.len()
            );
        }
    }
}

/// Weight bandwidth of the register and the bulk-copy GEMV on each of the LM's product shapes at
/// one song (2 rows): eight weights of each shape in one program (past the L2), both kernels.
#[test]
fn gemv_bandwidth_by_shape_register_and_bulk_copy() {
    let (Some(plain), Some(tma)) = (cuda(Precision::Bf16), cuda_tma(Precision::Bf16)) else {
        return;
    };
    let copies = 8;
    for (name, k, m) in [
        ("o_proj 34 MB", 4096usize, 4096usize),
        ("qkv 50 MB", 4096, 6144),
        ("down 100 MB", 12288, 4096),
        ("gate_up 201 MB", 4096, 24576),
    ] {
        let mut line = format!("gemv {name:<15}");
        for (label, be) in [("register", &plain), ("bulk-copy", &tma)] {
            let weights: Vec<_> = (0..copies)
                .map(|_| be.zeros(k * m, BufRole::Weight).unwrap())
                .collect();
            let x = be.zeros(2 * k, BufRole::Activation).unwrap();
            let mut out = be.zeros(2 * m, BufRole::Activation).unwrap();
            let key = 9_500 + m + k;
            be.run(key, &mut |b: &chorus_cuda::CudaBackend| {
                for w in &weights {
                    b.linear(LinearArgs {
                        x: &x,
                        w,
                        out: &mut out,
                        n: 2,
                        k,
                        m,
                    })?;
                }
                Ok(())
            })
            .unwrap();
            let ms = median_ms(be, key);
            let bytes = (copies * k * m * 2) as f64;
            line += &format!(
                "  {label} {:.1} us {:.0} GB/s",
                ms * 1e3 / copies as f64,
                bytes / ms / 1e6
            );
            assert!(ms > 0.0);
        }
        eprintln!("{line}");
    }
}
