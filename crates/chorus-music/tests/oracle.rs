//! Exactness against the PyTorch oracle (`tools/fixtures/music_oracle.py`: transformers'
//! `Qwen3ForCausalLM` + the depth decoder with the real tensor names, fp32), on the
//! `random-small` architecture.
//!
//! Teacher forcing is the hard check: every step's LM hidden (both rows), audio logits, depth
//! outputs, head logits, feedback embedding and frame hiddens within relative L2 1e-4. Free running
//! must give the oracle's codes; a divergence is tolerated only where the oracle's winning margin
//! is below [`MARGIN_EPS`], and is reported.

mod common;

use chorus_music::config::END_COLUMN;
use chorus_music::{EndReason, Sampling};
use common::oracle::{assert_codes_match, free_run, teacher_forcing_errors, CONTEXT};
use common::*;

/// f32 tolerance of every traced quantity.
const TOL: f64 = 1e-4;

#[test]
fn teacher_forcing_matches_the_oracle_at_every_step() {
    let model = small_model(1.0);
    let mut st = stage(&model, 1, CONTEXT);
    for (name, e) in teacher_forcing_errors(&mut st) {
        assert!(e <= TOL, "{name}: rel L2 {e:.3e} > {TOL:e}");
    }
}

/// One fresh CPU stage over the small model with `end_gain`.
fn cpu_stage(end_gain: f32) -> chorus_music::SemanticStage<chorus_cpu::CpuBackend> {
    stage(&small_model(end_gain), 1, CONTEXT)
}

#[test]
fn free_running_noise_mode_gives_the_oracle_codes() {
    let fx = fixture("small_noise");
    let want = code_frames(&fx, "codes");
    let (codes, hiddens, ended) = free_run(
        &mut cpu_stage(1.0),
        "small_noise",
        Sampling::Noise(7),
        false,
        want.len() - 1,
    );
    assert_eq!(ended, Some((EndReason::MaxFrames, want.len() - 1)));
    assert_eq!(codes.len(), want.len());
    if assert_codes_match("small_noise", &codes, &want) {
        let e = rel_l2(&hiddens, &floats(&fx, "frame_hiddens"));
        assert!(e <= TOL, "free-running frame hiddens rel L2 {e:e}");
    }
}

#[test]
fn free_running_greedy_mode_gives_the_oracle_codes() {
    let fx = fixture("small_greedy");
    let want = code_frames(&fx, "codes");
    let (codes, hiddens, _) = free_run(
        &mut cpu_stage(1.0),
        "small_greedy",
        Sampling::Greedy,
        false,
        want.len() - 1,
    );
    assert_eq!(codes.len(), want.len());
    if assert_codes_match("small_greedy", &codes, &want) {
        let e = rel_l2(&hiddens, &floats(&fx, "frame_hiddens"));
        assert!(e <= TOL, "greedy frame hiddens rel L2 {e:e}");
    }
}

#[test]
fn a_boosted_end_row_ends_the_song_where_the_oracle_does() {
    // small_end: noise seed 7, END row x3, END drawn at loop frame 10 (manifest.json).
    let fx = fixture("small_end");
    let want = code_frames(&fx, "codes");
    let (_, end_frame) = ints(&fx, "end_frame");
    let (codes, hiddens, ended) = free_run(
        &mut cpu_stage(3.0),
        "small_end",
        Sampling::Noise(7),
        true,
        24,
    );
    assert!(
        assert_codes_match("small_end", &codes, &want),
        "codes before END diverged"
    );
    assert_eq!(
        codes.len(),
        end_frame[0] as usize + 1,
        "END drawn at loop frame {}",
        end_frame[0]
    );
    assert_eq!(codes.last().unwrap()[0], END_COLUMN as u32);
    assert_eq!(ended, Some((EndReason::End, want.len() - 1)));
    let e = rel_l2(&hiddens, &floats(&fx, "frame_hiddens"));
    assert!(e <= TOL, "frame hiddens before END rel L2 {e:e}");
}
