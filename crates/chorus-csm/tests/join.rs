//! Chunked prefill on the CPU backend with `random-small`: an utterance joining running ones is
//! prefilled in chunks inside their frames, and every utterance's codes and audio are the same
//! bits as when each joiner's prompt is prefilled whole; joiners produce nothing until their
//! prompt is in, and one cancelled while joining frees its seat and changes nothing for others.

mod common;

use chorus_cpu::CpuBackend;
use chorus_csm::{load_csm_model, CsmModel, EndReason, TtsStage};
use chorus_mimi::checkpoint::LoadedModel;
use common::join::{assert_same, run_joins, Join, Output};

fn models() -> (CsmModel, LoadedModel) {
    let m = load_csm_model("random-small").unwrap();
    let mimi = chorus_mimi::checkpoint::load_model("random").unwrap();
    (m, mimi)
}

fn cpu() -> CpuBackend {
    CpuBackend::new(Some(2)).unwrap()
}

fn run(models: &(CsmModel, LoadedModel), chunk: usize, joins: &[Join]) -> Vec<Output> {
    let mut check = |st: &TtsStage<CpuBackend>, i: usize| {
        // Joining an idle stage is prefilled whole; joining admitted utterances, in chunks.
        if st.active() == 1 {
            assert_eq!(st.joining(), 0, "utterance {i} joins an idle stage");
        } else {
            let want = usize::from(chunk > 0);
            assert!(st.joining() >= want, "utterance {i}: {}", st.joining());
        }
    };
    run_joins(cpu(), (&models.0, &models.1), chunk, joins, &mut check)
}

#[test]
fn chunked_prefill_equals_whole_prefill_bit_for_bit() {
    let models = models();
    // Chunks of 4: 10 frames take 0..4, 4..8 and 6..10 (the last recomputes 6..8); 3 frames one
    // chunk padded to 4; 8 frames exactly two. Two join at frame 1 together, one at 3, one after
    // the second wave began. In the second run the first utterance's frames end while the
    // joiner's chunks remain, which then ride in frames of padding alone.
    let runs: [&[Join]; 2] = [
        &[
            Join::new(10, 4, 11, 0),
            Join::new(10, 4, 12, 1),
            Join::new(3, 3, 13, 1),
            Join::new(8, 4, 14, 3),
            Join::new(13, 2, 15, 7),
        ],
        &[Join::new(10, 2, 16, 0), Join::new(13, 3, 17, 1)],
    ];
    for joins in runs {
        let whole = run(&models, 0, joins);
        for (i, w) in whole.iter().enumerate() {
            assert_eq!(w.end, Some((EndReason::MaxFrames, joins[i].frames)), "{i}");
            assert_eq!(w.pcm.len(), joins[i].frames * chorus_core::FRAME_SAMPLES);
        }
        for chunk in [4, 64] {
            let chunked = run(&models, chunk, joins);
            for (i, (c, w)) in chunked.iter().zip(&whole).enumerate() {
                assert_same(c, w, &format!("utterance {i}, chunks of {chunk}"));
            }
        }
    }
}

#[test]
fn a_joining_utterance_has_no_frame_until_its_prompt_is_in() {
    let m = load_csm_model("random-small").unwrap();
    let c = &m.config;
    let mut opts = chorus_csm::TtsOptions::for_utterances(2, common::join::CONTEXT).unwrap();
    opts.prefill_chunk = 4;
    let mut st = TtsStage::new(cpu(), &m, None, opts).unwrap();
    let req = |len, seed| chorus_csm::UtteranceRequest {
        prompt: common::join::prompt(c, len, seed),
        max_frames: 20,
        sampling: chorus_lm::Sampling::Seeded(seed),
        draws: None,
        forced: None,
    };
    let a = st.add(req(10, 1)).unwrap();
    assert_eq!(st.joining(), 0, "an idle stage prefills whole");
    st.step(&mut |_| {}).unwrap();
    // 13 frames in chunks of 4: 0..4, 4..8, 8..12, 9..13.
    let b = st.add(req(13, 2)).unwrap();
    let mut first_b = None;
    for step in 0..8 {
        assert_eq!(st.joining(), usize::from(step < 4), "step {step}");
        let launched = st
            .step(&mut |e| {
                if let chorus_csm::UtteranceEvent::Frame { utterance, .. } = e {
                    if utterance == b && first_b.is_none() {
                        first_b = Some(step);
                    }
                    assert!(utterance == a || step >= 5, "step {step}: {utterance}");
                }
            })
            .unwrap();
        assert_eq!(launched, 2, "step {step}: A, and B's chunk or frame");
    }
    // B's first frame is launched in the step after its last chunk and read a step later.
    assert_eq!(first_b, Some(5));
}

#[test]
fn an_utterance_cancelled_while_joining_frees_its_seat_and_changes_nothing() {
    let models = models();
    let alone = run(&models, 4, &[Join::new(10, 8, 21, 0)]).remove(0);
    let cancelled = Join {
        cancel: Some(3),
        ..Join::new(24, 8, 22, 1)
    };
    let joins = [Join::new(10, 8, 21, 0), cancelled, Join::new(6, 4, 23, 5)];
    let mut check = |st: &TtsStage<CpuBackend>, i: usize| {
        if i == 2 {
            // The cancelled joiner's seat is free again: two admitted of three seats.
            assert_eq!(st.active(), 2);
            assert_eq!(st.joining(), 1);
        }
    };
    let out = run_joins(cpu(), (&models.0, &models.1), 4, &joins, &mut check);
    assert_same(&out[0], &alone, "the running utterance");
    assert!(
        out[1].codes.is_empty() && out[1].end.is_none(),
        "{:?}",
        out[1].end
    );
    let later = run(
        &models,
        0,
        &[Join::new(10, 8, 21, 0), Join::new(6, 4, 23, 5)],
    );
    assert_same(&out[2], &later[1], "an utterance joining after the cancel");
}
