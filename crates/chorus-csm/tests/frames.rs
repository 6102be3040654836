//! The frame program and the stage against transformers' `CsmForConditionalGeneration` (the
//! oracle fixtures, f32, random-small): teacher-forced, every frame's backbone hidden, codebook-0
//! logits, each depth level's hidden and logits and the next backbone input within relative L2
//! 1e-4; free-running, the greedy and noise codes and the drawn end frame identical (a draw may
//! differ only where the oracle's margin is below `NEAR_TIE`, and none is here).

mod common;

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_cpu::CpuBackend;
use chorus_csm::{
    random_model, CsmConfig, EndReason, RandomOptions, TtsOptions, TtsStage, UtteranceEvent,
    UtteranceRequest,
};
use chorus_lm::Sampling;
use serde_json::Value;

/// f32 bound of every compared tensor.
const REL_L2: f64 = 1e-4;
/// A draw whose best-minus-second score is below this may flip between implementations.
const NEAR_TIE: f32 = 1e-4;

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (f64::from(g) - f64::from(w)).powi(2);
        den += f64::from(w).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

fn f32s(f: &SafetensorsFile, name: &str) -> Vec<f32> {
    f.load(name).unwrap().data
}

/// The case's model (its zero gains), its stage, prompt and sampling.
fn setup(
    entry: &Value,
    file: &SafetensorsFile,
) -> (TtsStage<CpuBackend>, UtteranceRequest, CsmConfig) {
    let gains: Vec<f32> = serde_json::from_value(entry["zero_gains"].clone()).unwrap_or_default();
    let opts = RandomOptions {
        zero_gains: gains,
        ..RandomOptions::default()
    };
    let m = random_model(CsmConfig::random_small(), opts).unwrap();
    let c = m.config.clone();
    let mut topts = TtsOptions::for_utterances(2, 128).unwrap();
    topts.draws.temperature = entry["temperature"].as_f64().map_or(0.9, |t| t as f32);
    topts.draws.top_k = entry["top_k"].as_u64().map_or(50, |k| k as usize);
    let st = TtsStage::new(CpuBackend::new(Some(1)).unwrap(), &m, topts).unwrap();
    let seed = entry["seed"].as_u64().unwrap_or(0);
    let sampling = match entry["mode"].as_str().unwrap() {
        "greedy" => Sampling::Greedy,
        "noise" => Sampling::Noise(seed),
        other => panic!("mode {other}"),
    };
    let prompt = common::recorded_prompt(file, c.num_codebooks);
    let max_frames = entry["max_frames"]
        .as_u64()
        .or(entry["frames"].as_u64())
        .unwrap() as usize;
    let req = UtteranceRequest {
        prompt,
        max_frames,
        sampling,
        forced: None,
    };
    (st, req, c)
}

/// Every traced tensor of every frame, teacher-forced with the oracle's codes.
fn teacher_forced(name: &str) {
    let (entry, file) = common::case(name);
    let (mut st, mut req, c) = setup(&entry, &file);
    let (shape, codes) = file.load_i32("codes").unwrap();
    let (frames, n) = (shape[0], shape[1]);
    req.forced = Some(
        codes
            .chunks_exact(n)
            .map(|r| r.iter().map(|&x| x as u32).collect())
            .collect(),
    );
    let (h, d, v) = (
        c.backbone.hidden_size,
        c.depth.hidden_size,
        c.audio_vocab_size,
    );
    let want = |t: &str| f32s(&file, t);
    let (bh, c0, dh, dl, next) = (
        want("backbone_hidden"),
        want("c0_logits"),
        want("depth_hidden"),
        want("depth_logits"),
        want("next_input"),
    );
    st.add(req).unwrap();
    let mut worst = 0.0f64;
    for f in 0..frames {
        st.step(&mut |_| {}).unwrap();
        let t = st.trace().unwrap();
        let mut cmp = |what: &str, got: &[f32], want: &[f32]| {
            let e = rel_l2(got, want);
            assert!(e <= REL_L2, "{name} frame {f}: {what} rel L2 {e:e}");
            worst = worst.max(e);
        };
        cmp("backbone hidden", &t.h, &bh[f * h..(f + 1) * h]);
        cmp("c0 logits", &t.logits, &c0[f * v..(f + 1) * v]);
        for k in 1..n {
            let at = (f * (n - 1) + k - 1) * d;
            cmp(
                &format!("depth hidden {k}"),
                &t.depth_out[k - 1],
                &dh[at..at + d],
            );
            let at = (f * (n - 1) + k - 1) * v;
            cmp(
                &format!("depth logits {k}"),
                &t.head_logits[k - 1],
                &dl[at..at + v],
            );
        }
        cmp("next input", &t.feedback, &next[f * h..(f + 1) * h]);
        let got: Vec<i32> = t.codes.clone();
        assert_eq!(
            got,
            codes[f * n..(f + 1) * n],
            "{name} frame {f}: forced codes"
        );
    }
    eprintln!(
        "{name}: teacher forcing over {frames} frames, worst rel L2 {worst:.2e} (bound {REL_L2:e})"
    );
}

#[test]
fn teacher_forcing_matches_the_oracle_greedy() {
    teacher_forced("small_greedy");
}

#[test]
fn teacher_forcing_matches_the_oracle_noise() {
    teacher_forced("small_noise");
}

#[test]
fn teacher_forcing_matches_the_oracle_stop() {
    teacher_forced("small_stop");
}

/// Free running: the codes the stage draws, against the oracle's; the end where it ends.
fn free_running(name: &str) {
    let (entry, file) = common::case(name);
    let (mut st, req, c) = setup(&entry, &file);
    let n = c.num_codebooks;
    let (_, want) = file.load_i32("codes").unwrap();
    let margins = f32s(&file, "margins");
    let id = st.add(req).unwrap();
    let mut got: Vec<i32> = Vec::new();
    let mut end = None;
    while st.active() > 0 {
        st.step(&mut |e| match e {
            UtteranceEvent::Frame {
                utterance, codes, ..
            } => {
                assert_eq!(utterance, id);
                got.extend(codes.iter().map(|&x| x as i32));
            }
            UtteranceEvent::Ended { reason, frames, .. } => end = Some((reason, frames)),
        })
        .unwrap();
    }
    let emitted = got.len() / n;
    let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
    if let Some(i) = first_diff {
        let m = margins[i];
        panic!("{name}: codes differ first at frame {} codebook {} (oracle margin {m:e}, near-tie bound {NEAR_TIE:e})", i / n, i % n);
    }
    match entry["stop_frame"].as_u64() {
        Some(stop) => {
            assert_eq!(end, Some((EndReason::EndFrame, stop as usize)), "{name}");
            assert_eq!(emitted, stop as usize);
        }
        None => {
            assert_eq!(end.map(|e| e.0), Some(EndReason::MaxFrames), "{name}");
            assert_eq!(got, want, "{name}");
        }
    }
    let min_margin = margins.iter().copied().fold(f32::INFINITY, f32::min);
    eprintln!("{name}: {emitted} frames token-identical to the oracle (smallest oracle margin {min_margin:.2e})");
}

#[test]
fn greedy_codes_equal_the_oracle() {
    free_running("small_greedy");
}

#[test]
fn noise_codes_equal_the_oracle() {
    free_running("small_noise");
}

#[test]
fn the_drawn_end_frame_ends_where_the_oracle_does() {
    free_running("small_stop");
}
