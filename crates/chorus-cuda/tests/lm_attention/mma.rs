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
