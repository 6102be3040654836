//! Slot semantics of the decoder on the CPU backend: isolation, padding, joining, skipping,
//! reset, latents, and bad input that changes nothing.

mod common;

use chorus_core::{Error, Frame, FrameDecoder, FrameInput, FRAME_SAMPLES};
use common::*;

const FRAMES: usize = 14;

#[test]
fn interleaved_streams_in_any_order_and_padding_match_each_alone() {
    let m = tiny_model();
    let streams: Vec<Vec<Vec<u32>>> = (0..3).map(|s| codes(s + 1, FRAMES, 8)).collect();
    let want: Vec<Vec<Vec<f32>>> = streams.iter().map(|s| alone(m, s)).collect();
    // 3 live streams in buckets of 4 and 8: one or five dummy rows each step.
    let mut d = decoder(m, 6, &[1, 4, 8]);
    let slot_of = [4usize, 0, 2];
    for t in 0..FRAMES {
        let order: Vec<usize> = match t % 3 {
            0 => vec![0, 1, 2],
            1 => vec![2, 0, 1],
            _ => vec![1, 2, 0],
        };
        let slots: Vec<usize> = order.iter().map(|&s| slot_of[s]).collect();
        let codes: Vec<u32> = order.iter().flat_map(|&s| streams[s][t].clone()).collect();
        let pcm = d.step_codes(&slots, &codes, 8).unwrap();
        for (i, &s) in order.iter().enumerate() {
            assert_same(row(&pcm, i), &want[s][t], &format!("stream {s} frame {t}"));
        }
    }
}

#[test]
fn late_joiner_and_skipper_are_untouched_by_neighbours() {
    let m = tiny_model();
    let a = codes(11, FRAMES, 8);
    let b = codes(12, FRAMES - 5, 8);
    let (want_a, want_b) = (alone(m, &a), alone(m, &b));
    let mut d = decoder(m, 4, &[1, 2, 4]);
    let (mut ia, mut ib) = (0, 0);
    for t in 0..2 * FRAMES {
        // A skips every third step from t = 3; B joins at t = 5.
        let mut slots = Vec::new();
        let mut cs = Vec::new();
        let a_turn = ia < a.len() && !(t >= 3 && t % 3 == 0);
        let b_turn = t >= 5 && ib < b.len();
        if b_turn {
            slots.push(3);
            cs.extend(&b[ib]);
        }
        if a_turn {
            slots.push(1);
            cs.extend(&a[ia]);
        }
        if slots.is_empty() {
            continue;
        }
        let pcm = d.step_codes(&slots, &cs, 8).unwrap();
        let mut r = 0;
        if b_turn {
            assert_same(row(&pcm, r), &want_b[ib], &format!("B frame {ib}"));
            ib += 1;
            r += 1;
        }
        if a_turn {
            assert_same(row(&pcm, r), &want_a[ia], &format!("A frame {ia}"));
            ia += 1;
        }
    }
    assert_eq!((ia, ib), (a.len(), b.len()));
}

#[test]
fn reset_gives_exactly_a_fresh_stream() {
    let m = tiny_model();
    let first = codes(21, FRAMES, 8);
    let second = codes(22, 6, 8);
    let want = alone(m, &second);
    let mut d = decoder(m, 2, &[1, 2]);
    for c in &first {
        d.step_codes(&[1], c, 8).unwrap();
    }
    d.reset(1).unwrap();
    for (t, c) in second.iter().enumerate() {
        let pcm = d.step_codes(&[1], c, 8).unwrap();
        assert_eq!(
            pcm, want[t],
            "frame {t} after reset differs from a fresh decoder"
        );
    }
}

#[test]
fn padding_rows_never_leak_into_live_rows() {
    let m = tiny_model();
    let s = codes(31, FRAMES, 8);
    let want = alone(m, &s);
    // One live row in a bucket of 8: seven dummy rows share one state row every step.
    let mut d = decoder(m, 8, &[8]);
    for (t, c) in s.iter().enumerate() {
        let pcm = d.step_codes(&[5], c, 8).unwrap();
        assert_same(&pcm, &want[t], &format!("frame {t}"));
    }
}

#[test]
fn codebook_counts_mix_in_one_step() {
    let m = tiny_model();
    let full = codes(41, 6, 32);
    let short: Vec<Vec<u32>> = full.iter().map(|c| c[..3].to_vec()).collect();
    let (want_full, want_short) = (alone(m, &full), alone(m, &short));
    assert!(
        rel_l2(&want_full[5], &want_short[5]) > 1e-3,
        "n_q must matter"
    );
    let mut d = decoder(m, 2, &[2]);
    let mut pcm = vec![0f32; 2 * FRAME_SAMPLES];
    for t in 0..6 {
        let frames = [
            Frame {
                slot: 0,
                input: FrameInput::Codes(&full[t]),
            },
            Frame {
                slot: 1,
                input: FrameInput::Codes(&short[t]),
            },
        ];
        d.step(&frames, &mut pcm).unwrap();
        assert_same(row(&pcm, 0), &want_full[t], "n_q 32");
        assert_same(row(&pcm, 1), &want_short[t], "n_q 3");
    }
}

#[test]
fn latents_skip_the_quantizer() {
    let m = tiny_model();
    let s = codes(51, 6, 8);
    let want = alone(m, &s);
    let table = chorus_mimi::prepare::fold_codebooks(&m.config, &m.weights).unwrap();
    let (card, dim) = (m.config.codebook_size, m.config.hidden_size);
    let mut d = decoder(m, 1, &[1]);
    for (t, c) in s.iter().enumerate() {
        let mut latent = vec![0f32; dim];
        for (q, &code) in c.iter().enumerate() {
            let off = (q * card + code as usize) * dim;
            latent
                .iter_mut()
                .zip(&table.data[off..off + dim])
                .for_each(|(l, v)| *l += v);
        }
        let pcm = d.step_latents(&[0], &latent).unwrap();
        assert_same(&pcm, &want[t], &format!("latent frame {t}"));
    }
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let m = tiny_model();
    let s = codes(61, 4, 8);
    let want = alone(m, &s);
    let mut d = decoder(m, 3, &[1, 2, 4]);
    let mut pcm = vec![0f32; 2 * FRAME_SAMPLES];
    let bad_code = [1u32, 2048];
    let too_many = vec![0u32; 33];
    let short_latent = [0f32; 10];
    let nan_latent = vec![f32::NAN; m.config.hidden_size];
    let good = FrameInput::Codes(&s[0]);
    let cases: Vec<(Vec<Frame<'_>>, &str)> = vec![
        (
            vec![
                Frame {
                    slot: 0,
                    input: good,
                },
                Frame {
                    slot: 0,
                    input: good,
                },
            ],
            "twice",
        ),
        (
            vec![
                Frame {
                    slot: 0,
                    input: good,
                },
                Frame {
                    slot: 3,
                    input: good,
                },
            ],
            "slot 3",
        ),
        (
            vec![
                Frame {
                    slot: 0,
                    input: good,
                },
                Frame {
                    slot: 1,
                    input: FrameInput::Codes(&bad_code),
                },
            ],
            "2048",
        ),
        (
            vec![
                Frame {
                    slot: 0,
                    input: good,
                },
                Frame {
                    slot: 1,
                    input: FrameInput::Codes(&too_many),
                },
            ],
            "33 codebooks",
        ),
        (
            vec![
                Frame {
                    slot: 0,
                    input: good,
                },
                Frame {
                    slot: 1,
                    input: FrameInput::Codes(&[]),
                },
            ],
            "0 codebooks",
        ),
        (
            vec![
                Frame {
                    slot: 0,
                    input: good,
                },
                Frame {
                    slot: 1,
                    input: FrameInput::Latent(&short_latent),
                },
            ],
            "latent of 10",
        ),
        (
            vec![
                Frame {
                    slot: 0,
                    input: good,
                },
                Frame {
                    slot: 1,
                    input: FrameInput::Latent(&nan_latent),
                },
            ],
            "not finite",
        ),
    ];
    for (frames, needle) in &cases {
        let e = d.step(frames, &mut pcm).unwrap_err();
        assert!(
            e.to_string().contains(needle),
            "expected `{needle}` in `{e}`"
        );
    }
    assert!(matches!(d.step(&[], &mut pcm), Err(Error::Input { .. })));
    assert!(matches!(
        d.reset(3),
        Err(Error::UnknownSlot { slot: 3, .. })
    ));
    let five: Vec<Frame<'_>> = (0..5).map(|slot| Frame { slot, input: good }).collect();
    assert!(d.step(&five, &mut vec![0f32; 5 * FRAME_SAMPLES]).is_err());
    // Slot 0 saw only rejected steps: it still decodes from the zero state.
    for (t, c) in s.iter().enumerate() {
        let out = d.step_codes(&[0], c, 8).unwrap();
        assert_same(&out, &want[t], &format!("frame {t} after rejected steps"));
    }
}

#[test]
fn streams_run_past_the_window_and_around_the_ring() {
    let m = tiny_model();
    // The tiny window is 10 tokens (5 frames) and the ring 256 tokens: 140 frames wrap it.
    let s = codes(71, 140, 8);
    let want = alone(m, &s);
    let mut d = decoder(m, 2, &[2]);
    let other = codes(72, 140, 8);
    for t in 0..s.len() {
        let cs: Vec<u32> = other[t].iter().chain(&s[t]).copied().collect();
        let pcm = d.step_codes(&[0, 1], &cs, 8).unwrap();
        assert_same(row(&pcm, 1), &want[t], &format!("frame {t}"));
    }
    assert!(want[139].iter().all(|v| v.is_finite()));
}

#[test]
fn single_stream_decode_with_reset_flag_matches_the_slot_decoder() {
    let m = tiny_model();
    let first = codes(81, 5, 8);
    let second = codes(82, 4, 8);
    let (want_first, want_second) = (alone(m, &first), alone(m, &second));
    let be = chorus_cpu::CpuBackend::new(None).unwrap();
    let mut d = chorus_mimi::StreamDecoder::new(be, &m.config, &m.weights).unwrap();
    for (t, c) in first.iter().enumerate() {
        let pcm = d.decode(FrameInput::Codes(c), false).unwrap();
        assert_same(pcm, &want_first[t], &format!("first utterance frame {t}"));
    }
    // `reset` on the first frame of the next utterance: it decodes as a fresh stream.
    for (t, c) in second.iter().enumerate() {
        let pcm = d.decode(FrameInput::Codes(c), t == 0).unwrap();
        assert_same(pcm, &want_second[t], &format!("second utterance frame {t}"));
    }
    let bad = [4096u32];
    assert!(d.decode(FrameInput::Codes(&bad), false).is_err());
}

#[test]
fn upsampling_as_output_phases_matches_the_transposed_convolutions() {
    // The phase form (`PreparedUp::Phases`) reorders the transposed convolutions' weights into
    // two-tap convolutions and keeps the last input column instead of the output tail: over a
    // stream long enough to carry state through every stage, both forms agree to f32 rounding.
    let m = tiny_model();
    let opts = || chorus_mimi::DecoderOptions {
        max_slots: 2,
        buckets: chorus_core::Buckets::new(&[1, 2]).unwrap(),
        chunk_frames: 1,
    };
    let be = |phases| {
        chorus_cpu::CpuBackend::new(None)
            .unwrap()
            .with_phase_upsampling(phases)
    };
    let mut plain =
        chorus_mimi::SlotDecoder::from_weights(be(false), &m.config, &m.weights, opts()).unwrap();
    let mut phases =
        chorus_mimi::SlotDecoder::from_weights(be(true), &m.config, &m.weights, opts()).unwrap();
    let (a, b) = (codes(31, FRAMES, 8), codes(32, FRAMES, 8));
    for t in 0..FRAMES {
        let cs: Vec<u32> = a[t].iter().chain(&b[t]).copied().collect();
        let want = plain.step_codes(&[1, 0], &cs, 8).unwrap();
        let got = phases.step_codes(&[1, 0], &cs, 8).unwrap();
        let err = rel_l2(&got, &want);
        assert!(err < 1e-5, "frame {t}: relative L2 {err:e}");
        assert!(want.iter().any(|v| v.abs() > 1e-6), "frame {t}: silent");
    }
    // A reset clears the phase form's input history as it clears the output tails.
    plain.reset(0).unwrap();
    phases.reset(0).unwrap();
    let want = plain.step_codes(&[0], &a[0], 8).unwrap();
    let got = phases.step_codes(&[0], &a[0], 8).unwrap();
    assert!(rel_l2(&got, &want) < 1e-5);
}
