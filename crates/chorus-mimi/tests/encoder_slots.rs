//! The slot encoder on the CPU: every stream's codes are independent of which other streams share
//! its steps and of bucket padding, `reset` returns a slot to a fresh stream, and bad input is
//! refused before any state changes.

use chorus_core::{AudioFrame, Buckets, FrameEncoder, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_mimi::random::{random_model, small_config, RANDOM_MODEL_SEED};
use chorus_mimi::{EncoderOptions, SlotEncoder};

const FRAMES: usize = 14;

fn encoder(max_slots: usize, buckets: &[usize]) -> SlotEncoder<CpuBackend> {
    let model = random_model(&small_config(), RANDOM_MODEL_SEED).unwrap();
    SlotEncoder::from_weights(
        CpuBackend::new(Some(2)).unwrap(),
        &model.config,
        &model.weights,
        EncoderOptions {
            max_slots,
            buckets: Buckets::new(buckets).unwrap(),
            chunk_frames: 1,
        },
    )
    .unwrap()
}

/// A distinct test signal per stream: two tones and a decaying click train.
fn signal(stream: usize) -> Vec<f32> {
    (0..FRAMES * FRAME_SAMPLES)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            let f = 180.0 + 70.0 * stream as f32;
            0.4 * (t * f * std::f32::consts::TAU).sin()
                + 0.2 * (t * 3.1 * f * std::f32::consts::TAU).sin()
                + if i % 977 == 0 { 0.3 } else { 0.0 }
        })
        .collect()
}

/// Encodes `streams` signals frame by frame, the streams sharing steps; returns codes and latents.
fn encode_together(
    enc: &mut SlotEncoder<CpuBackend>,
    slots: &[usize],
    n_q: usize,
) -> Vec<(Vec<u32>, Vec<f32>)> {
    let nq_max = enc.max_codebooks();
    let dim = enc.latent_dim();
    let signals: Vec<Vec<f32>> = (0..slots.len()).map(signal).collect();
    let mut out = vec![(Vec::new(), Vec::new()); slots.len()];
    for f in 0..FRAMES {
        let frames: Vec<AudioFrame<'_>> = slots
            .iter()
            .zip(&signals)
            .map(|(&slot, s)| AudioFrame {
                slot,
                pcm: &s[f * FRAME_SAMPLES..(f + 1) * FRAME_SAMPLES],
                n_q,
            })
            .collect();
        let mut codes = vec![0u32; frames.len() * nq_max];
        let mut lat = vec![0f32; frames.len() * dim];
        enc.step(&frames, &mut codes, Some(&mut lat)).unwrap();
        for (i, o) in out.iter_mut().enumerate() {
            o.0.extend_from_slice(&codes[i * nq_max..i * nq_max + n_q]);
            o.1.extend_from_slice(&lat[i * dim..(i + 1) * dim]);
        }
    }
    out
}

#[test]
fn streams_are_independent_of_their_step_mates() {
    let mut together = encoder(4, &[1, 4]);
    let shared = encode_together(&mut together, &[2, 0, 3], 8);
    for (i, want) in shared.iter().enumerate() {
        let mut alone = encoder(4, &[1, 4]);
        // Stream i alone in slot 1: same signal, so the same codes and latents to the bit.
        let signals = signal(i);
        let nq_max = alone.max_codebooks();
        let mut codes = Vec::new();
        let mut lats = Vec::new();
        for f in 0..FRAMES {
            let frame = AudioFrame {
                slot: 1,
                pcm: &signals[f * FRAME_SAMPLES..(f + 1) * FRAME_SAMPLES],
                n_q: 8,
            };
            let mut c = vec![0u32; nq_max];
            let mut l = vec![0f32; alone.latent_dim()];
            alone.step(&[frame], &mut c, Some(&mut l)).unwrap();
            codes.extend_from_slice(&c[..8]);
            lats.extend_from_slice(&l);
        }
        assert_eq!(codes, want.0, "stream {i}: codes differ");
        let max_diff = lats
            .iter()
            .zip(&want.1)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(max_diff < 1e-5, "stream {i}: latents differ by {max_diff}");
    }
}

#[test]
fn codes_are_a_prefix_across_n_q_and_vary() {
    let mut a = encoder(1, &[1]);
    let mut b = encoder(1, &[1]);
    let few = encode_together(&mut a, &[0], 3);
    let many = encode_together(&mut b, &[0], 32);
    let card = small_config().codebook_size as u32;
    for f in 0..FRAMES {
        assert_eq!(
            few[0].0[f * 3..f * 3 + 3],
            many[0].0[f * 32..f * 32 + 3],
            "frame {f}"
        );
    }
    assert!(many[0].0.iter().all(|&c| c < card));
    let distinct: std::collections::HashSet<u32> = many[0].0.iter().step_by(32).copied().collect();
    assert!(
        distinct.len() > 1,
        "the semantic code never changes: {distinct:?}"
    );
}

#[test]
fn reset_makes_a_fresh_stream() {
    let mut enc = encoder(2, &[1, 2]);
    let first = encode_together(&mut enc, &[1], 4);
    enc.reset(1).unwrap();
    let again = encode_together(&mut enc, &[1], 4);
    assert_eq!(first[0].0, again[0].0);
    assert_eq!(first[0].1, again[0].1);
}

#[test]
fn bad_input_is_refused_before_any_state_changes() {
    let mut enc = encoder(2, &[2]);
    let nq = enc.max_codebooks();
    let pcm = vec![0.1f32; FRAME_SAMPLES];
    let short = vec![0.1f32; FRAME_SAMPLES - 1];
    let mut nan = pcm.clone();
    nan[7] = f32::NAN;
    let mut codes = vec![0u32; 2 * nq];
    let cases: Vec<(Vec<AudioFrame<'_>>, &str)> = vec![
        (
            vec![AudioFrame {
                slot: 5,
                pcm: &pcm,
                n_q: 8,
            }],
            "slot 5",
        ),
        (
            vec![AudioFrame {
                slot: 0,
                pcm: &short,
                n_q: 8,
            }],
            "1919 samples",
        ),
        (
            vec![AudioFrame {
                slot: 0,
                pcm: &nan,
                n_q: 8,
            }],
            "sample 7 is not finite",
        ),
        (
            vec![AudioFrame {
                slot: 0,
                pcm: &pcm,
                n_q: 0,
            }],
            "n_q 0",
        ),
        (
            vec![AudioFrame {
                slot: 0,
                pcm: &pcm,
                n_q: 33,
            }],
            "n_q 33",
        ),
        (
            vec![
                AudioFrame {
                    slot: 1,
                    pcm: &pcm,
                    n_q: 8,
                },
                AudioFrame {
                    slot: 1,
                    pcm: &pcm,
                    n_q: 8,
                },
            ],
            "appears twice",
        ),
    ];
    for (frames, want) in cases {
        let e = enc
            .step(&frames, &mut codes[..frames.len() * nq], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
    // Nothing above touched slot 0: it still encodes as a fresh stream.
    let mut fresh = encoder(2, &[2]);
    let a = encode_together(&mut enc, &[0], 8);
    let b = encode_together(&mut fresh, &[0], 8);
    assert_eq!(a[0].0, b[0].0);
}
