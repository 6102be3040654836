//! The whole Mimi slot decoder on CUDA against the same decoder on the CPU backend: a random
//! model of the real architecture, several streams entering at different steps, padding, a reset.
//! Skips (passes with a note) when no CUDA device is present.

mod common;

use chorus_core::{Backend, Buckets, FrameDecoder, Precision};
use chorus_cuda::{CudaBackend, CudaOptions};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::random::random_model;
use chorus_mimi::{DecoderOptions, MimiConfig, SlotDecoder};
use common::*;

const SEED: u64 = 0x5eed;
const CODEBOOKS: usize = 8;
const MAX_SLOTS: usize = 6;

/// Slots of each step (bucket sizes 1 and 4, so most steps are padded); `None` resets slot 2.
const SCHEDULE: &[Option<&[usize]>] = &[
    Some(&[2, 0, 5]),
    Some(&[5]),
    Some(&[0, 2, 5, 3]),
    None,
    Some(&[2, 5]),
    Some(&[3, 2, 0]),
];

/// A random model of the real architecture with `CODEBOOKS` codebooks.
fn real_model() -> LoadedModel {
    let cfg = MimiConfig {
        num_quantizers: CODEBOOKS,
        ..Default::default()
    };
    random_model(&cfg, SEED).expect("random model")
}

/// `SCHEDULE` with each step's seeded codes `[slots, CODEBOOKS]`.
fn schedule_codes(card: usize) -> Vec<Option<(&'static [usize], Vec<u32>)>> {
    let mut rng = Rng::new(SEED);
    SCHEDULE
        .iter()
        .map(|step| {
            step.map(|slots| {
                let codes = (0..slots.len() * CODEBOOKS)
                    .map(|_| rng.below(card) as u32)
                    .collect();
                (slots, codes)
            })
        })
        .collect()
}

fn decode_all<B: chorus_core::LmOps>(dec: &mut SlotDecoder<B>, card: usize) -> Vec<Vec<f32>> {
    let mut outputs = Vec::new();
    for step in schedule_codes(card) {
        match step {
            Some((slots, codes)) => {
                outputs.push(dec.step_codes(slots, &codes, CODEBOOKS).expect("step"));
            }
            None => dec.reset(2).expect("reset"),
        }
    }
    outputs
}

#[test]
fn cuda_decoder_matches_cpu_decoder() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let model = real_model();
    let opts = || DecoderOptions {
        max_slots: MAX_SLOTS,
        buckets: Buckets::new(&[1, 4]).expect("buckets"),
        chunk_frames: 1,
    };
    let mut cpu_dec = SlotDecoder::from_weights(cpu(), &model.config, &model.weights, opts())
        .expect("cpu decoder");
    let want = decode_all(&mut cpu_dec, model.config.codebook_size);
    for precision in [Precision::F32, Precision::Bf16] {
        let Some(be) = cuda(precision) else { return };
        let mut dec = SlotDecoder::from_weights(be, &model.config, &model.weights, opts())
            .expect("cuda decoder");
        dec.warmup().expect("warmup");
        let got = decode_all(&mut dec, model.config.codebook_size);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_parity(&format!("decoder step {i}"), precision, g, w);
        }
        eprintln!("decoder on {}", dec.describe());
    }
}

// With the wide kernel on, the stage upsampling runs as output phases: at 64 rows the last
// stage's phase convolution fills enough 128 x 128 tiles to take the wide kernel, the others
// take the other paths.
#[test]
fn cuda_decoder_with_phase_upsampling_matches_cpu() {
    let Some(be) = cuda_wide(Precision::Bf16) else {
        return;
    };
    decoder_matches_cpu("phase decoder", true, be, |be| {
        assert!(be.wide_convs() > 0, "the wide kernel ran")
    });
}

// The default: the phase form on cuBLAS (every phase convolution, 256 to 4,096 outputs, skips
// the tensor-core implicit GEMM), bias and residual in the products' epilogues.
#[test]
fn cuda_decoder_with_phases_on_cublas_matches_cpu() {
    let Some(be) = cuda(Precision::Bf16) else {
        return;
    };
    decoder_matches_cpu("phase decoder on cuBLAS", true, be, |be| {
        assert_eq!(be.wide_convs(), 0, "the wide kernel is off");
        assert!(be.epilogue_gemms() > 0, "products with an epilogue ran");
    });
}

// The transposed form (a product into kernel * c_out columns, then the overlap pass), with the
// implicit GEMM taking every convolution it can.
#[test]
fn cuda_decoder_with_transposed_upsampling_matches_cpu() {
    let Some(be) = cuda_with(CudaOptions {
        precision: Precision::Bf16,
        phase_upsampling: false,
        conv_mma_max_out: usize::MAX,
        ..Default::default()
    }) else {
        return;
    };
    decoder_matches_cpu("transposed decoder", false, be, |_| {});
}

/// Three 64-row steps of a decoder on `be` (which must take the phase form exactly when
/// `phases`) against the CPU backend's transposed convolutions; then `paths` checks which
/// kernels ran.
fn decoder_matches_cpu(
    name: &str,
    phases: bool,
    be: CudaBackend,
    paths: impl FnOnce(&CudaBackend),
) {
    const ROWS: usize = 64;
    const STEPS: usize = 3;
    assert_eq!(be.phase_upsampling(), phases, "{name}: the phase form");
    let model = real_model();
    let opts = || DecoderOptions {
        max_slots: ROWS,
        buckets: Buckets::new(&[ROWS]).expect("buckets"),
        chunk_frames: 1,
    };
    let slots: Vec<usize> = (0..ROWS).rev().collect();
    let mut rng = Rng::new(SEED ^ 0x77);
    let steps: Vec<Vec<u32>> = (0..STEPS)
        .map(|_| {
            (0..ROWS * CODEBOOKS)
                .map(|_| rng.below(model.config.codebook_size) as u32)
                .collect()
        })
        .collect();
    let mut cpu_dec = SlotDecoder::from_weights(cpu(), &model.config, &model.weights, opts())
        .expect("cpu decoder");
    let mut dec =
        SlotDecoder::from_weights(be, &model.config, &model.weights, opts()).expect("cuda decoder");
    dec.warmup().expect("warmup");
    for (t, codes) in steps.iter().enumerate() {
        let want = cpu_dec
            .step_codes(&slots, codes, CODEBOOKS)
            .expect("cpu step");
        let got = dec.step_codes(&slots, codes, CODEBOOKS).expect("cuda step");
        assert_parity(&format!("{name} step {t}"), Precision::Bf16, &got, &want);
    }
    paths(dec.backend());
}

#[test]
fn cuda_single_stream_decode_with_reset_flag() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let model = real_model();
    let mut rng = Rng::new(SEED + 1);
    let frames: Vec<Vec<u32>> = (0..6)
        .map(|_| {
            (0..CODEBOOKS)
                .map(|_| rng.below(model.config.codebook_size) as u32)
                .collect()
        })
        .collect();
    let mut cpu_dec =
        chorus_mimi::StreamDecoder::new(cpu(), &model.config, &model.weights).expect("cpu");
    for precision in [Precision::F32, Precision::Bf16] {
        let Some(be) = cuda(precision) else { return };
        let mut dec =
            chorus_mimi::StreamDecoder::new(be, &model.config, &model.weights).expect("cuda");
        // Frames 0-2, then frames 3-5 as a new utterance (reset on frame 3).
        let mut fresh_run = Vec::new();
        for (t, c) in frames.iter().enumerate() {
            let reset = t == 3;
            let want = cpu_dec
                .decode(chorus_core::FrameInput::Codes(c), reset)
                .expect("cpu decode")
                .to_vec();
            let got = dec
                .decode(chorus_core::FrameInput::Codes(c), reset)
                .expect("cuda decode")
                .to_vec();
            assert_parity(&format!("single-stream frame {t}"), precision, &got, &want);
            if t >= 3 {
                fresh_run.push(got);
            }
        }
        // The reset utterance equals a fresh decoder's, bit for bit on the same backend.
        let be = cuda(precision).expect("cuda");
        let mut fresh =
            chorus_mimi::StreamDecoder::new(be, &model.config, &model.weights).expect("cuda");
        for (i, c) in frames[3..].iter().enumerate() {
            let pcm = fresh
                .decode(chorus_core::FrameInput::Codes(c), false)
                .expect("decode");
            assert!(
                pcm == fresh_run[i].as_slice(),
                "frame {} after reset differs from a fresh stream",
                i + 3
            );
        }
        // CPU ran both precisions' sequences: start it over for the next precision.
        cpu_dec =
            chorus_mimi::StreamDecoder::new(cpu(), &model.config, &model.weights).expect("cpu");
    }
}

/// Whole-sequence steps on CUDA (`step_chunk`, 16 frames per slot per step) against the CPU
/// decoding frame by frame: 3 single frames, then 10 chunks, so that chunks straddle the end of
/// the KV ring (288 entries) and the 250-token window.
#[test]
fn cuda_chunked_decode_matches_cpu_frame_by_frame() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    const CHUNK: usize = chorus_core::WHOLE_FILE_DECODE_CHUNK;
    const LEAD: usize = 3;
    const CHUNKS: usize = 10;
    const FS: usize = chorus_core::FRAME_SAMPLES;
    let model = real_model();
    let mut rng = Rng::new(SEED + 2);
    let frames = LEAD + CHUNK * CHUNKS;
    // [streams, frames, n_q]
    let codes: Vec<u32> = (0..2 * frames * CODEBOOKS)
        .map(|_| rng.below(model.config.codebook_size) as u32)
        .collect();
    let frame =
        |s: usize, t: usize| &codes[(s * frames + t) * CODEBOOKS..(s * frames + t + 1) * CODEBOOKS];
    let opts = |chunk_frames| DecoderOptions {
        max_slots: 2,
        buckets: Buckets::new(&[1, 2]).expect("buckets"),
        chunk_frames,
    };
    let mut cpu_dec = SlotDecoder::from_weights(cpu(), &model.config, &model.weights, opts(1))
        .expect("cpu decoder");
    let mut want = vec![Vec::new(); 2];
    for t in 0..frames {
        let c = [frame(0, t), frame(1, t)].concat();
        let pcm = cpu_dec
            .step_codes(&[0, 1], &c, CODEBOOKS)
            .expect("cpu step");
        for (s, w) in want.iter_mut().enumerate() {
            w.extend_from_slice(&pcm[s * FS..(s + 1) * FS]);
        }
    }
    for precision in [Precision::F32, Precision::Bf16] {
        let Some(be) = cuda(precision) else { return };
        let mut dec = SlotDecoder::from_weights(be, &model.config, &model.weights, opts(CHUNK))
            .expect("cuda decoder");
        dec.warmup().expect("warmup");
        let mut got = vec![Vec::new(); 2];
        for t in 0..LEAD {
            let c = [frame(0, t), frame(1, t)].concat();
            let pcm = dec.step_codes(&[0, 1], &c, CODEBOOKS).expect("single step");
            for (s, g) in got.iter_mut().enumerate() {
                g.extend_from_slice(&pcm[s * FS..(s + 1) * FS]);
            }
        }
        let mut pcm = vec![0f32; 2 * CHUNK * FS];
        for k in 0..CHUNKS {
            let at = LEAD + k * CHUNK;
            let c: Vec<u32> = (0..2)
                .flat_map(|s| (at..at + CHUNK).flat_map(move |t| frame(s, t).to_vec()))
                .collect();
            dec.step_chunk(&[0, 1], &c, CODEBOOKS, &mut pcm)
                .expect("chunk step");
            for (s, g) in got.iter_mut().enumerate() {
                g.extend_from_slice(&pcm[s * CHUNK * FS..(s + 1) * CHUNK * FS]);
            }
        }
        for s in 0..2 {
            assert_parity(&format!("chunked stream {s}"), precision, &got[s], &want[s]);
        }
        eprintln!(
            "chunked decode ({CHUNK} frames per step) on {}",
            dec.describe()
        );
    }
}

/// `decode_all`'s schedule with two steps queued at a time (`launch_step` / `finish_step`):
/// resets and steps must keep their order on the device queue.
fn decode_all_pipelined<B: chorus_core::LmOps>(
    dec: &mut SlotDecoder<B>,
    card: usize,
) -> Vec<Vec<f32>> {
    let mut outputs = Vec::new();
    let mut queued = 0;
    let mut pcm = vec![0f32; MAX_SLOTS * chorus_core::FRAME_SAMPLES];
    let mut take = |dec: &mut SlotDecoder<B>, outputs: &mut Vec<Vec<f32>>| {
        let done = dec.finish_step(&mut pcm).expect("finish");
        outputs.push(pcm[..done.rows * chorus_core::FRAME_SAMPLES].to_vec());
    };
    for step in schedule_codes(card) {
        match step {
            Some((slots, codes)) => {
                let frames: Vec<chorus_core::Frame<'_>> = slots
                    .iter()
                    .zip(codes.chunks(CODEBOOKS))
                    .map(|(&slot, c)| chorus_core::Frame {
                        slot,
                        input: chorus_core::FrameInput::Codes(c),
                    })
                    .collect();
                if queued == 2 {
                    take(dec, &mut outputs);
                    queued -= 1;
                }
                dec.launch_step(&frames).expect("launch");
                queued += 1;
            }
            None => dec.reset(2).expect("reset"),
        }
    }
    for _ in 0..queued {
        take(dec, &mut outputs);
    }
    outputs
}

#[test]
fn cuda_pipelined_steps_match_cpu_decoder() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let model = real_model();
    let opts = || DecoderOptions {
        max_slots: MAX_SLOTS,
        buckets: Buckets::new(&[1, 4]).expect("buckets"),
        chunk_frames: 1,
    };
    let mut cpu_dec = SlotDecoder::from_weights(cpu(), &model.config, &model.weights, opts())
        .expect("cpu decoder");
    let want = decode_all(&mut cpu_dec, model.config.codebook_size);
    for precision in [Precision::F32, Precision::Bf16] {
        let Some(be) = cuda(precision) else { return };
        let mut dec = SlotDecoder::from_weights(be, &model.config, &model.weights, opts())
            .expect("cuda decoder");
        dec.warmup().expect("warmup");
        assert_eq!(dec.pipeline_depth(), 2);
        let got = decode_all_pipelined(&mut dec, model.config.codebook_size);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_parity(&format!("pipelined step {i}"), precision, g, w);
        }
    }
}
