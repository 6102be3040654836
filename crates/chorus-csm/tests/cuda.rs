//! The CSM stage on the CUDA backend (skipped without a GPU), every frame one graph replay:
//! the oracle's teacher-forced traces in f32 (rel L2 <= 1e-4) and bf16 (<= 2e-2), and
//! free-running codes in f32 identical to the oracle's (greedy, noise, the drawn end frame).

mod common;

use chorus_core::Precision;
use chorus_cuda::{CudaBackend, CudaOptions};
use common::oracle::{free_running, teacher_forced, BF16_REL_L2, REL_L2};

fn cuda(precision: Precision) -> Option<CudaBackend> {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return None;
    }
    let opts = CudaOptions {
        precision,
        ..Default::default()
    };
    Some(CudaBackend::new(opts).unwrap())
}

#[test]
fn cuda_teacher_forcing_matches_the_oracle_in_f32_and_bf16() {
    for (precision, bound) in [(Precision::F32, REL_L2), (Precision::Bf16, BF16_REL_L2)] {
        for case in ["small_greedy", "small_noise", "small_stop"] {
            let Some(be) = cuda(precision) else { return };
            let worst = teacher_forced(be, case, bound);
            eprintln!(
                "cuda {} {case}: worst rel L2 {worst:.3e} (bound {bound:e})",
                precision.name()
            );
        }
    }
}

#[test]
fn cuda_f32_free_running_codes_equal_the_oracle() {
    for case in ["small_greedy", "small_noise", "small_stop"] {
        let Some(be) = cuda(Precision::F32) else {
            return;
        };
        free_running(be, case, REL_L2);
    }
}
