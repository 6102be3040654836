//! The rotation with the KV write in one kernel (`CudaOptions::fused_rope_kv`,
//! `LmOps::rope_paged_attention`): a prompt, then decode steps, over several rows, with and
//! without q/k norms, over caches in the storage type and 8-bit caches, under a sliding window.
//! Every call's output, rotated qkv and the caches at the end equal the two ops apart bit for bit,
//! and the CPU backend's within the precision's tolerance.

use super::*;
use crate::paged::*;
use chorus_cuda::CudaOptions;

fn backend(precision: Precision, fused_rope_kv: bool) -> Option<CudaBackend> {
    cuda_with(CudaOptions {
        precision,
        fused_rope_kv,
        ..Default::default()
    })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The RoPE table of `positions` (rotate-half, theta 10,000) and, with `norms`, q/k norm weights.
fn rope_bufs<B: LmOps>(
    be: &B,
    h: Heads,
    positions: usize,
    norms: bool,
    rng: &mut Rng,
) -> RopeBufs<B> {
    let half = h.hd / 2;
    let mut t = vec![0.0f32; positions * h.hd];
    for p in 0..positions {
        for j in 0..half {
            let a = p as f64 / 10_000f64.powf(2.0 * j as f64 / h.hd as f64);
            t[p * h.hd + j] = a.cos() as f32;
            t[p * h.hd + half + j] = a.sin() as f32;
        }
    }
    let norm = |rng: &mut Rng| {
        let w: Vec<f32> = rng.vec(h.hd, 0.5).iter().map(|v| v + 1.0).collect();
        be.upload(&w, BufRole::Weight).expect("norm")
    };
    RopeBufs {
        table: be.upload(&t, BufRole::Table).expect("rope table"),
        norms: norms.then(|| (norm(rng), norm(rng))),
    }
}

/// Runs the schedule on `be`: every call's (output, rotated qkv), then the caches (and scales).
fn schedule<B: LmOps>(
    be: &B,
    case: &Case,
    steps: &[(Vec<f32>, Vec<i32>)],
) -> (Vec<Vec<f32>>, Vec<f32>) {
    let h = case.heads;
    // Every row's blocks its own (a scattered permutation of 1..; block 0 is never used).
    let (block_size, max_blocks) = (16, 8);
    let n = case.rows * max_blocks;
    let blocks = 1 + n;
    let tables: Vec<i32> = (0..n).map(|i| (1 + (i * 7) % n) as i32).collect();
    let mut paged = if case.kv8 {
        Paged::new_fp8(be, h, (block_size, max_blocks, blocks), &tables).expect("fp8 caches")
    } else {
        let zeros = vec![0.0; blocks * block_size * h.kv_dim()];
        Paged::new(be, h, (block_size, max_blocks), &tables, (&zeros, &zeros)).expect("caches")
    };
    paged.window = case.window;
    let mut rng = Rng::new(case.seed);
    let rope = rope_bufs(be, h, 512, case.norms, &mut rng);
    let mut calls = Vec::new();
    for (qkv, start) in steps {
        let (out, rotated) = paged
            .call_rope(be, qkv, start, &rope)
            .expect("rope_paged_attention");
        calls.push([out, rotated].concat());
    }
    let mut caches = be.download(&paged.k).expect("k");
    caches.extend(be.download(&paged.v).expect("v"));
    if let Some((ks, vs)) = &paged.scales {
        caches.extend(be.download(ks).expect("k scales"));
        caches.extend(be.download(vs).expect("v scales"));
    }
    (calls, caches)
}

struct Case {
    heads: Heads,
    rows: usize,
    norms: bool,
    kv8: bool,
    window: Option<usize>,
    seed: u64,
}

/// A 20-token prompt on every row, then 30 decode steps (positions 20..50).
fn steps(case: &Case) -> Vec<(Vec<f32>, Vec<i32>)> {
    let mut rng = Rng::new(case.seed + 1);
    let w = case.heads.width();
    let mut s = vec![(rng.vec(case.rows * 20 * w, 2.0), vec![0; case.rows])];
    for p in 20..50 {
        s.push((rng.vec(case.rows * w, 2.0), vec![p; case.rows]));
    }
    s
}

#[test]
fn rotation_with_the_kv_write_equals_the_two_ops() {
    let cases = [
        Case {
            heads: QWEN,
            rows: 2,
            norms: true,
            kv8: false,
            window: None,
            seed: 701,
        },
        Case {
            heads: SMALL,
            rows: 3,
            norms: false,
            kv8: false,
            window: None,
            seed: 702,
        },
        Case {
            heads: QWEN,
            rows: 2,
            norms: true,
            kv8: true,
            window: None,
            seed: 703,
        },
        Case {
            heads: SMALL,
            rows: 2,
            norms: false,
            kv8: false,
            window: Some(24),
            seed: 704,
        },
    ];
    for precision in PRECISIONS {
        let (Some(fused), Some(apart)) = (backend(precision, true), backend(precision, false))
        else {
            return;
        };
        for case in &cases {
            // 8-bit caches need E4M3 conversions (sm_89).
            if case.kv8 && fused.arch() < (8, 9) {
                continue;
            }
            let name = format!(
                "rope+kv {}/{}x{} norms={} kv8={} window={:?} [{}]",
                case.heads.q,
                case.heads.kv,
                case.heads.hd,
                case.norms,
                case.kv8,
                case.window,
                precision.name()
            );
            let s = steps(case);
            let before = fused.fused_rope_kv_writes();
            let (got, got_caches) = schedule(&fused, case, &s);
            assert!(
                fused.fused_rope_kv_writes() > before,
                "{name}: the fused kernel did not run"
            );
            let (want, want_caches) = schedule(&apart, case, &s);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    bits(g),
                    bits(w),
                    "{name}: call {i} differs from the two ops apart"
                );
            }
            assert_eq!(
                bits(&got_caches),
                bits(&want_caches),
                "{name}: caches differ"
            );
            let (cpu_calls, _) = schedule(&cpu(), case, &s);
            for (i, (g, c)) in got.iter().zip(&cpu_calls).enumerate() {
                assert_parity(&format!("{name} call {i} vs CPU"), precision, g, c);
            }
        }
    }
}
