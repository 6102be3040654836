//! Exactness against the PyTorch oracle (`tools/fixtures/music_oracle.py`: transformers'
//! `Qwen3ForCausalLM` + the depth decoder with the real tensor names, fp32), on the
//! `random-small` architecture.
//!
//! Teacher forcing is the hard check: every step's LM hidden (both rows), audio logits, depth
//! outputs, head logits, feedback embedding and frame hiddens within relative L2 1e-4. Free running
//! must give the oracle's codes; a divergence is tolerated only where the oracle's winning margin
//! is below [`MARGIN_EPS`], and is reported.

mod common;

use chorus_music::song::LEVELS;
use chorus_music::{EndReason, Sampling, SongEvent, SongRequest};
use common::*;

/// f32 tolerance of every traced quantity.
const TOL: f64 = 1e-4;
/// A free-running divergence is excused only below this oracle margin (scores are O(1)-O(10);
/// f32 differences between the two implementations are ~1e-6).
const MARGIN_EPS: f32 = 1e-4;
const H: usize = 256;
const V: usize = 16_385;
const DV: usize = 1024;
/// Positions the fixture songs need: a 33-token prompt, 12 frames and the last feedback.
const CONTEXT: usize = 64;

/// Each traced quantity gathered over the run, ours and the oracle's.
#[derive(Default)]
struct Pairs {
    h: (Vec<f32>, Vec<f32>),
    logits: (Vec<f32>, Vec<f32>),
    depth: (Vec<f32>, Vec<f32>),
    heads: (Vec<f32>, Vec<f32>),
    feedback: (Vec<f32>, Vec<f32>),
    frames: (Vec<f32>, Vec<f32>),
}

#[test]
fn teacher_forcing_matches_the_oracle_at_every_step() {
    let fx = fixture("small_noise");
    let forced = code_frames(&fx, "codes");
    let frames = forced.len();
    let model = small_model(1.0);
    let mut st = stage(&model, 1, CONTEXT);
    let req = SongRequest {
        prompt: prompt(&fx),
        max_frames: frames - 1,
        sampling: Sampling::Noise(7),
        allow_end: false,
        forced: Some(forced.clone()),
    };
    st.add_song(req).unwrap();
    let (lm_hidden, logits) = (floats(&fx, "lm_hidden"), floats(&fx, "logits"));
    let (depth, heads) = (floats(&fx, "depth_hidden"), floats(&fx, "head_logits"));
    let feedback = floats(&fx, "feedback");
    let mut p = Pairs::default();
    let mut ended = None;
    for f in 0..frames {
        st.step(&mut |ev| match ev {
            SongEvent::Frame { hidden, .. } => p.frames.0.extend_from_slice(hidden),
            SongEvent::Ended { reason, frames, .. } => ended = Some((reason, frames)),
        })
        .unwrap();
        let t = st.trace().unwrap();
        assert_eq!(
            t.codes,
            forced[f].iter().map(|&c| c as i32).collect::<Vec<_>>(),
            "forced codes kept at frame {f}"
        );
        p.h.0.extend_from_slice(&t.h);
        p.h.1
            .extend_from_slice(&lm_hidden[f * 2 * H..(f + 1) * 2 * H]);
        p.logits.0.extend_from_slice(&t.logits);
        p.logits
            .1
            .extend_from_slice(&logits[f * 2 * V..(f + 1) * 2 * V]);
        for l in 0..LEVELS - 1 {
            p.depth.0.extend_from_slice(&t.depth_out[l]);
            let at = (f * 7 + l) * 2 * H;
            p.depth.1.extend_from_slice(&depth[at..at + 2 * H]);
            p.heads.0.extend_from_slice(&t.head_logits[l]);
            let at = (f * 7 + l) * 2 * DV;
            p.heads.1.extend_from_slice(&heads[at..at + 2 * DV]);
        }
        if f + 1 < frames {
            // Both rows get the same feedback; the oracle stores it once.
            assert_eq!(
                t.feedback[..H],
                t.feedback[H..2 * H],
                "both rows share the feedback"
            );
            p.feedback.0.extend_from_slice(&t.feedback[..H]);
            p.feedback
                .1
                .extend_from_slice(&feedback[f * H..(f + 1) * H]);
        }
    }
    assert_eq!(ended, Some((EndReason::MaxFrames, frames - 1)));
    p.frames.1 = floats(&fx, "frame_hiddens");
    for (name, (got, want)) in [
        ("lm_hidden", &p.h),
        ("logits", &p.logits),
        ("depth_hidden", &p.depth),
        ("head_logits", &p.heads),
        ("feedback", &p.feedback),
        ("frame_hiddens", &p.frames),
    ] {
        let e = rel_l2(got, want);
        eprintln!(
            "teacher forcing {name}: rel L2 {e:.3e} over {} values",
            want.len()
        );
        assert!(e <= TOL, "{name}: rel L2 {e:.3e} > {TOL:e}");
    }
}

/// Runs one song freely, returning the codes of every loop frame and the frame hiddens.
fn free_run(
    case: &str,
    sampling: Sampling,
    allow_end: bool,
    max_frames: usize,
    end_gain: f32,
) -> (Vec<[u32; LEVELS]>, Vec<f32>, Option<(EndReason, usize)>) {
    let fx = fixture(case);
    let model = small_model(end_gain);
    let mut st = stage(&model, 1, CONTEXT);
    st.add_song(SongRequest {
        prompt: prompt(&fx),
        max_frames,
        sampling,
        allow_end,
        forced: None,
    })
    .unwrap();
    let (mut codes, mut hiddens, mut ended) = (Vec::new(), Vec::new(), None);
    while ended.is_none() {
        st.step(&mut |ev| match ev {
            SongEvent::Frame { hidden, .. } => hiddens.extend_from_slice(hidden),
            SongEvent::Ended { reason, frames, .. } => ended = Some((reason, frames)),
        })
        .unwrap();
        let c = st.trace().unwrap().codes;
        codes.push(std::array::from_fn(|l| c[l] as u32));
    }
    (codes, hiddens, ended)
}

/// Codes equal the oracle's, or differ first where the oracle's margin is below the epsilon.
fn assert_codes_match(case: &str, ours: &[[u32; LEVELS]], want: &[[u32; LEVELS]]) -> bool {
    let fx = fixture(case);
    let margins = floats(&fx, "margins");
    for (f, (a, b)) in ours.iter().zip(want).enumerate() {
        if let Some(l) = (0..LEVELS).find(|&l| a[l] != b[l]) {
            let m = margins[f * LEVELS + l];
            eprintln!("{case}: first divergence at frame {f}, level {l}: ours {} oracle {} (oracle margin {m:e})", a[l], b[l]);
            assert!(
                m < MARGIN_EPS,
                "{case}: divergence at frame {f} level {l} with a clear oracle margin {m}"
            );
            return false;
        }
    }
    true
}

#[test]
fn free_running_noise_mode_gives_the_oracle_codes() {
    let fx = fixture("small_noise");
    let want = code_frames(&fx, "codes");
    let (codes, hiddens, ended) = free_run(
        "small_noise",
        Sampling::Noise(7),
        false,
        want.len() - 1,
        1.0,
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
    let (codes, hiddens, _) =
        free_run("small_greedy", Sampling::Greedy, false, want.len() - 1, 1.0);
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
    let (codes, hiddens, ended) = free_run("small_end", Sampling::Noise(7), true, 24, 3.0);
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
    assert_eq!(
        codes.last().unwrap()[0],
        chorus_music::config::END_COLUMN as u32
    );
    assert_eq!(ended, Some((EndReason::End, want.len() - 1)));
    let e = rel_l2(&hiddens, &floats(&fx, "frame_hiddens"));
    assert!(e <= TOL, "frame hiddens before END rel L2 {e:e}");
}
