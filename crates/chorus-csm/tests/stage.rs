//! The speech stage on the CPU backend with `random-small`: every frame's codes in range and
//! deterministic, an utterance's codes independent of the utterances beside it and of when it
//! joins or of their draw settings, teacher forcing, the end rule, the length cap, and refusals
//! that change nothing.

use chorus_cpu::CpuBackend;
use chorus_csm::prompt::PromptFrame;
use chorus_csm::{
    load_csm_model, CsmConfig, CsmModel, DrawSettings, EndReason, TtsOptions, TtsStage,
    UtteranceEvent, UtteranceId, UtteranceRequest, MAX_TOP_K, UPSTREAM_DRAWS,
};
use chorus_lm::Sampling;
use std::collections::HashMap;

fn stage(m: &CsmModel, n: usize) -> TtsStage<CpuBackend> {
    let opts = TtsOptions::for_utterances(n, 64).unwrap();
    TtsStage::new(CpuBackend::new(Some(1)).unwrap(), m, None, opts).unwrap()
}

/// A prompt of a context turn (text, 2 audio frames, the EOS frame) and a text to say.
fn prompt(c: &CsmConfig, salt: u32) -> Vec<PromptFrame> {
    let books = c.num_codebooks as u32;
    let audio =
        |f: u32| PromptFrame::Audio((0..books).map(|l| (f * 3 + l + salt) % 9 + 1).collect());
    vec![
        PromptFrame::Text(1),
        PromptFrame::Text(10 + salt),
        PromptFrame::Text(3),
        audio(0),
        audio(1),
        PromptFrame::Audio(vec![0; books as usize]),
        PromptFrame::Text(1),
        PromptFrame::Text(20 + salt),
        PromptFrame::Text(21),
        PromptFrame::Text(3),
    ]
}

fn request(c: &CsmConfig, salt: u32, sampling: Sampling, frames: usize) -> UtteranceRequest {
    UtteranceRequest {
        prompt: prompt(c, salt),
        max_frames: frames,
        sampling,
        draws: None,
        forced: None,
    }
}

type Outputs = HashMap<UtteranceId, (Vec<Vec<u32>>, Option<EndReason>)>;

/// Steps until every utterance ended; returns each one's frames and end.
fn run(st: &mut TtsStage<CpuBackend>) -> Outputs {
    run_steps(st, Outputs::new(), usize::MAX)
}

/// Up to `steps` steps (or until every utterance ended), adding to `out`.
fn run_steps(st: &mut TtsStage<CpuBackend>, mut out: Outputs, steps: usize) -> Outputs {
    for _ in 0..steps.min(200) {
        let launched = st
            .step(&mut |e| match e {
                UtteranceEvent::Frame {
                    utterance,
                    index,
                    codes,
                    ..
                } => {
                    let entry = out.entry(utterance).or_default();
                    assert_eq!(entry.0.len(), index, "frames arrive in order");
                    entry.0.push(codes.to_vec());
                }
                UtteranceEvent::Ended {
                    utterance,
                    reason,
                    frames,
                    ..
                } => {
                    let entry = out.entry(utterance).or_default();
                    assert_eq!(entry.0.len(), frames);
                    entry.1 = Some(reason);
                }
            })
            .unwrap();
        if launched == 0 && st.active() == 0 {
            break;
        }
    }
    out
}

#[test]
fn codes_are_deterministic_in_range_and_independent_of_company() {
    let m = load_csm_model("random-small").unwrap();
    let c = m.config.clone();
    let alone = |salt, sampling| {
        let mut st = stage(&m, 4);
        let id = st.add(request(&c, salt, sampling, 6)).unwrap();
        run(&mut st).remove(&id).unwrap()
    };
    let a = alone(0, Sampling::Seeded(7));
    assert_eq!(a.0.len(), 6);
    assert_eq!(a.1, Some(EndReason::MaxFrames));
    assert!(a
        .0
        .iter()
        .flatten()
        .all(|&x| (x as usize) < c.audio_vocab_size));
    assert_eq!(alone(0, Sampling::Seeded(7)).0, a.0, "deterministic");
    assert_ne!(alone(0, Sampling::Seeded(8)).0, a.0, "the seed matters");
    let g = alone(1, Sampling::Greedy);
    // Three at once, one joining two frames late: each equals its run alone.
    let mut st = stage(&m, 4);
    let ia = st.add(request(&c, 0, Sampling::Seeded(7), 6)).unwrap();
    let early = run_steps(&mut st, Outputs::new(), 2);
    let ig = st.add(request(&c, 1, Sampling::Greedy, 6)).unwrap();
    let ib = st.add(request(&c, 2, Sampling::Seeded(9), 6)).unwrap();
    let mut rest = run_steps(&mut st, early, usize::MAX);
    assert_eq!(
        rest.remove(&ia).unwrap().0,
        a.0,
        "seeded utterance beside others"
    );
    assert_eq!(
        rest.remove(&ig).unwrap().0,
        g.0,
        "greedy utterance joining late"
    );
    assert_eq!(rest.remove(&ib).unwrap().0.len(), 6);
    assert_eq!(st.kv_blocks().0, 0, "every block returned");
}

#[test]
fn teacher_forcing_and_the_end_frame() {
    let m = load_csm_model("random-small").unwrap();
    let c = m.config.clone();
    let books = c.num_codebooks;
    let mut st = stage(&m, 2);
    let forced: Vec<Vec<u32>> = vec![
        vec![1; books],
        vec![2; books],
        vec![0; books],
        vec![3; books],
    ];
    let mut req = request(&c, 0, Sampling::Greedy, 10);
    req.forced = Some(forced.clone());
    let id = st.add(req).unwrap();
    let got = run(&mut st).remove(&id).unwrap();
    // Frames 0 and 1 as forced, then the all-zero frame ends it, unemitted.
    assert_eq!(got.0, forced[..2].to_vec());
    assert_eq!(got.1, Some(EndReason::EndFrame));
    let mut req = request(&c, 0, Sampling::Greedy, 10);
    req.forced = Some(forced[..2].to_vec());
    let id = st.add(req).unwrap();
    assert_eq!(
        run(&mut st).remove(&id).unwrap().1,
        Some(EndReason::ForcedDone)
    );
}

#[test]
fn bad_requests_are_named_and_change_nothing() {
    let m = load_csm_model("random-small").unwrap();
    let c = m.config.clone();
    let mut st = stage(&m, 1);
    let check = |st: &mut TtsStage<CpuBackend>, req: UtteranceRequest, want: &str| {
        let err = st.add(req).unwrap_err().to_string();
        assert!(err.contains(want), "{err} (wanted {want})");
        assert_eq!(st.active(), 0);
        assert_eq!(st.kv_blocks().0, 0);
    };
    let mut r = request(&c, 0, Sampling::Greedy, 4);
    r.prompt.push(PromptFrame::Text(c.text_vocab_size as u32));
    check(&mut st, r, "text id 100");
    let mut r = request(&c, 0, Sampling::Greedy, 4);
    r.prompt.push(PromptFrame::Audio(vec![1; 3]));
    check(&mut st, r, "has 3 codes");
    let mut r = request(&c, 0, Sampling::Greedy, 4);
    r.prompt.push(PromptFrame::Audio(vec![11; c.num_codebooks]));
    check(&mut st, r, "code 11 of codebook 0");
    check(
        &mut st,
        request(&c, 0, Sampling::Greedy, 60),
        "exceed the stage's max context 64",
    );
    check(
        &mut st,
        request(&c, 0, Sampling::Greedy, 0),
        "max_frames must be at least 1",
    );
    let a = st.add(request(&c, 0, Sampling::Greedy, 4)).unwrap();
    let err = st
        .add(request(&c, 0, Sampling::Greedy, 4))
        .unwrap_err()
        .to_string();
    assert!(err.contains("busy"), "{err}");
    assert_eq!(st.cancel(a).unwrap(), 0);
    assert!(st
        .cancel(a)
        .unwrap_err()
        .to_string()
        .contains("no running utterance"));
    assert_eq!(st.kv_blocks().0, 0);
}

fn with_draws(mut r: UtteranceRequest, temperature: f32, top_k: usize) -> UtteranceRequest {
    r.draws = Some(DrawSettings { temperature, top_k });
    r
}

#[test]
fn per_utterance_draws_in_one_step_equal_their_solo_runs() {
    let m = load_csm_model("random-small").unwrap();
    let c = m.config.clone();
    let frames = 6;
    let reqs = || {
        vec![
            with_draws(request(&c, 0, Sampling::Seeded(7), frames), 0.4, 2),
            with_draws(request(&c, 1, Sampling::Seeded(7), frames), 3.0, MAX_TOP_K),
            // Temperature 0 draws greedily, whatever the sampling mode.
            with_draws(request(&c, 2, Sampling::Seeded(7), frames), 0.0, 50),
            request(&c, 3, Sampling::Seeded(7), frames),
        ]
    };
    let solo: Vec<Vec<Vec<u32>>> = reqs()
        .into_iter()
        .map(|r| {
            let mut st = stage(&m, 4);
            let id = st.add(r).unwrap();
            run(&mut st).remove(&id).unwrap().0
        })
        .collect();
    let mut st = stage(&m, 4);
    let ids: Vec<UtteranceId> = reqs().into_iter().map(|r| st.add(r).unwrap()).collect();
    let mut together = run(&mut st);
    for (i, id) in ids.iter().enumerate() {
        let got = together.remove(id).unwrap().0;
        assert_eq!(got.len(), frames);
        assert_eq!(got, solo[i], "utterance {i} beside the others");
    }
    // The settings are used: each differs from the same utterance at the stage's default, and
    // temperature 0 is the greedy draw.
    let alone = |r: UtteranceRequest| {
        let mut st = stage(&m, 1);
        let id = st.add(r).unwrap();
        run(&mut st).remove(&id).unwrap().0
    };
    for (i, salt) in [(0, 0), (1, 1)] {
        let default = alone(request(&c, salt, Sampling::Seeded(7), frames));
        assert_ne!(solo[i], default, "utterance {i}: its draws changed nothing");
    }
    assert_eq!(solo[2], alone(request(&c, 2, Sampling::Greedy, frames)));
    // The stage's default stated explicitly is the default.
    let explicit = alone(with_draws(
        request(&c, 3, Sampling::Seeded(7), frames),
        UPSTREAM_DRAWS.temperature,
        UPSTREAM_DRAWS.top_k,
    ));
    assert_eq!(explicit, solo[3]);
}

#[test]
fn bad_draw_settings_are_named_and_change_nothing() {
    let m = load_csm_model("random-small").unwrap();
    let c = m.config.clone();
    let mut st = stage(&m, 2);
    let running = st.add(request(&c, 0, Sampling::Seeded(3), 4)).unwrap();
    let blocks = st.kv_blocks();
    for (t, k, want) in [
        (-0.5, 50, "temperature -0.5"),
        (f32::NAN, 50, "temperature NaN"),
        (f32::INFINITY, 50, "temperature inf"),
        (0.9, 0, "top_k 0"),
        (0.9, MAX_TOP_K + 1, "top_k 2052 must be in 1..=2051"),
    ] {
        let r = with_draws(request(&c, 1, Sampling::Seeded(3), 4), t, k);
        let err = st.add(r).unwrap_err().to_string();
        assert!(err.contains(want), "{err} (wanted {want})");
        assert_eq!(st.active(), 1);
        assert_eq!(st.kv_blocks(), blocks);
    }
    let out = run(&mut st);
    assert_eq!(
        out[&running].0.len(),
        4,
        "the running utterance is untouched"
    );
    // A stage's default is checked as a request's.
    let mut opts = TtsOptions::for_utterances(1, 64).unwrap();
    opts.draws.top_k = 0;
    let err = TtsStage::new(CpuBackend::new(Some(1)).unwrap(), &m, None, opts)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("top_k 0"), "{err}");
}
