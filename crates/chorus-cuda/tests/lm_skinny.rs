//! `fused_linear` (kernels/lm_skinny.cu for at most 64 bf16 rows, the ops apart otherwise) against
//! the CPU backend for every epilogue, with and without the norm, dense and int8; the batch
//! invariance of the skinny kernel in bits; and the bandwidth it streams weights at on the LM's
//! real shapes, beside the ops apart.

mod common;

use chorus_core::lm_ops::{
    Epilogue, FusedLinearArgs, LinearScratch, LinearWeight, RowNorm, SequencedWeight,
};
use chorus_core::{Backend, BufRole, LmOps, Precision};
use chorus_cuda::{CudaBackend, CudaOptions};
use common::*;

/// Hadamard block of the int8 cases.
const GROUP: usize = 256;

/// One product's host operands.
struct Case {
    n: usize,
    k: usize,
    m: usize,
    epilogue: Epilogue,
    norm: bool,
    q8: bool,
}

impl Case {
    fn out_cols(&self) -> usize {
        if self.epilogue == Epilogue::Swiglu {
            self.m / 2
        } else {
            self.m
        }
    }

    fn name(&self) -> String {
        format!(
            "fused_linear n={} k={} m={} {:?} norm={} q8={}",
            self.n, self.k, self.m, self.epilogue, self.norm, self.q8
        )
    }
}

/// Host data of a case: input rows far from unit RMS (so a missing norm shows), weights, norm
/// weight, the output's prior contents, int8 rows and scales.
struct Data {
    x: Vec<f32>,
    w: Vec<f32>,
    gamma: Vec<f32>,
    prior: Vec<f32>,
    q: Vec<i8>,
    scales: Vec<f32>,
}

fn data(c: &Case, seed: u64) -> Data {
    let mut r = Rng::new(seed);
    let x = r.vec(c.n * c.k, 3.0).iter().map(|v| v + 0.5).collect();
    let w = r.vec(c.m * c.k, (3.0 / c.k as f32).sqrt());
    let gamma = r.vec(c.k, 1.0).iter().map(|v| v + 1.0).collect();
    let prior = r.vec(c.n * c.out_cols(), 1.0);
    let q = (0..c.m * c.k)
        .map(|_| (r.below(255) as i32 - 127) as i8)
        .collect();
    let scales = (0..c.m)
        .map(|_| r.uniform(1.0).abs() * 0.01 + 1e-3)
        .collect();
    Data {
        x,
        w,
        gamma,
        prior,
        q,
        scales,
    }
}

/// Runs the case inside a captured program on `be` and returns `out`.
fn run<B: LmOps>(be: &B, c: &Case, d: &Data, key: usize) -> Vec<f32> {
    let x = be.upload(&d.x, BufRole::Activation).unwrap();
    let gamma = be.upload(&d.gamma, BufRole::Weight).unwrap();
    let dense = be.upload(&d.w, BufRole::Weight).unwrap();
    let q8 = be.upload_q8(&d.q, &d.scales, c.m, c.k).unwrap();
    let mut out = be.upload(&d.prior, BufRole::Activation).unwrap();
    let mut normed = be.zeros(c.n * c.k, BufRole::Activation).unwrap();
    let mut rot = be.zeros(c.n * c.k, BufRole::Activation).unwrap();
    let mut product = be.zeros(c.n * c.m, BufRole::Activation).unwrap();
    // Each weight the other's successor: a backend that prefetches the next product's weights
    // (`CudaOptions::next_prefetch_bytes`) does so in every case.
    let q8_weight = LinearWeight::Q8 {
        weight: &q8,
        group: GROUP,
    };
    let swiglu = c.epilogue == Epilogue::Swiglu;
    let seq = [
        LinearWeight::Dense(&dense),
        q8_weight,
        LinearWeight::Dense(&dense),
    ]
    .map(|w| SequencedWeight { w, k: c.k, swiglu });
    be.sequence_weights(&seq).unwrap();
    let mut program = |b: &B| {
        b.fused_linear(FusedLinearArgs {
            x: &x,
            norm: c.norm.then_some(RowNorm {
                weight: &gamma,
                eps: 1e-6,
            }),
            w: if c.q8 {
                LinearWeight::Q8 {
                    weight: &q8,
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
            epilogue: c.epilogue,
        })
    };
    be.run(key, &mut program).unwrap();
    be.download(&out).unwrap()
}

/// A backend with the skinny kernel on or off, and dense products on it too (`invariant`).
fn cuda_skinny(precision: Precision, skinny_mma: bool, invariant: bool) -> Option<CudaBackend> {
    cuda_with(CudaOptions {
        precision,
        skinny_mma,
        batch_invariant: invariant,
        ..Default::default()
    })
}

const EPILOGUES: [Epilogue; 3] = [Epilogue::Store, Epilogue::Accumulate, Epilogue::Swiglu];

#[test]
fn fused_products_match_the_cpu() {
    let cpu = cpu();
    for (precision, invariant) in PRECISIONS.iter().flat_map(|&p| [(p, false), (p, true)]) {
        let Some(cuda) = cuda_skinny(precision, true, invariant) else {
            return;
        };
        let mut key = 0;
        // Row counts at every tile edge and past one launch (65 and 130: the ops apart, or row
        // groups in the invariant mode); a last weight tile cut short (m 1000 and 520); k 512 (one
        // chunk per warp slice) to 4096.
        for (n, k, m) in [
            (1, 4096, 1000),
            (2, 512, 520),
            (7, 1024, 2048),
            (9, 512, 1000),
            (16, 4096, 768),
            (17, 512, 520),
            (33, 1024, 1000),
            (64, 512, 520),
            (65, 512, 256),
            (130, 512, 520),
            // The int8 GEMM: k split over blocks (few weight tiles), a second activation tile cut
            // short, one split (many tiles), a partial last weight tile.
            (128, 4096, 1000),
            (200, 1024, 520),
            (256, 512, 8448),
        ] {
            for epilogue in EPILOGUES {
                for (norm, q8) in [(false, false), (true, false), (false, true), (true, true)] {
                    let c = Case {
                        n,
                        k,
                        m,
                        epilogue,
                        norm,
                        q8,
                    };
                    let d = data(&c, key as u64 + 1);
                    let (before, before_gemm) = (cuda.skinny_products(), cuda.q8_gemm_products());
                    let want = run(&cpu, &c, &d, key);
                    let got = run(&cuda, &c, &d, key);
                    assert_parity(&c.name(), precision, &got, &want);
                    let took = cuda.skinny_products() > before;
                    let bf16 = precision == Precision::Bf16;
                    let expect = bf16 && ((n <= chorus_cuda::SKINNY_MAX_ROWS && q8) || invariant);
                    let name = format!("{} invariant={invariant}", c.name());
                    assert_eq!(took, expect, "{name}: skinny kernel taken");
                    let took_gemm = cuda.q8_gemm_products() > before_gemm;
                    let expect_gemm = bf16
                        && q8
                        && !invariant
                        && (chorus_cuda::SKINNY_MAX_ROWS + 1..=chorus_cuda::Q8_GEMM_MAX_ROWS)
                            .contains(&n);
                    assert_eq!(took_gemm, expect_gemm, "{name}: int8 GEMM taken");
                    key += 1;
                }
            }
        }
    }
}

/// The int8 GEMM under both schedules (stream-K, and whole tiles with k split in equal parts)
/// and, on sm_90, both instruction sets (mma.sync and warpgroup wgmma) against the CPU, on
/// shapes where a block's range starts and ends inside tiles, spans several tiles, or splits a
/// tile in many parts; each result is the same bits when run again (the parts are added in block
/// order, not in the order blocks finish).
#[test]
fn int8_gemm_schedules_match_the_cpu() {
    let cpu = cpu();
    for (stream_k, wgmma) in [(true, false), (false, false), (true, true), (false, true)] {
        let Some(cuda) = cuda_with(CudaOptions {
            precision: Precision::Bf16,
            q8_gemm_stream_k: stream_k,
            q8_gemm_wgmma: wgmma,
            ..Default::default()
        }) else {
            return;
        };
        let hopper = cuda.arch() == (9, 0);
        assert_eq!(
            cuda.q8_gemm_wgmma(),
            wgmma && hopper,
            "wgmma taken on sm_90 only"
        );
        if wgmma && !hopper {
            continue;
        }
        let mut key = 0;
        for (n, k, m, epilogue) in [
            (65, 4096, 1000, Epilogue::Store),
            (128, 12288, 512, Epilogue::Accumulate),
            (100, 512, 8448, Epilogue::Store),
            (256, 1024, 2 * 12288, Epilogue::Swiglu),
            (129, 2048, 2 * 1000, Epilogue::Swiglu),
        ] {
            for norm in [false, true] {
                let c = Case {
                    n,
                    k,
                    m,
                    epilogue,
                    norm,
                    q8: true,
                };
                let d = data(&c, key as u64 + 7);
                let before = cuda.q8_gemm_products();
                let want = run(&cpu, &c, &d, key);
                let got = run(&cuda, &c, &d, key);
                let name = format!("{} stream_k={stream_k} wgmma={wgmma}", c.name());
                assert!(cuda.q8_gemm_products() > before, "{name}: int8 GEMM taken");
                assert_parity(&name, Precision::Bf16, &got, &want);
                let again = run(&cuda, &c, &d, key + 1);
                assert!(
                    got.iter()
                        .zip(&again)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name}: a second run gave other bits"
                );
                key += 2;
            }
        }
    }
}

/// The int8 products take their rotated input as f16 (kernels/lm_skinny.cu): inputs in the
/// thousands (rotated values up to ~1.5e4, where bf16 and f16 both stay exact to their bits) match
/// the CPU, and an input past the f16 range after rotation saturates instead of turning the row's
/// outputs to inf or NaN.
#[test]
fn int8_products_keep_large_inputs_finite() {
    let cpu = cpu();
    let Some(cuda) = cuda_skinny(Precision::Bf16, true, false) else {
        return;
    };
    for (key, (n, epilogue)) in [
        (1, Epilogue::Store),
        (9, Epilogue::Accumulate),
        (64, Epilogue::Store),
        (128, Epilogue::Accumulate),
    ]
    .into_iter()
    .enumerate()
    {
        let c = Case {
            n,
            k: 1024,
            m: 520,
            epilogue,
            norm: false,
            q8: true,
        };
        let mut d = data(&c, 40 + key as u64);
        for v in d.x.iter_mut() {
            *v *= 1000.0;
        }
        let want = run(&cpu, &c, &d, 2 * key);
        let got = run(&cuda, &c, &d, 2 * key);
        assert_parity(
            &format!("{} inputs x1000", c.name()),
            Precision::Bf16,
            &got,
            &want,
        );
        // One input of each row at 1e7: its rotated group holds 1e7 / 16, past 65504.
        for r in 0..n {
            d.x[r * c.k + 3] = 1e7;
        }
        let got = run(&cuda, &c, &d, 2 * key + 1);
        let bad = got.iter().filter(|v| !v.is_finite()).count();
        assert_eq!(
            bad,
            0,
            "{}: {bad} outputs not finite past the f16 range",
            c.name()
        );
    }
}

/// One case on the CPU, on a backend without a path (`base`) and on one with it (`with`): the
/// result on `with` within the bf16 bound of the CPU's, and with `same_bits` bit for bit
/// `base`'s. Returns whether `taken` (a counter of `with`'s) grew, i.e. the path ran.
fn against_base(
    (cpu, base, with): (&chorus_cpu::CpuBackend, &CudaBackend, &CudaBackend),
    c: &Case,
    (key, same_bits): (usize, bool),
    taken: fn(&CudaBackend) -> usize,
) -> bool {
    let d = data(c, key as u64 + 7);
    let before = taken(with);
    let want = run(cpu, c, &d, key);
    let plain = run(base, c, &d, key);
    let got = run(with, c, &d, key);
    assert_parity(&c.name(), Precision::Bf16, &got, &want);
    if same_bits {
        assert!(
            got.iter()
                .zip(&plain)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}: the path changes the bits",
            c.name()
        );
    }
    taken(with) > before
}

/// The persistent grid (`CudaOptions::skinny_persistent`) gives the same bits as one block a
/// tile, and both match the CPU, on products with more tiles than resident blocks: an odd number
/// of weight groups per warp (each tile loads its own first group) and an even one (the next
/// tile's first group loads during the current one's last), every epilogue, dense (in the
/// batch-invariant mode, with the norm) and int8, 2 and 40 rows.
#[test]
fn persistent_skinny_grid_keeps_the_bits() {
    let cpu = cpu();
    let backends = [false, true].map(|persistent| {
        cuda_with(CudaOptions {
            precision: Precision::Bf16,
            batch_invariant: true,
            skinny_persistent: persistent,
            ..Default::default()
        })
    });
    let [Some(tiled), Some(persistent)] = backends else {
        return;
    };
    let mut key = 0;
    // k 512 int8 and 1024 dense: one group per warp; k 4096: two (int8) and four (dense).
    for (n, k) in [(2, 512), (2, 1024), (2, 4096), (40, 4096)] {
        for epilogue in EPILOGUES {
            for q8 in [false, true] {
                let c = Case {
                    n,
                    k,
                    m: 12_288 + 40,
                    epilogue,
                    norm: !q8,
                    q8,
                };
                let taken = against_base(
                    (&cpu, &tiled, &persistent),
                    &c,
                    (key, true),
                    CudaBackend::skinny_persistent_products,
                );
                assert!(taken, "{}: the persistent grid was not taken", c.name());
                key += 1;
            }
        }
    }
    assert_eq!(tiled.skinny_persistent_products(), 0);
}

/// A q/k/v-sized product (k 4096, m 6144) with its norm, `n` rows, under every epilogue.
fn normed_4096(n: usize, q8: bool) -> impl Iterator<Item = Case> {
    EPILOGUES.into_iter().map(move |epilogue| Case {
        n,
        k: 4096,
        m: 6144,
        epilogue,
        norm: true,
        q8,
    })
}

/// The L2 prefetch ahead of each product (`CudaOptions::l2_prefetch_bytes`) changes no bits and
/// is taken where it should be: the one- and two-row dense GEMV, the skinny kernel and the int8
/// GEMM, every epilogue (SwiGLU prefetches from both halves); products on cuBLAS get none.
#[test]
fn l2_prefetch_changes_no_bits() {
    let cpu = cpu();
    let backends = [0usize, 4 << 20].map(|bytes| {
        cuda_with(CudaOptions {
            precision: Precision::Bf16,
            l2_prefetch_bytes: bytes,
            ..Default::default()
        })
    });
    let [Some(plain), Some(prefetching)] = backends else {
        return;
    };
    let mut key = 0;
    for (n, q8) in [
        (1, false),
        (2, false),
        (8, false),
        (2, true),
        (40, true),
        (128, true),
    ] {
        for c in normed_4096(n, q8) {
            let taken = against_base(
                (&cpu, &plain, &prefetching),
                &c,
                (key, true),
                CudaBackend::l2_prefetches,
            );
            // Without programmatic launch (before sm_90) the backend turns the prefetch off.
            let expect = prefetching.l2_prefetch_bytes() > 0 && (q8 || n <= 2);
            assert_eq!(taken, expect, "{}: prefetch taken", c.name());
            key += 1;
        }
    }
    assert_eq!(plain.l2_prefetches(), 0);
}

/// The next product's weights asked of L2 from the end of each skinny product
/// (`CudaOptions::next_prefetch_bytes`, whole rows or each warp's first group) change no bits and
/// are taken by every skinny product whose weight has a successor: every epilogue (SwiGLU from
/// both halves), dense (batch-invariant) and int8, 1, 2 and 40 rows, a budget past the successor's
/// size and one of a few rows; a freed weight leaves the sequence.
#[test]
fn next_prefetch_changes_no_bits() {
    let cpu = cpu();
    let with = |bytes: usize, first: bool| {
        cuda_with(CudaOptions {
            precision: Precision::Bf16,
            batch_invariant: true,
            next_prefetch_bytes: bytes,
            next_prefetch_first_groups: first,
            ..Default::default()
        })
    };
    let Some(plain) = with(0, false) else {
        return;
    };
    if plain.arch().0 < 9 {
        eprintln!("skipped: the bulk L2 prefetch needs sm_90");
        return;
    }
    let mut key = 0;
    for (bytes, first) in [(64 << 20, false), (64 << 10, false), (64 << 20, true)] {
        let Some(prefetching) = with(bytes, first) else {
            return;
        };
        for (n, q8) in [(1, true), (2, true), (40, true), (2, false), (40, false)] {
            for c in normed_4096(n, q8) {
                let taken = against_base(
                    (&cpu, &plain, &prefetching),
                    &c,
                    (key, true),
                    CudaBackend::next_prefetches,
                );
                assert!(
                    taken,
                    "{} ({bytes} bytes, first groups {first}): not taken",
                    c.name()
                );
                key += 1;
            }
        }
    }
    assert_eq!(plain.next_prefetches(), 0);
    // a -> b -> a: two weights with a successor; freeing b leaves none.
    let a = plain.zeros(4096 * 64, BufRole::Weight).unwrap();
    let b = plain.zeros(4096 * 64, BufRole::Weight).unwrap();
    let before = plain.sequenced_weights();
    let seq = [&a, &b, &a].map(|w| SequencedWeight {
        w: LinearWeight::Dense(w),
        k: 4096,
        swiglu: false,
    });
    plain.sequence_weights(&seq).unwrap();
    assert_eq!(plain.sequenced_weights(), before + 2);
    drop(b);
    assert_eq!(plain.sequenced_weights(), before);
}

/// The int8 products' input rotation inside the skinny kernel (`CudaOptions::q8_fused_rotation`)
/// against the CPU and the rotation kernel: without a norm the same bits (the same radix-4 stages
/// and f16 rounding), with the norm within the bf16 bound (its sum of squares runs in another
/// order). 1 to 8 rows at k 2048 and 4096, every epilogue; 9 rows and k 12288 keep the kernel.
#[test]
fn int8_rotation_inside_the_product_matches() {
    let cpu = cpu();
    let backends = [false, true].map(|on| {
        cuda_with(CudaOptions {
            precision: Precision::Bf16,
            q8_fused_rotation: on,
            ..Default::default()
        })
    });
    let [Some(apart), Some(fused)] = backends else {
        return;
    };
    let mut key = 0;
    for (n, k, fits) in [
        (1, 4096, true),
        (2, 2048, true),
        (5, 4096, true),
        (8, 4096, true),
        (9, 4096, false),
        (2, 12_288, false),
    ] {
        for epilogue in EPILOGUES {
            for norm in [false, true] {
                let c = Case {
                    n,
                    k,
                    m: 1000,
                    epilogue,
                    norm,
                    q8: true,
                };
                let taken = against_base(
                    (&cpu, &apart, &fused),
                    &c,
                    (key, !norm),
                    CudaBackend::q8_fused_rotations,
                );
                assert_eq!(taken, fits, "{}: rotation inside the product", c.name());
                key += 1;
            }
        }
    }
    assert_eq!(apart.q8_fused_rotations(), 0);
}

/// The fusions really act: without the norm, the SwiGLU or the prior output the CPU result
/// differs, so the parity above cannot pass with a fusion dropped.
#[test]
fn each_fusion_changes_the_result() {
    let cpu = cpu();
    let base = Case {
        n: 3,
        k: 512,
        m: 520,
        epilogue: Epilogue::Store,
        norm: false,
        q8: false,
    };
    let d = data(&base, 5);
    let plain = run(&cpu, &base, &d, 0);
    let normed = run(&cpu, &Case { norm: true, ..base }, &d, 1);
    let acc = run(
        &cpu,
        &Case {
            epilogue: Epilogue::Accumulate,
            ..base
        },
        &d,
        2,
    );
    assert!(rel_l2(&normed, &plain) > 0.1, "norm");
    assert!(rel_l2(&acc, &plain) > 0.1, "accumulate");
    let sw = Case {
        epilogue: Epilogue::Swiglu,
        ..base
    };
    let d2 = data(&sw, 5);
    let swiglu = run(&cpu, &sw, &d2, 3);
    let half: Vec<f32> = plain
        .chunks(base.m)
        .flat_map(|r| r[..base.m / 2].to_vec())
        .collect();
    assert!(rel_l2(&swiglu, &half) > 0.1, "swiglu");
}

/// A row's bits do not depend on the rows beside it: row `r` of a 64-row call equals the same
/// input alone, first of 2, in the middle of 9 and of 33 rows (bf16 in the batch-invariant mode,
/// every epilogue, dense and int8).
#[test]
fn a_rows_bits_do_not_depend_on_the_other_rows() {
    let Some(cuda) = cuda_skinny(Precision::Bf16, true, true) else {
        return;
    };
    let (k, m) = (1024, 1000);
    let mut key = 1000;
    for epilogue in EPILOGUES {
        for (norm, q8) in [(false, false), (true, false), (false, true)] {
            let full = Case {
                n: 64,
                k,
                m,
                epilogue,
                norm,
                q8,
            };
            let d = data(&full, 77);
            let all = run(&cuda, &full, &d, key);
            key += 1;
            let cols = full.out_cols();
            // 65 and 130 rows: the second and third launch's row groups.
            for (n, at, src) in [
                (1, 0, 5),
                (2, 0, 40),
                (9, 4, 63),
                (33, 20, 0),
                (65, 64, 7),
                (130, 100, 50),
            ] {
                // `src`'s row placed at `at` among other rows of the full input.
                let c = Case { n, ..full };
                let mut dd = data(&c, 99 + n as u64);
                dd.x[at * k..(at + 1) * k].copy_from_slice(&d.x[src * k..(src + 1) * k]);
                dd.prior[at * cols..(at + 1) * cols]
                    .copy_from_slice(&d.prior[src * cols..(src + 1) * cols]);
                let (w, g, q, s) = (&d.w, &d.gamma, &d.q, &d.scales);
                dd.w.clone_from(w);
                dd.gamma.clone_from(g);
                dd.q.clone_from(q);
                dd.scales.clone_from(s);
                let got = run(&cuda, &c, &dd, key);
                key += 1;
                let want = &all[src * cols..(src + 1) * cols];
                let row = &got[at * cols..(at + 1) * cols];
                let same = row
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{}: row {src} differs as row {at} of {n}",
                    full.name()
                );
            }
        }
    }
}

/// Median device time of the captured program `key` over 20 replays, in ms.
/// A bench weight (dense or int8) as a product takes it.
fn as_weight<'a>(
    (dense, qw): &'a (
        Option<chorus_cuda::CudaBuf>,
        Option<chorus_cuda::CudaQWeight>,
    ),
) -> LinearWeight<'a, CudaBackend> {
    match (dense, qw) {
        (Some(d), _) => LinearWeight::Dense(d),
        (_, Some(q)) => LinearWeight::Q8 {
            weight: q,
            group: GROUP,
        },
        _ => unreachable!("every layer has one kind of weight"),
    }
}

fn median_ms(be: &CudaBackend, key: usize) -> f64 {
    let mut t = be.time_replay(key, 20).unwrap();
    t.sort_by(f32::total_cmp);
    f64::from(t[t.len() / 2])
}

/// The weight bandwidth of one LM layer's four products (norm + q/k/v, o + residual, norm +
/// gate/up + SwiGLU, down + residual) over four layers (1.55 GB bf16, far past the L2), per row
/// count, on the skinny kernel (the batch-invariant mode) and as the ops apart, dense and int8.
/// Prints figures.
#[test]
fn skinny_products_bandwidth_by_row_count() {
    let (h, qkv, inter) = (4096usize, 6144usize, 12288usize);
    let shapes = [
        (h, qkv, Epilogue::Store, true),
        (h, h, Epilogue::Accumulate, false),
        (h, 2 * inter, Epilogue::Swiglu, true),
        (inter, h, Epilogue::Accumulate, false),
    ];
    let layers = 4;
    // (skinny kernel, batch-invariant mode): the skinny kernel at every row count, the default
    // (int8 past 64 rows on the GEMM), the ops apart.
    for (skinny, invariant) in [(true, true), (true, false), (false, true)] {
        let Some(be) = cuda_skinny(Precision::Bf16, skinny, invariant) else {
            return;
        };
        for q8 in [false, true] {
            let weights: Vec<_> = (0..layers)
                .flat_map(|_| shapes.iter().map(|&(k, m, _, _)| (k, m)))
                .map(|(k, m)| {
                    if q8 {
                        let zeros = vec![0i8; k * m];
                        (
                            None,
                            Some(be.upload_q8(&zeros, &vec![1.0; m], m, k).unwrap()),
                        )
                    } else {
                        (Some(be.zeros(k * m, BufRole::Weight).unwrap()), None)
                    }
                })
                .collect();
            // The layers' order, and the first product again after the last (the next run).
            let seq: Vec<_> = weights
                .iter()
                .chain(weights.first())
                .enumerate()
                .map(|(i, w)| {
                    let (k, _, epilogue, _) = shapes[i % shapes.len()];
                    SequencedWeight {
                        w: as_weight(w),
                        k,
                        swiglu: epilogue == Epilogue::Swiglu,
                    }
                })
                .collect();
            be.sequence_weights(&seq).unwrap();
            let gamma = be.upload(&vec![1.0; inter], BufRole::Weight).unwrap();
            let per_weight = if q8 { 1 } else { 2 };
            let bytes: usize = layers
                * shapes
                    .iter()
                    .map(|&(k, m, _, _)| k * m * per_weight)
                    .sum::<usize>();
            for n in [1usize, 2, 4, 8, 16, 32, 64, 128, 256] {
                if !invariant && n < 128 {
                    continue;
                }
                let x = be.zeros(n * inter, BufRole::Activation).unwrap();
                let mut out = be.zeros(n * 2 * inter, BufRole::Activation).unwrap();
                let mut s1 = be.zeros(n * inter, BufRole::Activation).unwrap();
                let mut s2 = be.zeros(n * inter, BufRole::Activation).unwrap();
                let mut s3 = be.zeros(n * 2 * inter, BufRole::Activation).unwrap();
                let key = 20_000
                    + n * 8
                    + usize::from(q8) * 4
                    + usize::from(skinny) * 2
                    + usize::from(invariant);
                be.run(key, &mut |b: &CudaBackend| {
                    for (i, weight) in weights.iter().enumerate() {
                        let (k, m, epilogue, norm) = shapes[i % shapes.len()];
                        let w = as_weight(weight);
                        b.fused_linear(FusedLinearArgs {
                            x: &x,
                            norm: norm.then_some(RowNorm {
                                weight: &gamma,
                                eps: 1e-6,
                            }),
                            w,
                            out: &mut out,
                            scratch: LinearScratch {
                                normed: &mut s1,
                                rot: &mut s2,
                                product: &mut s3,
                            },
                            n,
                            k,
                            m,
                            epilogue,
                        })?;
                    }
                    Ok(())
                })
                .unwrap();
                let ms = median_ms(&be, key);
                let path = match (skinny, invariant) {
                    (true, true) => "skinny kernel",
                    (true, false) => "default",
                    _ => "ops apart",
                };
                let kind = if q8 { "int8" } else { "bf16" };
                eprintln!(
                    "fused products {kind} n={n:>3} ({path}): {ms:.3} ms for {:.2} GB of weights = {:.0} GB/s",
                    bytes as f64 / 1e9,
                    bytes as f64 / ms / 1e6
                );
                assert!(ms > 0.0);
            }
        }
    }
}

/// `fused_linear` on the bulk-copy GEMV (`CudaOptions::gemv_tma`, sm_90): one and two rows,
/// every epilogue with and without the norm, rows of one, several and a partial segment (k 4096,
/// 12288, 1032), against the CPU; int8 weights and more rows keep their kernels.
#[test]
fn bulk_copy_fused_products_match_the_cpu() {
    let cpu = cpu();
    for precision in PRECISIONS {
        let Some(cuda) = cuda_with(CudaOptions {
            precision,
            gemv_tma: true,
            ..Default::default()
        }) else {
            return;
        };
        if cuda.arch().0 < 9 {
            eprintln!("skipped: the bulk-copy GEMV needs sm_90");
            return;
        }
        let mut key = 500;
        for (n, k, m) in [
            (1, 4096, 1000),
            (2, 12288, 514),
            (2, 1032, 3000),
            (3, 1024, 256),
        ] {
            for epilogue in EPILOGUES {
                for (norm, q8) in [(false, false), (true, false), (true, true)] {
                    // The int8 rows' rotation takes whole groups (a partial segment stays bf16).
                    if q8 && k % GROUP != 0 {
                        continue;
                    }
                    let c = Case {
                        n,
                        k,
                        m,
                        epilogue,
                        norm,
                        q8,
                    };
                    let d = data(&c, key as u64 + 11);
                    let before = cuda.bulk_copy_gemvs();
                    let want = run(&cpu, &c, &d, key);
                    let got = run(&cuda, &c, &d, key);
                    let name = format!("{} (bulk-copy GEMV)", c.name());
                    assert_parity(&name, precision, &got, &want);
                    let took = cuda.bulk_copy_gemvs() > before;
                    assert_eq!(took, n <= 2 && !q8, "{name}: bulk-copy GEMV taken");
                    key += 1;
                }
            }
        }
    }
}
