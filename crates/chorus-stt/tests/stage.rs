//! The stream stage on the CPU backend: bad input is refused with a named error and changes
//! nothing, a recycled slot starts clean (its ring and text state reset), streams end and leave,
//! and seeded sampling repeats.

use chorus_cpu::CpuBackend;
use chorus_lm::Sampling;
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{
    random_model, StreamEvent, StreamId, StreamRequest, SttConfig, SttModel, SttOptions, SttStage,
};

fn model() -> SttModel {
    random_model(SttConfig::random_small(), RANDOM_STT_SEED).unwrap()
}

fn stage(m: &SttModel, streams: usize) -> SttStage<CpuBackend> {
    let mut opts = SttOptions::for_streams(streams).unwrap();
    opts.max_frames = 30;
    let mut st = SttStage::new(CpuBackend::new(Some(2)).unwrap(), m, opts).unwrap();
    st.warmup().unwrap();
    st
}

fn frame(k: usize, salt: usize) -> Vec<u32> {
    (0..32)
        .map(|j| ((k * 977 + j * 31 + salt * 7) % 2048) as u32)
        .collect()
}

/// Pushes `frames` frames to `id`, ends it, drains; returns its tokens.
fn tokens_of(st: &mut SttStage<CpuBackend>, id: StreamId, frames: usize, salt: usize) -> Vec<u32> {
    for k in 0..frames {
        st.push_frame(id, &frame(k, salt)).unwrap();
    }
    st.end(id).unwrap();
    let mut out = Vec::new();
    st.drain(&mut |e| {
        if let StreamEvent::Token { stream, token, .. } = e {
            if stream == id {
                out.push(token);
            }
        }
    })
    .unwrap();
    out
}

#[test]
fn bad_input_is_refused_by_name_and_changes_nothing() {
    let m = model();
    let mut st = stage(&m, 1);
    let id = st.add(StreamRequest::default()).unwrap();
    let e = st.push_frame(id, &[1; 31]).unwrap_err().to_string();
    assert!(e.contains("a frame has 32 codes, got 31"), "{e}");
    let mut bad = frame(0, 0);
    bad[5] = 2048;
    let e = st.push_frame(id, &bad).unwrap_err().to_string();
    assert!(e.contains("code 2048 of codebook 5"), "{e}");
    let e = st.push_frame(id + 9, &frame(0, 0)).unwrap_err().to_string();
    assert!(e.contains(&format!("no running stream {}", id + 9)), "{e}");
    let e = st.add(StreamRequest::default()).unwrap_err().to_string();
    assert!(e.contains("busy: all 1 stream slots"), "{e}");
    // After the refusals the stream runs as if they never happened.
    let got = tokens_of(&mut st, id, 8, 0);
    let mut fresh = stage(&m, 1);
    let id2 = fresh.add(StreamRequest::default()).unwrap();
    assert_eq!(got, tokens_of(&mut fresh, id2, 8, 0));
    assert_eq!(got.len(), 9, "position 0 plus one per frame");
    assert_eq!(st.active(), 0, "the ended stream left");
    let e = st.end(id).unwrap_err().to_string();
    assert!(e.contains("no running stream"), "{e}");
}

#[test]
fn forced_tokens_outside_the_vocabulary_and_too_many_frames_are_refused() {
    let m = model();
    let mut st = stage(&m, 2);
    let e = st
        .add(StreamRequest {
            sampling: Sampling::Greedy,
            forced: Some(vec![1, 40]),
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("forced token 40 at position 1"), "{e}");
    assert_eq!(st.active(), 0);
    let id = st.add(StreamRequest::default()).unwrap();
    for k in 0..30 {
        st.push_frame(id, &frame(k, 1)).unwrap();
    }
    let e = st.push_frame(id, &frame(30, 1)).unwrap_err().to_string();
    assert!(e.contains("reached the stage's 30 frames"), "{e}");
    st.end(id).unwrap();
    let e = st.push_frame(id, &frame(0, 1)).unwrap_err().to_string();
    assert!(e.contains("has ended"), "{e}");
}

#[test]
fn a_recycled_slot_starts_clean() {
    // A stream run long past its window on the slot, cancelled mid-stream; the next stream on
    // that slot gives the tokens of a fresh stage.
    let m = model();
    let mut st = stage(&m, 1);
    let a = st.add(StreamRequest::default()).unwrap();
    for k in 0..20 {
        st.push_frame(a, &frame(k, 3)).unwrap();
    }
    for _ in 0..12 {
        st.step(&mut |_| {}).unwrap();
    }
    st.cancel(a).unwrap();
    st.drain(&mut |_| {}).unwrap();
    let b = st.add(StreamRequest::default()).unwrap();
    let recycled = tokens_of(&mut st, b, 15, 4);
    let mut fresh = stage(&m, 1);
    let c = fresh.add(StreamRequest::default()).unwrap();
    assert_eq!(recycled, tokens_of(&mut fresh, c, 15, 4));
}

#[test]
fn seeded_sampling_repeats_and_differs_from_greedy() {
    let m = model();
    let run = |sampling: Sampling| {
        let mut st = stage(&m, 1);
        let id = st
            .add(StreamRequest {
                sampling,
                forced: None,
            })
            .unwrap();
        tokens_of(&mut st, id, 20, 5)
    };
    let a = run(Sampling::Seeded(7));
    assert_eq!(a, run(Sampling::Seeded(7)));
    assert_ne!(a, run(Sampling::Greedy));
}

#[test]
fn vad_probabilities_come_with_every_token() {
    let m = model();
    let mut st = stage(&m, 1);
    let id = st.add(StreamRequest::default()).unwrap();
    st.push_frame(id, &frame(0, 6)).unwrap();
    st.end(id).unwrap();
    let mut seen = 0;
    st.drain(&mut |e| {
        if let StreamEvent::Token { vad, .. } = e {
            let v = vad.unwrap();
            assert_eq!(v.len(), 4);
            assert!(v.iter().all(|p| (0.0..=1.0).contains(p)), "{v:?}");
            seen += 1;
        }
    })
    .unwrap();
    assert_eq!(seen, 2);
}

#[test]
fn a_reset_stream_starts_over_as_a_fresh_one() {
    // Reset mid-stream with a step in flight: its old outputs are dropped and the new positions
    // give the tokens of a fresh stage.
    let m = model();
    let mut st = stage(&m, 1);
    let id = st.add(StreamRequest::default()).unwrap();
    for k in 0..12 {
        st.push_frame(id, &frame(k, 8)).unwrap();
    }
    for _ in 0..9 {
        st.step(&mut |_| {}).unwrap();
    }
    st.reset(id).unwrap();
    let after = tokens_of(&mut st, id, 10, 9);
    let mut fresh = stage(&m, 1);
    let other = fresh.add(StreamRequest::default()).unwrap();
    assert_eq!(after, tokens_of(&mut fresh, other, 10, 9));
    let e = st.reset(id).unwrap_err().to_string();
    assert!(e.contains("no running stream"), "{e}");
}

#[test]
fn reading_the_step_in_flight_launches_nothing_and_a_gathered_step_equals_its_solo_runs() {
    let m = model();
    // Alone: each stream's tokens over 6 frames.
    let solo: Vec<Vec<u32>> = (0..2)
        .map(|salt| {
            let mut st = stage(&m, 1);
            let id = st.add(StreamRequest::default()).unwrap();
            tokens_of(&mut st, id, 6, salt)
        })
        .collect();
    let mut st = stage(&m, 2);
    let ids = [
        st.add(StreamRequest::default()).unwrap(),
        st.add(StreamRequest::default()).unwrap(),
    ];
    let mut got: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    let mut sink = |e: StreamEvent<'_>| {
        if let StreamEvent::Token { stream, token, .. } = e {
            got[usize::from(stream == ids[1])].push(token);
        }
    };
    // Both position 0s are queued at admission.
    assert_eq!(st.queued_streams(), 2);
    assert_eq!(st.step(&mut sink).unwrap(), 2);
    assert!(st.step_in_flight());
    for k in 0..6 {
        // Stream 0's frame comes first; the step in flight is read while it waits for company.
        st.push_frame(ids[0], &frame(k, 0)).unwrap();
        assert_eq!(st.queued_streams(), 1);
        st.read_in_flight(&mut sink).unwrap();
        assert!(!st.step_in_flight(), "the read launched nothing");
        assert_eq!(st.queued_streams(), 1, "the queued frame stays queued");
        st.push_frame(ids[1], &frame(k, 1)).unwrap();
        assert_eq!(st.step(&mut sink).unwrap(), 2, "one step for both streams");
    }
    for id in ids {
        st.end(id).unwrap();
    }
    st.drain(&mut sink).unwrap();
    assert_eq!(got, [solo[0].clone(), solo[1].clone()]);
}

#[test]
fn streams_are_found_by_id_after_others_leave_between_them() {
    // Lookups search the streams by id (they stay sorted): cancelling streams in the middle and
    // admitting more keeps every other stream reachable, the cancelled ones refused by name,
    // and a stream's tokens those of its solo run.
    let m = model();
    let mut st = stage(&m, 6);
    let ids: Vec<StreamId> = (0..5)
        .map(|_| st.add(StreamRequest::default()).unwrap())
        .collect();
    st.cancel(ids[1]).unwrap();
    st.cancel(ids[3]).unwrap();
    let late = st.add(StreamRequest::default()).unwrap();
    for (k, &id) in [ids[0], ids[2], ids[4], late].iter().enumerate() {
        st.push_frame(id, &frame(0, k)).unwrap();
    }
    for &gone in [ids[1], ids[3]].iter() {
        let e = st.push_frame(gone, &frame(0, 0)).unwrap_err().to_string();
        assert!(e.contains(&format!("no running stream {gone}")), "{e}");
    }
    st.drain(&mut |_| {}).unwrap();
    let got = tokens_of(&mut st, ids[2], 6, 9);
    let mut solo = stage(&m, 1);
    let s = solo.add(StreamRequest::default()).unwrap();
    solo.push_frame(s, &frame(0, 1)).unwrap();
    solo.drain(&mut |_| {}).unwrap();
    assert_eq!(got, tokens_of(&mut solo, s, 6, 9));
}
