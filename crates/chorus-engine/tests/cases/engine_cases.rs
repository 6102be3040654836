// Scheduler behaviour against the deterministic fake decoder, included by `engine.rs` (steps
// one at a time) and `engine_pipelined.rs` (a step queued while the next is picked), which set
// `PIPELINED`.

use std::time::Duration;

use chorus_core::{FrameInput, FRAME_SAMPLES};
use chorus_engine::fake::{FakeDecoder, FakeOptions, Gate, Poison, StepLog, POISON_CODE};
use chorus_engine::{Engine, EngineConfig, Stream, StreamError, StreamEvent, StreamInput};

const WAIT: Duration = Duration::from_secs(10);

fn start(opts: FakeOptions, config: EngineConfig) -> (Engine, StepLog) {
    let fake = FakeDecoder::new(opts);
    let log = fake.log.clone();
    let engine = Engine::start(Box::new(move || Ok(Box::new(fake) as _)), config).unwrap();
    (engine, log)
}

fn opts(max_slots: usize, largest_batch: usize) -> FakeOptions {
    FakeOptions {
        max_slots,
        largest_batch,
        pipelined: PIPELINED,
        ..FakeOptions::default()
    }
}

/// Seeded codes for stream `s`, frame `t`.
fn codes(s: u64, t: u64, n_q: usize) -> Vec<u32> {
    (0..n_q as u64)
        .map(|q| ((s * 7919 + t * 104_729 + q * 31) % 2000) as u32)
        .collect()
}

async fn next(stream: &Stream) -> StreamEvent {
    tokio::time::timeout(WAIT, stream.recv())
        .await
        .expect("event in time")
}

/// Collects `n` PCM frames, checking their indices count up from `first`.
async fn collect_pcm(stream: &Stream, first: u64, n: u64) -> Vec<f32> {
    let mut out = Vec::new();
    for i in 0..n {
        match next(stream).await {
            StreamEvent::Pcm { index, samples } => {
                assert_eq!(index, first + i);
                assert_eq!(samples.len(), FRAME_SAMPLES);
                out.extend_from_slice(&samples);
            }
            other => panic!("expected PCM {}, got {other:?}", first + i),
        }
    }
    out
}

fn reference(frames: &[Vec<u32>]) -> Vec<f32> {
    FakeDecoder::reference(frames.iter().map(|c| FrameInput::Codes(c)))
}

#[tokio::test]
async fn concurrent_streams_each_match_their_offline_decode() {
    let mut o = opts(6, 4);
    let gate = Gate::default();
    o.gate = Some(gate.clone());
    let (engine, log) = start(o, EngineConfig::default());
    let mut streams = Vec::new();
    for s in 0..6u64 {
        let n_q = 1 + (s as usize * 5) % 32;
        let stream = engine.open(StreamInput::Codes { n_q }).unwrap();
        streams.push((stream, n_q));
    }
    let frames = 12u64;
    let mut sent: Vec<Vec<Vec<u32>>> = vec![Vec::new(); streams.len()];
    for t in 0..frames {
        for (s, (stream, n_q)) in streams.iter_mut().enumerate() {
            let c = codes(s as u64, t, *n_q);
            stream.submit_codes(&c).unwrap();
            sent[s].push(c);
        }
        if t == 0 {
            // Hold the first step until every stream has frames queued, so later steps batch.
            gate.wait_for_step();
        }
    }
    gate.open();
    for (s, (stream, _)) in streams.iter().enumerate() {
        let pcm = collect_pcm(stream, 0, frames).await;
        assert_eq!(pcm, reference(&sent[s]), "stream {s}");
    }
    let log = log.lock().unwrap();
    assert!(log.iter().all(|step| step.len() <= 4));
    assert!(log.iter().any(|step| step.len() > 1), "steps were batched");
}

#[tokio::test]
async fn several_frames_in_one_submission_decode_in_order() {
    let (engine, _) = start(opts(2, 2), EngineConfig::default());
    let mut stream = engine.open(StreamInput::Codes { n_q: 4 }).unwrap();
    let frames: Vec<Vec<u32>> = (0..5).map(|t| codes(3, t, 4)).collect();
    stream.submit_codes(&frames.concat()).unwrap();
    assert_eq!(collect_pcm(&stream, 0, 5).await, reference(&frames));
}

#[tokio::test]
async fn reset_restarts_the_stream_from_zero_state() {
    let (engine, _) = start(opts(2, 2), EngineConfig::default());
    let mut stream = engine.open(StreamInput::Codes { n_q: 8 }).unwrap();
    let before: Vec<Vec<u32>> = (0..3).map(|t| codes(1, t, 8)).collect();
    let after: Vec<Vec<u32>> = (10..13).map(|t| codes(1, t, 8)).collect();
    stream.submit_codes(&before.concat()).unwrap();
    stream.reset().unwrap();
    stream.submit_codes(&after.concat()).unwrap();
    assert_eq!(collect_pcm(&stream, 0, 3).await, reference(&before));
    assert_eq!(
        next(&stream).await,
        StreamEvent::ResetDone { next_frame: 3 }
    );
    assert_eq!(collect_pcm(&stream, 3, 3).await, reference(&after));
}

#[tokio::test]
async fn full_engine_answers_busy_and_a_reused_slot_starts_clean() {
    let (engine, _) = start(opts(1, 1), EngineConfig::default());
    let mut first = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    assert_eq!(
        engine.open(StreamInput::Codes { n_q: 2 }).err(),
        Some(StreamError::Busy { max_slots: 1 })
    );
    first.submit_codes(&codes(5, 0, 2)).unwrap();
    collect_pcm(&first, 0, 1).await;
    drop(first);
    assert_eq!(engine.status().free_slots, 1);
    let mut second = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    assert_eq!(second.slot(), 0);
    let frames = vec![codes(6, 0, 2), codes(6, 1, 2)];
    second.submit_codes(&frames.concat()).unwrap();
    assert_eq!(collect_pcm(&second, 0, 2).await, reference(&frames));
}

#[tokio::test]
async fn every_ready_stream_is_served_before_any_gets_a_second_frame() {
    let mut o = opts(5, 2);
    let gate = Gate::default();
    o.gate = Some(gate.clone());
    let (engine, log) = start(o, EngineConfig::default());
    // A first stream holds the engine in a step while the others queue all their frames.
    let mut blocker = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    blocker.submit_codes(&[1]).unwrap();
    gate.wait_for_step();
    let mut streams: Vec<Stream> = (0..4)
        .map(|_| engine.open(StreamInput::Codes { n_q: 1 }).unwrap())
        .collect();
    for (s, stream) in streams.iter_mut().enumerate() {
        let c: Vec<u32> = (0..3).map(|t| (s * 10 + t) as u32).collect();
        stream.submit_codes(&c).unwrap();
    }
    gate.open();
    collect_pcm(&blocker, 0, 1).await;
    for stream in &streams {
        collect_pcm(stream, 0, 3).await;
    }
    let slots: Vec<usize> = streams.iter().map(Stream::slot).collect();
    let log = log.lock().unwrap();
    let mut served = [0usize; 5];
    for step in log.iter().filter(|s| !s.contains(&blocker.slot())) {
        for &slot in step {
            served[slot] += 1;
        }
        let counts: Vec<usize> = slots.iter().map(|&s| served[s]).collect();
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(hi - lo <= 1, "unfair service: {counts:?} after {step:?}");
    }
}

#[tokio::test]
async fn a_large_step_hands_every_stream_its_own_pcm_in_order() {
    // One step of 150 frames: each stream gets its own PCM, in order.
    let n = 150;
    let mut o = opts(n + 1, n + 1);
    let gate = Gate::default();
    o.gate = Some(gate.clone());
    let (engine, log) = start(o, EngineConfig::default());
    let mut blocker = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    blocker.submit_codes(&[1, 2]).unwrap();
    gate.wait_for_step();
    let mut streams: Vec<Stream> = (0..n)
        .map(|_| engine.open(StreamInput::Codes { n_q: 2 }).unwrap())
        .collect();
    let mut sent = Vec::new();
    for (s, stream) in streams.iter_mut().enumerate() {
        let frames: Vec<Vec<u32>> = (0..3).map(|t| codes(100 + s as u64, t, 2)).collect();
        stream.submit_codes(&frames.concat()).unwrap();
        sent.push(frames);
    }
    gate.open();
    collect_pcm(&blocker, 0, 1).await;
    for (s, stream) in streams.iter().enumerate() {
        assert_eq!(collect_pcm(stream, 0, 3).await, reference(&sent[s]), "stream {s}");
    }
    let largest = log.lock().unwrap().iter().map(Vec::len).max().unwrap_or(0);
    assert!(largest >= n, "no step held every stream (largest {largest})");
}

#[tokio::test]
async fn frames_share_their_step_block_without_a_copy() {
    let (engine, _log) = start(opts(4, 4), EngineConfig::default());
    let mut streams: Vec<Stream> = (0..3)
        .map(|_| engine.open(StreamInput::Codes { n_q: 2 }).unwrap())
        .collect();
    for (s, stream) in streams.iter_mut().enumerate() {
        stream.submit_codes(&codes(s as u64, 0, 2)).unwrap();
    }
    for (s, stream) in streams.iter().enumerate() {
        match next(stream).await {
            StreamEvent::Pcm { index, samples } => {
                assert_eq!(index, 0);
                assert!(samples.is_shared(), "stream {s}: PCM was copied");
                assert_eq!(&samples[..], &reference(&[codes(s as u64, 0, 2)])[..]);
            }
            other => panic!("stream {s}: expected PCM, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_client_too_far_ahead_is_refused() {
    let config = EngineConfig {
        max_pending_frames: 4,
        ..EngineConfig::default()
    };
    let (engine, _) = start(opts(2, 2), config);
    let mut stream = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    // A full bound right after opening fits: the slot's own reset does not count.
    let mut full = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    full.submit_codes(&[0, 1, 2, 3]).unwrap();
    let five: Vec<u32> = (0..5).collect();
    assert_eq!(
        stream.submit_codes(&five),
        Err(StreamError::QueueFull { limit: 4 })
    );
    assert_eq!(stream.frames_submitted(), 0, "nothing of it was queued");
}

#[tokio::test]
async fn a_reader_that_falls_behind_is_cut_off_alone() {
    let config = EngineConfig {
        max_undelivered_frames: 2,
        ..EngineConfig::default()
    };
    let (engine, _) = start(opts(2, 2), config);
    let mut slow = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    let mut good = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    slow.submit_codes(&[1, 2, 3, 4]).unwrap();
    let frames: Vec<Vec<u32>> = (0..6).map(|t| vec![t]).collect();
    // The good reader collects each frame before it sends the next, so it is never behind.
    let mut pcm = Vec::new();
    for (t, f) in frames.iter().enumerate() {
        good.submit_codes(f).unwrap();
        pcm.extend(collect_pcm(&good, t as u64, 1).await);
    }
    assert_eq!(pcm, reference(&frames));
    assert!(slow.is_failed() && !good.is_failed());
    // What was decoded before the cut-off is still readable, then the reason.
    collect_pcm(&slow, 0, 2).await;
    assert_eq!(
        next(&slow).await,
        StreamEvent::Failed(StreamError::SlowConsumer { limit: 2 })
    );
    assert_eq!(slow.submit_codes(&[1]), Err(StreamError::Finished));
    assert_eq!(engine.metrics().errors.get("slow_consumer"), 1);
    assert_eq!(engine.status().live_streams, 1);
}

#[tokio::test]
async fn a_frame_refused_by_validation_fails_only_its_stream() {
    let mut o = opts(3, 3);
    o.poison = Poison::Validation;
    let gate = Gate::default();
    o.gate = Some(gate.clone());
    let (engine, log) = start(o, EngineConfig::default());
    let mut blocker = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    blocker.submit_codes(&[0]).unwrap();
    gate.wait_for_step();
    // Both frames are queued while the engine is held, so the next step takes them together.
    let mut bad = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    let mut good = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    bad.submit_codes(&[POISON_CODE]).unwrap();
    good.submit_codes(&[7]).unwrap();
    gate.open();
    collect_pcm(&blocker, 0, 1).await;
    assert!(matches!(
        next(&bad).await,
        StreamEvent::Failed(StreamError::DecodeFailed(_))
    ));
    assert_eq!(collect_pcm(&good, 0, 1).await, reference(&[vec![7]]));
    // The good frame was first refused in a shared step, then decoded alone.
    assert!(log.lock().unwrap().iter().any(|s| s == &vec![good.slot()]));
}

#[tokio::test]
async fn a_failed_step_frees_the_slot_and_the_next_owner_starts_clean() {
    let mut o = opts(1, 1);
    o.poison = Poison::Backend;
    let (engine, _) = start(o, EngineConfig::default());
    let mut bad = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    bad.submit_codes(&[3, 4]).unwrap();
    bad.submit_codes(&[POISON_CODE, 4]).unwrap();
    collect_pcm(&bad, 0, 1).await;
    assert!(matches!(
        next(&bad).await,
        StreamEvent::Failed(StreamError::DecodeFailed(_))
    ));
    assert_eq!(engine.metrics().errors.get("decode_failed"), 1);
    let mut next_owner = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    next_owner.submit_codes(&[3, 4]).unwrap();
    assert_eq!(
        collect_pcm(&next_owner, 0, 1).await,
        reference(&[vec![3, 4]])
    );
}

#[tokio::test]
async fn a_failed_last_frame_ends_the_stream_as_failed_not_finished() {
    let mut o = opts(1, 1);
    o.poison = Poison::Backend;
    let gate = Gate::default();
    o.gate = Some(gate.clone());
    let (engine, _) = start(o, EngineConfig::default());
    let mut bad = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    bad.submit_codes(&[3, 4]).unwrap();
    gate.wait_for_step();
    // The poisoned last frame and the end are queued together, behind the first step.
    bad.submit_codes(&[POISON_CODE, 4]).unwrap();
    bad.finish().unwrap();
    gate.open();
    collect_pcm(&bad, 0, 1).await;
    let ev = next(&bad).await;
    assert!(
        matches!(ev, StreamEvent::Failed(StreamError::DecodeFailed(_))),
        "got {ev:?}"
    );
}

#[tokio::test]
async fn finish_delivers_everything_then_frees_the_slot() {
    let (engine, _) = start(opts(1, 1), EngineConfig::default());
    let mut stream = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    stream.submit_codes(&[1, 2, 3]).unwrap();
    stream.finish().unwrap();
    assert_eq!(stream.submit_codes(&[4]), Err(StreamError::Finished));
    collect_pcm(&stream, 0, 3).await;
    assert_eq!(next(&stream).await, StreamEvent::Finished { frames: 3 });
    assert_eq!(engine.status().free_slots, 1);
}

#[tokio::test]
async fn draining_refuses_new_streams_and_finishes_open_ones() {
    let (engine, _) = start(opts(2, 2), EngineConfig::default());
    let mut stream = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    stream.submit_codes(&[9, 8]).unwrap();
    engine.drain();
    assert_eq!(
        engine.open(StreamInput::Codes { n_q: 1 }).err(),
        Some(StreamError::Draining)
    );
    stream.finish().unwrap();
    assert_eq!(
        collect_pcm(&stream, 0, 2).await,
        reference(&[vec![9], vec![8]])
    );
    assert_eq!(next(&stream).await, StreamEvent::Finished { frames: 2 });
}

#[tokio::test]
async fn latent_streams_and_bad_inputs_are_checked_at_the_edge() {
    let (engine, _) = start(opts(2, 2), EngineConfig::default());
    assert!(matches!(
        engine.open(StreamInput::Codes { n_q: 33 }),
        Err(StreamError::InvalidFrame(_))
    ));
    let mut codes_stream = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    assert!(matches!(
        codes_stream.submit_codes(&[1, 2, 3]),
        Err(StreamError::InvalidFrame(_))
    ));
    assert!(matches!(
        codes_stream.submit_codes(&[1, 2048]),
        Err(StreamError::InvalidFrame(_))
    ));
    let dim = engine.info().latent_dim;
    let mut latent = engine.open(StreamInput::Latents).unwrap();
    assert!(matches!(
        latent.submit_latents(&vec![0.5; dim + 1]),
        Err(StreamError::InvalidFrame(_))
    ));
    let frame: Vec<f32> = (0..dim).map(|i| i as f32 * 0.25).collect();
    latent.submit_latents(&frame).unwrap();
    let expected = FakeDecoder::reference([FrameInput::Latent(&frame)]);
    assert_eq!(collect_pcm(&latent, 0, 1).await, expected);
}

#[tokio::test]
async fn shutdown_tells_every_open_stream() {
    let (mut engine, _) = start(opts(2, 2), EngineConfig::default());
    let stream = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    engine.shutdown();
    assert_eq!(
        next(&stream).await,
        StreamEvent::Failed(StreamError::Stopped)
    );
    assert_eq!(
        engine.open(StreamInput::Codes { n_q: 1 }).err(),
        Some(StreamError::Stopped)
    );
}

#[test]
fn a_failing_factory_fails_start() {
    let r = Engine::start(
        Box::new(|| Err(chorus_core::Error::config("test", "no device"))),
        EngineConfig::default(),
    );
    assert!(r.is_err());
}

#[tokio::test]
async fn frames_sent_ahead_of_real_time_fall_due_at_real_time_pace() {
    // Regression: a whole file sent at once used to count every frame queued behind its own
    // stream's earlier frames as a missed deadline. 30 steps of 5 ms take 150 ms, far past one
    // frame period for the last frame, yet each frame is ready long before its paced due time.
    let mut o = opts(1, 1);
    o.step_delay = Duration::from_millis(5);
    let (engine, log) = start(o, EngineConfig::default());
    let mut stream = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    let frames: Vec<u32> = (0..30).collect();
    stream.submit_codes(&frames).unwrap();
    collect_pcm(&stream, 0, 30).await;
    assert_eq!(log.lock().unwrap().len(), 30, "one step per frame");
    let m = engine.metrics();
    assert_eq!(m.frames_decoded.load(std::sync::atomic::Ordering::Relaxed), 30);
    assert_eq!(m.deadline_misses.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_frame_ready_later_than_one_period_is_a_missed_deadline() {
    let mut o = opts(1, 1);
    o.step_delay = Duration::from_millis(2 * chorus_core::FRAME_MS);
    let (engine, _) = start(o, EngineConfig::default());
    let mut stream = engine.open(StreamInput::Codes { n_q: 1 }).unwrap();
    stream.submit_codes(&[7]).unwrap();
    collect_pcm(&stream, 0, 1).await;
    let misses = &engine.metrics().deadline_misses;
    assert_eq!(misses.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_burst_of_new_streams_runs_a_bounded_number_of_resets_per_step() {
    // Regression: every reset picked for a step ran before it, so a burst of new streams (a
    // ramp-up, clients reconnecting) held the next frame of every open stream for all of them.
    const CAP: usize = 4;
    const NEW: usize = 20;
    let mut o = opts(NEW + 1, 8);
    let gate = Gate::default();
    o.gate = Some(gate.clone());
    let fake = FakeDecoder::new(o);
    let (log, reset_log) = (fake.log.clone(), fake.reset_log.clone());
    let config = EngineConfig {
        max_resets_per_step: CAP,
        ..EngineConfig::default()
    };
    let engine = Engine::start(Box::new(move || Ok(Box::new(fake) as _)), config).unwrap();
    let mut open_stream = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
    open_stream.submit_codes(&codes(0, 0, 2)).unwrap();
    // The first step holds at the gate while the burst arrives behind the open stream's frame.
    gate.wait_for_step();
    open_stream.submit_codes(&codes(0, 1, 2)).unwrap();
    let mut burst = Vec::new();
    for s in 1..=NEW as u64 {
        let mut stream = engine.open(StreamInput::Codes { n_q: 2 }).unwrap();
        stream.submit_codes(&codes(s, 0, 2)).unwrap();
        burst.push((s, stream));
    }
    gate.open();
    let want = reference(&[codes(0, 0, 2), codes(0, 1, 2)]);
    assert_eq!(collect_pcm(&open_stream, 0, 2).await, want);
    for (s, stream) in &burst {
        let pcm = collect_pcm(stream, 0, 1).await;
        assert_eq!(pcm, reference(&[codes(*s, 0, 2)]), "stream {s}");
    }
    let resets = reset_log.lock().unwrap().clone();
    assert!(resets.iter().all(|&n| n <= CAP), "resets per step: {resets:?}");
    assert_eq!(resets.iter().sum::<usize>(), NEW + 1);
    let steps = log.lock().unwrap().clone();
    let first_slot = steps[0][0];
    assert!(
        steps[1].contains(&first_slot),
        "the open stream's next frame went with the next step: {steps:?}"
    );
}

#[test]
fn zero_bounds_are_refused_at_start() {
    for config in [
        EngineConfig {
            max_pending_frames: 0,
            ..EngineConfig::default()
        },
        EngineConfig {
            max_undelivered_frames: 0,
            ..EngineConfig::default()
        },
        EngineConfig {
            max_resets_per_step: 0,
            ..EngineConfig::default()
        },
    ] {
        let fake = FakeDecoder::new(opts(2, 2));
        let err = Engine::start(Box::new(move || Ok(Box::new(fake) as _)), config.clone())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("must be positive"), "{err}");
    }
}
