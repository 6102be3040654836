//! 8-bit KV caches (`BufRole::Pool8`, `chorus_core::fp8`): a prefill then decode steps over
//! E4M3 caches with a scale per head vector, on CUDA against the CPU backend's same format, and
//! the CPU's 8-bit outputs against its caches in f32 (the cost of the format, printed).

use super::*;
use crate::paged::*;
use chorus_core::fp8;

/// Two 48-token rows (blocks of 16, scattered tables): a prefill of 40, then 8 decode steps, on
/// 8-bit caches (`fp8`) or caches in the storage type. `[48 positions][2 rows][q_heads * hd]`.
pub(crate) fn schedule<B: LmOps>(
    be: &B,
    h: Heads,
    seqs: &[Vec<Vec<f32>>; 2],
    tables: &[i32],
    fp8: bool,
) -> Result<Vec<f32>> {
    let (block_size, max_blocks, blocks) = (16, 4, 9);
    let mut paged = if fp8 {
        Paged::new_fp8(be, h, (block_size, max_blocks, blocks), tables)?
    } else {
        let zeros = vec![0.0; blocks * block_size * h.kv_dim()];
        Paged::new(be, h, (block_size, max_blocks), tables, (&zeros, &zeros))?
    };
    let n = h.q * h.hd;
    let qkv = |from: usize, to: usize| -> Vec<f32> {
        seqs.iter().flat_map(|s| s[from..to].concat()).collect()
    };
    let mut acc = Vec::new();
    let push = |acc: &mut Vec<f32>, o: &[f32], time: usize| {
        for t in 0..time {
            for r in 0..2 {
                acc.extend_from_slice(&o[(r * time + t) * n..(r * time + t + 1) * n]);
            }
        }
    };
    push(&mut acc, &paged.call(be, &qkv(0, 40), &[0, 0])?, 40);
    for t in 40..48 {
        push(
            &mut acc,
            &paged.call(be, &qkv(t, t + 1), &[t as i32; 2])?,
            1,
        );
    }
    Ok(acc)
}

#[test]
fn fp8_caches_match_the_cpu_and_stay_near_the_storage_type() {
    for (h, seed) in [(QWEN, 301), (SMALL, 302)] {
        let mut rng = Rng::new(seed);
        let seqs = [0, 1].map(|_| (0..48).map(|_| rng.vec(h.width(), 2.0)).collect::<Vec<_>>());
        let tables = [7, 2, 5, -1, 1, 8, 3, 6];
        let name = format!("fp8 KV {}/{}x{}", h.q, h.kv, h.hd);
        let cpu8 = schedule(&cpu(), h, &seqs, &tables, true).expect("cpu fp8");
        let cpu32 = schedule(&cpu(), h, &seqs, &tables, false).expect("cpu f32");
        let cost = rel_l2(&cpu8, &cpu32);
        eprintln!("{name}: CPU 8-bit caches vs f32 caches: rel L2 {cost:.3e}");
        assert!(
            cost > 0.0 && cost < 5e-2,
            "{name}: the format's error {cost:e}"
        );
        for p in PRECISIONS {
            let Some(be) = cuda(p) else { return };
            let got = schedule(&be, h, &seqs, &tables, true).expect("cuda fp8");
            assert_parity(&format!("{name}: CUDA vs CPU"), p, &got, &cpu8);
        }
    }
}

/// One token written to 8-bit caches: the CUDA bytes times their scales equal the CPU's values,
/// and its one-key attention output is its own value vector.
#[test]
fn fp8_write_of_one_token_matches_the_cpu() {
    let h = SMALL;
    let mut rng = Rng::new(303);
    let row = rng.vec(h.width(), 2.0);
    let tables = [1];
    let cpu_be = cpu();
    let mut cp = Paged::new_fp8(&cpu_be, h, (16, 1, 2), &tables).expect("cpu");
    let cpu_out = cp.call(&cpu_be, &row, &[0]).expect("cpu call");
    let cpu_k = cpu_be.download(&cp.k).expect("k");
    let cpu_ks = cpu_be.download(&cp.scales.as_ref().unwrap().0).expect("ks");
    for p in PRECISIONS {
        let Some(be) = cuda(p) else { return };
        let mut gp = Paged::new_fp8(&be, h, (16, 1, 2), &tables).expect("cuda");
        let out = gp.call(&be, &row, &[0]).expect("cuda call");
        let k8 = be.download(&gp.k).expect("k");
        let ks = be.download(&gp.scales.as_ref().unwrap().0).expect("ks");
        let at = 16 * h.kv_dim();
        // Position 0 lies at block 1, position 16 of the pool; its heads' scales a block apart.
        let scale_at: Vec<usize> = (0..h.kv)
            .map(|k| fp8::scale_index(16, k, 16, h.kv))
            .collect();
        let pick = |s: &[f32]| scale_at.iter().map(|&i| s[i]).collect::<Vec<_>>();
        eprintln!(
            "[{}] scales cpu {:?} cuda {:?}",
            p.name(),
            pick(&cpu_ks),
            pick(&ks)
        );
        eprintln!(
            "[{}] k cpu {:?} cuda bytes {:?}",
            p.name(),
            &cpu_k[at..at + 8],
            &k8[at..at + 8]
        );
        eprintln!(
            "[{}] out cpu {:?} cuda {:?}",
            p.name(),
            &cpu_out[..8],
            &out[..8]
        );
        let deq: Vec<f32> = (0..h.kv_dim())
            .map(|i| k8[at + i] * ks[scale_at[i / h.hd]])
            .collect();
        assert_parity("fp8 write: k", p, &deq, &cpu_k[at..at + h.kv_dim()]);
        assert_parity("fp8 one-key output", p, &out, &cpu_out);
    }
}
