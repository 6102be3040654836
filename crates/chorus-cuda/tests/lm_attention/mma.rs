//! Decode attention on the tensor cores (`CudaOptions::lm_attention_mma`, bf16 storage): against
//! the f64 reference and the CPU backend over bf16 caches, against the CPU's same 8-bit format
//! over E4M3 caches, for every GQA group it takes, and asserting that the kernel ran.

use super::*;
use crate::decode::DecodeCase;
use crate::paged::*;
use chorus_cuda::CudaOptions;

/// A bf16 backend with the tensor-core decode on.
fn mma_backend() -> Option<CudaBackend> {
    cuda_with(CudaOptions {
        precision: Precision::Bf16,
        lm_attention_mma: true,
        ..Default::default()
    })
}

fn check(name: &str, seed: u64, heads: Heads, block_size: usize, contexts: &[Option<usize>]) {
    let Some(be) = mma_backend() else { return };
    let case = DecodeCase::new(seed, heads, block_size, contexts);
    let want: Vec<f64> = case.want.iter().flat_map(|(_, w)| w.clone()).collect();
    let cpu_out = case.real_rows(&case.run(&cpu()).expect("cpu paged_attention"));
    let before = be.lm_tensor_core_attentions();
    let got = case.real_rows(&case.run(&be).expect("cuda paged_attention"));
    assert!(
        be.lm_tensor_core_attentions() > before,
        "{name}: the tensor-core decode did not run"
    );
    assert_ref(
        &format!("{name} (tensor cores)"),
        Precision::Bf16,
        &got,
        &want,
    );
    assert_parity(
        &format!("{name} (tensor cores) vs CPU"),
        Precision::Bf16,
        &got,
        &cpu_out,
    );
}

#[test]
fn tensor_core_decode_matches_the_reference_for_every_group() {
    // Qwen3's 32/8 (a group of 4) across split boundaries, padded rows, one-key rows.
    check(
        "mma decode 32/8x128 bs256",
        401,
        QWEN,
        256,
        &[
            Some(1000),
            None,
            Some(1),
            Some(3000),
            None,
            Some(300),
            Some(17),
        ],
    );
    // Groups of 1, 2 and 8, blocks of 16 and 6 (a step's keys straddle blocks).
    for (q, kv, bs, seed) in [(8, 8, 16, 402), (16, 8, 6, 403), (32, 4, 16, 404)] {
        let h = Heads { q, kv, hd: 128 };
        check(
            &format!("mma decode {q}/{kv}x128 bs{bs}"),
            seed,
            h,
            bs,
            &[Some(77), Some(1), None, Some(300), Some(16), Some(65)],
        );
    }
}

#[test]
fn tensor_core_decode_over_many_rows() {
    let mut rng = Rng::new(405);
    let contexts: Vec<Option<usize>> = (0..48)
        .map(|i| (i % 11 != 5).then(|| 1 + rng.below(2048)))
        .collect();
    check("mma decode 32/8x128 bs64 48 rows", 406, QWEN, 64, &contexts);
}

#[test]
fn tensor_core_decode_over_8bit_caches_matches_the_cpu() {
    let Some(be) = mma_backend() else { return };
    let h = QWEN;
    let mut rng = Rng::new(407);
    let seqs = [0, 1].map(|_| (0..48).map(|_| rng.vec(h.width(), 2.0)).collect::<Vec<_>>());
    let tables = [7, 2, 5, -1, 1, 8, 3, 6];
    let cpu8 = crate::fp8::schedule(&cpu(), h, &seqs, &tables, true).expect("cpu fp8");
    let before = be.lm_tensor_core_attentions();
    let got = crate::fp8::schedule(&be, h, &seqs, &tables, true).expect("cuda fp8");
    assert!(
        be.lm_tensor_core_attentions() > before,
        "the tensor-core decode did not run over 8-bit caches"
    );
    assert_parity(
        "mma decode over 8-bit caches vs CPU",
        Precision::Bf16,
        &got,
        &cpu8,
    );
}

/// A longer run over 8-bit caches: `rows` rows prefilled with `prefill` tokens (scattered tables
/// of `max_blocks` blocks each), then `steps` one-token decode calls, every call's outputs.
struct Long8 {
    heads: Heads,
    rows: usize,
    block_size: usize,
    max_blocks: usize,
    window: Option<usize>,
    prefill: usize,
    steps: usize,
}

impl Long8 {
    fn run<B: LmOps>(&self, be: &B, seqs: &[Vec<Vec<f32>>]) -> Result<Vec<f32>> {
        let n = self.rows * self.max_blocks;
        // Block 0 stays free; row blocks in reverse order, so no row's blocks are consecutive.
        let tables: Vec<i32> = (0..n).map(|i| (n - i) as i32).collect();
        let geometry = (self.block_size, self.max_blocks, n + 1);
        let mut paged = Paged::new_fp8(be, self.heads, geometry, &tables)?;
        paged.window = self.window;
        let qkv = |from: usize, to: usize| -> Vec<f32> {
            seqs.iter().flat_map(|s| s[from..to].concat()).collect()
        };
        let mut out = paged.call(be, &qkv(0, self.prefill), &vec![0; self.rows])?;
        for t in self.prefill..self.prefill + self.steps {
            let start = vec![t as i32; self.rows];
            out.extend(paged.call(be, &qkv(t, t + 1), &start)?);
        }
        Ok(out)
    }
}

/// The 8-bit tensor-core decode (f16 products of the unpacked bytes, 32 keys a step) for every
/// group, contexts that take several steps per warp and straddle blocks, and a window that wraps
/// its ring: against the CPU's same 8-bit format.
#[test]
fn tensor_core_decode_over_8bit_caches_every_group_and_window() {
    let Some(be) = mma_backend() else { return };
    let case = |q, kv, rows, block_size, max_blocks, window, prefill, steps| Long8 {
        heads: Heads { q, kv, hd: 128 },
        rows,
        block_size,
        max_blocks,
        window,
        prefill,
        steps,
    };
    let cases = [
        // 256 (row, kv head) pairs: splits of 256 keys, two steps of the block's four warps.
        (
            "group 1, blocks of 48",
            case(32, 32, 8, 48, 9, None, 400, 3),
        ),
        ("group 2", case(32, 16, 8, 256, 2, None, 400, 3)),
        ("group 4", case(32, 8, 8, 16, 26, None, 400, 3)),
        ("group 8", case(64, 8, 4, 64, 7, None, 400, 3)),
        // Kyutai STT 1B's heads: a window of 90 over a ring of 96, rewritten twice.
        (
            "group 1, window 90",
            case(16, 16, 4, 48, 2, Some(90), 2, 200),
        ),
    ];
    for (name, case) in cases {
        let (h, rows, steps) = (case.heads, case.rows, case.steps);
        let mut rng = Rng::new(408 + h.q as u64 + h.kv as u64);
        let seqs: Vec<Vec<Vec<f32>>> = (0..rows)
            .map(|_| {
                (0..case.prefill + steps)
                    .map(|_| rng.vec(h.width(), 2.0))
                    .collect()
            })
            .collect();
        let want = case.run(&cpu(), &seqs).expect("cpu fp8");
        let before = be.lm_tensor_core_attentions();
        let got = case.run(&be, &seqs).expect("cuda fp8");
        assert!(
            be.lm_tensor_core_attentions() >= before + steps,
            "{name}: the tensor-core decode did not run every step"
        );
        assert_parity(
            &format!("mma decode over 8-bit caches, {name}, vs CPU"),
            Precision::Bf16,
            &got,
            &want,
        );
    }
}
