//! The CUDA slot encoder: against the CPU slot encoder on the same streams (f32 within 1e-4 and
//! bf16 within 2e-2 relative L2 on latents, codes compared level by level), and against
//! transformers' `MimiModel.encode` on the oracle fixtures (both layouts, 140 frames past the
//! 250-token window). Skips (passes with a note) when no CUDA device is present.

mod common;

use chorus_core::{AudioFrame, Buckets, FrameEncoder, Precision, FRAME_SAMPLES};
use chorus_mimi::checkpoint::Layout;
use chorus_mimi::oracle::model_for;
use chorus_mimi::oracle_encoder::{
    compare_codes, encode_cases, encoder_fixtures_dir, load_encoder_cases,
};
use chorus_mimi::random::{random_model, RANDOM_MODEL_SEED};
use chorus_mimi::{EncoderOptions, SlotEncoder};
use common::*;

/// The share of identical codes f32 must reach at every level (the bound).
const F32_CODE_SHARE: f64 = 0.999;

fn options(max_slots: usize, buckets: &[usize]) -> EncoderOptions {
    EncoderOptions {
        max_slots,
        buckets: Buckets::new(buckets).expect("buckets"),
        chunk_frames: 1,
    }
}

fn check_oracle(layout: Layout) {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let (seed, cases) = load_encoder_cases(&encoder_fixtures_dir()).expect("fixtures");
    let cases: Vec<_> = cases.iter().filter(|c| c.layout == layout).collect();
    let model = model_for(layout, seed).expect("model");
    let n = cases.len();
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let mut enc =
            SlotEncoder::from_weights(be, &model.config, &model.weights, options(n, &[n]))
                .expect("encoder");
        enc.warmup().expect("warmup");
        let levels = cases[0].levels;
        let got = encode_cases(&mut enc, &cases, levels).expect("encode");
        for (c, g) in cases.iter().zip(&got) {
            let what = format!("encoder oracle {} latent ({layout:?} layout)", c.name);
            assert_parity(&what, precision, &g.latents, &c.latent);
            let agree = compare_codes(c, &g.codes, levels);
            println!(
                "encoder oracle {} {}: identical codes per level {:?} of {}, worst {:.4}",
                c.name,
                precision.name(),
                agree.identical,
                agree.frames,
                agree.worst_share()
            );
            for m in agree.mismatches.iter().take(8) {
                println!(
                    "  level {} frame {}: {} vs oracle {} (oracle margin {:.3e})",
                    m.level, m.frame, m.got, m.want, m.margin
                );
            }
            if precision == Precision::F32 {
                assert!(
                    agree.worst_share() >= F32_CODE_SHARE,
                    "{}: f32 codes agree only {:.4}",
                    c.name,
                    agree.worst_share()
                );
            }
        }
    }
}

#[test]
fn cuda_encoder_matches_transformers_oracle_hf_layout() {
    check_oracle(Layout::HuggingFace);
}

#[test]
fn cuda_encoder_matches_transformers_oracle_kyutai_layout() {
    check_oracle(Layout::Kyutai);
}

/// Many streams in padded buckets with varying n_q, on CUDA and the CPU side by side.
#[test]
fn cuda_encoder_matches_cpu_with_padding_and_mixed_n_q() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let model =
        random_model(&chorus_mimi::MimiConfig::default(), RANDOM_MODEL_SEED).expect("model");
    let (slots, frames) = (6usize, 6usize);
    let mut rng = Rng::new(11);
    let audio: Vec<Vec<f32>> = (0..slots)
        .map(|_| rng.vec(frames * FRAME_SAMPLES, 0.5))
        .collect();
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let mut gpu =
            SlotEncoder::from_weights(be, &model.config, &model.weights, options(8, &[1, 4, 8]))
                .expect("cuda encoder");
        gpu.warmup().expect("warmup");
        let mut host =
            SlotEncoder::from_weights(cpu(), &model.config, &model.weights, options(8, &[8]))
                .expect("cpu encoder");
        let (nq, dim) = (host.max_codebooks(), host.latent_dim());
        let (mut same, mut total) = (0usize, 0usize);
        for f in 0..frames {
            // A varying subset of streams per step, each with its own n_q.
            let active: Vec<usize> = (0..slots).filter(|s| (s + f) % 3 != 0 || f == 0).collect();
            let step: Vec<AudioFrame<'_>> = active
                .iter()
                .map(|&s| AudioFrame {
                    slot: s + 1,
                    pcm: &audio[s][f * FRAME_SAMPLES..(f + 1) * FRAME_SAMPLES],
                    n_q: 1 + (s * 7) % 32,
                })
                .collect();
            let n = step.len();
            let (mut cg, mut lg) = (vec![0u32; n * nq], vec![0f32; n * dim]);
            let (mut cc, mut lc) = (vec![0u32; n * nq], vec![0f32; n * dim]);
            gpu.step(&step, &mut cg, Some(&mut lg)).expect("cuda step");
            host.step(&step, &mut cc, Some(&mut lc)).expect("cpu step");
            assert_parity(
                &format!("encoder latents frame {f} ({} rows)", n),
                precision,
                &lg,
                &lc,
            );
            for (r, fr) in step.iter().enumerate() {
                let (g, c) = (&cg[r * nq..(r + 1) * nq], &cc[r * nq..(r + 1) * nq]);
                assert!(
                    g[fr.n_q..].iter().all(|&v| v == 0),
                    "codes past n_q must be 0"
                );
                same += g[..fr.n_q]
                    .iter()
                    .zip(&c[..fr.n_q])
                    .filter(|(a, b)| a == b)
                    .count();
                total += fr.n_q;
            }
        }
        let share = same as f64 / total as f64;
        println!(
            "encoder cuda {} vs cpu: {same}/{total} codes identical ({share:.4})",
            precision.name()
        );
        if precision == Precision::F32 {
            assert!(share >= F32_CODE_SHARE, "f32 codes agree only {share:.4}");
        }
    }
}

/// Above the split path's row bound the one-kernel quantiser runs: 300 rows against the CPU.
#[test]
fn cuda_encoder_matches_cpu_at_a_large_batch() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let model =
        random_model(&chorus_mimi::random::small_config(), RANDOM_MODEL_SEED).expect("model");
    let rows = 300usize;
    let mut rng = Rng::new(5);
    let audio = rng.vec(rows * 2 * FRAME_SAMPLES, 0.5);
    let Some(be) = cuda(Precision::F32) else {
        return;
    };
    let mut gpu =
        SlotEncoder::from_weights(be, &model.config, &model.weights, options(rows, &[rows]))
            .expect("cuda encoder");
    let mut host =
        SlotEncoder::from_weights(cpu(), &model.config, &model.weights, options(rows, &[rows]))
            .expect("cpu encoder");
    let (nq, dim) = (host.max_codebooks(), host.latent_dim());
    let (mut same, mut total) = (0usize, 0usize);
    for f in 0..2 {
        let step: Vec<AudioFrame<'_>> = (0..rows)
            .map(|s| AudioFrame {
                slot: s,
                pcm: &audio[(s * 2 + f) * FRAME_SAMPLES..(s * 2 + f + 1) * FRAME_SAMPLES],
                n_q: 1 + s % 32,
            })
            .collect();
        let (mut cg, mut lg) = (vec![0u32; rows * nq], vec![0f32; rows * dim]);
        let (mut cc, mut lc) = (vec![0u32; rows * nq], vec![0f32; rows * dim]);
        gpu.step(&step, &mut cg, Some(&mut lg)).expect("cuda step");
        host.step(&step, &mut cc, Some(&mut lc)).expect("cpu step");
        assert_parity(
            &format!("encoder latents, {rows} rows, frame {f}"),
            Precision::F32,
            &lg,
            &lc,
        );
        for (r, fr) in step.iter().enumerate() {
            let (g, c) = (&cg[r * nq..(r + 1) * nq], &cc[r * nq..(r + 1) * nq]);
            same += g[..fr.n_q]
                .iter()
                .zip(&c[..fr.n_q])
                .filter(|(a, b)| a == b)
                .count();
            total += fr.n_q;
        }
    }
    let share = same as f64 / total as f64;
    println!("encoder cuda f32 vs cpu at {rows} rows: {same}/{total} codes identical ({share:.4})");
    assert!(share >= F32_CODE_SHARE, "f32 codes agree only {share:.4}");
}
