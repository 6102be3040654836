//! The oracle comparisons, generic over the backend: teacher-forced traces and free runs of the
//! `tools/fixtures/music_oracle.py` fixtures.
#![allow(dead_code)]

use chorus_core::LmOps;
use chorus_music::song::LEVELS;
use chorus_music::{EndReason, Sampling, SemanticStage, SongEvent, SongRequest};

use super::*;

const V: usize = 16_385;
const DV: usize = 1024;
/// Positions the fixture songs need: a 33-token prompt, 12 frames and the last feedback.
pub const CONTEXT: usize = 64;

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

/// Teacher-forces the `small_noise` codes through `st` (one song, fresh) and returns the relative
/// L2 error of every traced quantity against the oracle.
pub fn teacher_forcing_errors<B: LmOps>(st: &mut SemanticStage<B>) -> Vec<(&'static str, f64)> {
    teacher_forcing_errors_on(st, &fixture("small_noise"))
}

/// Like [`teacher_forcing_errors`] for any teacher-forcing fixture (`small_noise`, or the
/// full-size one made on the GPU machine).
pub fn teacher_forcing_errors_on<B: LmOps>(
    st: &mut SemanticStage<B>,
    fx: &chorus_core::checkpoint::SafetensorsFile,
) -> Vec<(&'static str, f64)> {
    #[allow(non_snake_case)]
    let H = st.lm_config().hidden_size;
    let forced = code_frames(fx, "codes");
    let frames = forced.len();
    let req = SongRequest {
        prompt: prompt(fx),
        max_frames: frames - 1,
        sampling: Sampling::Noise(7),
        allow_end: false,
        forced: Some(forced.clone()),
    };
    st.add_song(req).unwrap();
    let (lm_hidden, logits) = (floats(fx, "lm_hidden"), floats(fx, "logits"));
    let (depth, heads) = (floats(fx, "depth_hidden"), floats(fx, "head_logits"));
    let feedback = floats(fx, "feedback");
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
    // Outputs are read a frame late: one more step delivers the last frame and the end.
    while ended.is_none() {
        let launched = st
            .step(&mut |ev| match ev {
                SongEvent::Frame { hidden, .. } => p.frames.0.extend_from_slice(hidden),
                SongEvent::Ended { reason, frames, .. } => ended = Some((reason, frames)),
            })
            .unwrap();
        assert_eq!(launched, 0, "no frame past the forced codes is launched");
    }
    assert_eq!(ended, Some((EndReason::MaxFrames, frames - 1)));
    p.frames.1 = floats(fx, "frame_hiddens");
    let mut errors = Vec::new();
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
        errors.push((name, e));
    }
    errors
}

/// A free run: every loop frame's codes, the frame hiddens, and how the song ended.
pub type FreeRun = (Vec<[u32; LEVELS]>, Vec<f32>, Option<(EndReason, usize)>);

/// Runs one song freely, returning the codes of every loop frame and the frame hiddens.
pub fn free_run<B: LmOps>(
    st: &mut SemanticStage<B>,
    case: &str,
    sampling: Sampling,
    allow_end: bool,
    max_frames: usize,
) -> FreeRun {
    let fx = fixture(case);
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
        let launched = st
            .step(&mut |ev| match ev {
                SongEvent::Frame { hidden, .. } => hiddens.extend_from_slice(hidden),
                SongEvent::Ended { reason, frames, .. } => ended = Some((reason, frames)),
            })
            .unwrap();
        if launched > 0 {
            let c = st.trace().unwrap().codes;
            codes.push(std::array::from_fn(|l| c[l] as u32));
        }
    }
    // A song that drew END ran one more frame before its END was read: that frame is discarded.
    if let Some((reason, emitted)) = ended {
        codes.truncate(emitted + 1 + usize::from(reason == EndReason::End));
    }
    (codes, hiddens, ended)
}

/// Codes equal the oracle's, or differ first where the oracle's margin is below the epsilon.
pub fn assert_codes_match(case: &str, ours: &[[u32; LEVELS]], want: &[[u32; LEVELS]]) -> bool {
    let fx = fixture(case);
    let margins = floats(&fx, "margins");
    for (f, (a, b)) in ours.iter().zip(want).enumerate() {
        if let Some(l) = (0..LEVELS).find(|&l| a[l] != b[l]) {
            let m = margins[f * LEVELS + l];
            eprintln!("{case}: first divergence at frame {f}, level {l}: ours {} oracle {} (oracle margin {m:e})", a[l], b[l]);
            assert!(
                m < super::MARGIN_EPS,
                "{case}: divergence at frame {f} level {l} with a clear oracle margin {m}"
            );
            return false;
        }
    }
    true
}
