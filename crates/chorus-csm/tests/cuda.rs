//! The CSM stage on the CUDA backend (skipped without a GPU), every frame one graph replay:
//! the oracle's teacher-forced traces in f32 (rel L2 <= 1e-4) and bf16 (<= 2e-2), and
//! free-running codes in f32 identical to the oracle's (greedy, noise, the drawn end frame), and
//! at full size (random weights of csm-1b) every bf16 trace within 2e-2 of f32 on the same codes;
//! an utterance joining running ones, prefilled in chunks, draws the codes it draws prefilled whole.

mod common;

use chorus_core::Precision;
use chorus_csm::prompt::PromptFrame;
use chorus_csm::{load_csm_model, FrameTrace, TtsOptions, TtsStage, UtteranceRequest};
use chorus_cuda::{CudaBackend, CudaOptions};
use chorus_lm::Sampling;
use common::join::{run_joins, Join};
use common::oracle::{
    free_running, rel_l2, teacher_forced, BF16_REL_L2, REL_L2, SMALL_BF16_REL_L2,
};

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
    for (precision, bound) in [
        (Precision::F32, REL_L2),
        (Precision::Bf16, SMALL_BF16_REL_L2),
    ] {
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

/// Frames of the full-size comparison, and its prompt length.
const FULL_FRAMES: usize = 4;
const FULL_PROMPT: usize = 40;

/// Runs `frames` frames of one utterance at full size on `be`, forced to `forced` when given,
/// and returns each frame's trace.
fn full_traces(
    be: CudaBackend,
    m: &chorus_csm::CsmModel,
    forced: Option<Vec<Vec<u32>>>,
) -> Vec<FrameTrace> {
    let opts = TtsOptions::for_utterances(1, FULL_PROMPT + FULL_FRAMES).unwrap();
    let mut st = TtsStage::new(be, m, None, opts).unwrap();
    st.warmup().unwrap();
    let prompt = (0..FULL_PROMPT)
        .map(|i| PromptFrame::Text((i as u32 * 7919) % 128_000))
        .collect();
    let req = UtteranceRequest {
        prompt,
        max_frames: FULL_FRAMES,
        sampling: Sampling::Greedy,
        draws: None,
        forced,
    };
    st.add(req).unwrap();
    (0..FULL_FRAMES)
        .map(|_| {
            st.step(&mut |_| {}).unwrap();
            st.trace().unwrap()
        })
        .collect()
}

#[test]
fn cuda_bf16_full_size_tracks_f32_on_the_same_codes() {
    let Some(f32_be) = cuda(Precision::F32) else {
        return;
    };
    let m = load_csm_model("random").unwrap();
    let want = full_traces(f32_be, &m, None);
    let codes: Vec<Vec<u32>> = want
        .iter()
        .map(|t| t.codes.iter().map(|&c| c as u32).collect())
        .collect();
    let Some(bf16_be) = cuda(Precision::Bf16) else {
        return;
    };
    let got = full_traces(bf16_be, &m, Some(codes));
    let mut worst: Vec<(&str, f64)> = Vec::new();
    for (f, (g, w)) in got.iter().zip(&want).enumerate() {
        let mut pairs: Vec<(&str, &[f32], &[f32])> = vec![
            ("backbone hidden", &g.h, &w.h),
            ("c0 logits", &g.logits, &w.logits),
            ("next input", &g.feedback, &w.feedback),
        ];
        for k in 0..g.depth_out.len() {
            pairs.push(("depth hidden", &g.depth_out[k], &w.depth_out[k]));
            pairs.push(("depth logits", &g.head_logits[k], &w.head_logits[k]));
        }
        for (k, (what, a, b)) in pairs.into_iter().enumerate() {
            let e = rel_l2(a, b);
            if f == 0 {
                eprintln!(
                    "cuda full size frame 0, tensor {k} ({what}): bf16 vs f32 rel L2 {e:.3e}"
                );
            }
            match worst.iter_mut().find(|(n, _)| *n == what) {
                Some((_, v)) => *v = v.max(e),
                None => worst.push((what, e)),
            }
        }
    }
    for &(what, e) in &worst {
        eprintln!("cuda full size, {FULL_FRAMES} frames teacher-forced: {what} bf16 vs f32 worst rel L2 {e:.3e} (bound {BF16_REL_L2:e})");
    }
    for (what, e) in worst {
        assert!(
            e <= BF16_REL_L2,
            "full size: {what} bf16 rel L2 {e:e} against f32 (bound {BF16_REL_L2:e})"
        );
    }
}

/// Chunked prefill on CUDA (f32): every utterance's codes equal those of the same run with whole
/// prefills, and its audio is within the f32 bound (the frames' buckets differ between the runs).
#[test]
fn cuda_chunked_prefill_equals_whole_prefill() {
    if cuda(Precision::F32).is_none() {
        return;
    }
    let m = load_csm_model("random-small").unwrap();
    let mimi = chorus_mimi::checkpoint::load_model("random").unwrap();
    let joins = [
        Join::new(10, 4, 11, 0),
        Join::new(10, 4, 12, 1),
        Join::new(3, 3, 13, 1),
        Join::new(13, 3, 14, 3),
    ];
    let run = |chunk| {
        let be = cuda(Precision::F32)?;
        Some(run_joins(be, (&m, &mimi), chunk, &joins, &mut |_, _| {}))
    };
    let Some(whole) = run(0) else { return };
    for chunk in [4, 64] {
        let chunked = run(chunk).unwrap();
        for (i, (c, w)) in chunked.iter().zip(&whole).enumerate() {
            assert_eq!(c.codes, w.codes, "utterance {i}: codes, chunks of {chunk}");
            assert_eq!(c.end, w.end, "utterance {i}");
            let pcm = |o: &common::join::Output| -> Vec<f32> {
                o.pcm.iter().map(|&b| f32::from_bits(b)).collect()
            };
            let e = rel_l2(&pcm(c), &pcm(w));
            eprintln!("cuda f32 utterance {i}, chunks of {chunk} vs whole: audio rel L2 {e:.3e}");
            assert!(
                e <= REL_L2,
                "utterance {i}: audio rel L2 {e:e} (bound {REL_L2:e})"
            );
        }
    }
}
