//! The fused combine (`CudaOptions::fused_combine`): a decode over several splits merged by its
//! last block to finish gives the bits of the combine kernel, over bf16 caches (plain and tensor
//! core kernels) and f32 caches, and its counters are back at zero after every call (a second
//! run of the same case, after another one, gives the same bits). The 8-bit kernels end in the
//! same `pa_merge_store`.

use super::*;
use crate::decode::DecodeCase;
use crate::paged::*;
use chorus_cuda::CudaOptions;

fn backend(
    precision: Precision,
    fused_combine: bool,
    lm_attention_mma: bool,
) -> Option<CudaBackend> {
    cuda_with(CudaOptions {
        precision,
        fused_combine,
        lm_attention_mma,
        ..Default::default()
    })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn fused_combine_gives_the_combine_kernels_bits_and_resets_its_counters() {
    // Long and short rows (many splits and one), padded rows; Qwen3's group of 4 and a group of 8.
    let contexts = [Some(3000), None, Some(1), Some(700), Some(65), Some(1500)];
    let other = [Some(900), Some(2), Some(2048)];
    for (precision, mma) in [
        (Precision::F32, false),
        (Precision::Bf16, false),
        (Precision::Bf16, true),
    ] {
        for (heads, seed) in [
            (QWEN, 601u64),
            (
                Heads {
                    q: 32,
                    kv: 4,
                    hd: 128,
                },
                602,
            ),
        ] {
            // Groups of 8 reach only the tensor-core decode; the plain one leaves them to the
            // general kernel, which has no combine to fuse.
            if heads.q / heads.kv == 8 && !mma {
                continue;
            }
            let (Some(fused), Some(apart)) = (
                backend(precision, true, mma),
                backend(precision, false, mma),
            ) else {
                return;
            };
            let name = format!(
                "fused combine {}/{} [{}] mma={mma}",
                heads.q,
                heads.kv,
                precision.name()
            );
            let case = DecodeCase::new(seed, heads, 64, &contexts);
            let want = case.real_rows(&case.run(&apart).expect("combine kernel"));
            let before = fused.fused_combines();
            let got = case.real_rows(&case.run(&fused).expect("fused combine"));
            assert!(
                fused.fused_combines() > before,
                "{name}: the fused combine did not run"
            );
            assert_eq!(
                bits(&got),
                bits(&want),
                "{name}: bits differ from the combine kernel"
            );
            let reference: Vec<f64> = case.want.iter().flat_map(|(_, w)| w.clone()).collect();
            assert_ref(&name, precision, &got, &reference);
            // Another call, then the first again: the counters went back to zero each time.
            let second = DecodeCase::new(seed + 10, heads, 16, &other);
            let a = second.real_rows(&second.run(&fused).expect("fused combine"));
            let b = second.real_rows(&second.run(&apart).expect("combine kernel"));
            assert_eq!(bits(&a), bits(&b), "{name}: second case");
            let again = case.real_rows(&case.run(&fused).expect("fused combine"));
            assert_eq!(bits(&again), bits(&want), "{name}: a repeated call");
        }
    }
}
