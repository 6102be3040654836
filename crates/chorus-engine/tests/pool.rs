//! Several engines behind one pool, each on a fake device: placement by free slots, routing of a
//! stream's messages to its engine, and a failed device that ends only its own streams.

use std::time::Duration;

use chorus_core::{FrameInput, FRAME_SAMPLES};
use chorus_engine::fake::{DeviceFault, FakeDecoder, FakeOptions};
use chorus_engine::{
    Engine, EngineConfig, EnginePool, Stream, StreamError, StreamEvent, StreamInput,
};

const WAIT: Duration = Duration::from_secs(10);
const N_Q: usize = 4;

fn engine(device: usize, max_slots: usize, fault: Option<DeviceFault>, pipelined: bool) -> Engine {
    let opts = FakeOptions {
        max_slots,
        largest_batch: max_slots,
        fault,
        pipelined,
        ..FakeOptions::default()
    };
    Engine::start_on(
        device,
        Box::new(move || Ok(Box::new(FakeDecoder::new(opts)) as _)),
        EngineConfig::default(),
    )
    .unwrap()
}

fn open(pool: &EnginePool) -> Stream {
    pool.open(StreamInput::Codes { n_q: N_Q }).unwrap()
}

/// Seeded codes for stream `s`, frame `t`.
fn codes(s: u64, t: u64) -> Vec<u32> {
    (0..N_Q as u64)
        .map(|q| ((s * 7919 + t * 104_729 + q * 31) % 2000) as u32)
        .collect()
}

async fn next(stream: &Stream) -> StreamEvent {
    tokio::time::timeout(WAIT, stream.recv())
        .await
        .expect("event in time")
}

/// Sends frame `t` of stream `s` and checks its PCM against the offline decode of frames 0..=t.
async fn frame_matches(stream: &mut Stream, s: u64, t: u64) {
    stream.submit_codes(&codes(s, t)).unwrap();
    let frames: Vec<Vec<u32>> = (0..=t).map(|i| codes(s, i)).collect();
    let want = FakeDecoder::reference(frames.iter().map(|c| FrameInput::Codes(c)));
    match next(stream).await {
        StreamEvent::Pcm { index, samples } => {
            assert_eq!(index, t);
            assert_eq!(
                &samples[..],
                &want[t as usize * FRAME_SAMPLES..],
                "stream {s} frame {t}"
            );
        }
        other => panic!("stream {s}: expected PCM {t}, got {other:?}"),
    }
}

#[tokio::test]
async fn each_stream_goes_to_the_engine_with_the_most_free_slots() {
    let pool = EnginePool::new(vec![engine(0, 2, None, false), engine(1, 5, None, false)]).unwrap();
    assert_eq!(pool.info().max_slots, 7);
    // Free (2, 5): device 1 until both have 2 free, then ties go to the lower index.
    let streams: Vec<Stream> = (0..7).map(|_| open(&pool)).collect();
    let devices: Vec<usize> = streams.iter().map(Stream::device).collect();
    assert_eq!(devices, [1, 1, 1, 0, 1, 0, 1]);
    assert_eq!(
        pool.open(StreamInput::Codes { n_q: N_Q }).err(),
        Some(StreamError::Busy { max_slots: 7 })
    );
    // A slot freed on device 0 is where the next stream goes.
    let freed = streams.iter().position(|s| s.device() == 0).unwrap();
    let mut streams = streams;
    streams.remove(freed);
    streams.push(open(&pool));
    assert_eq!(streams[6].device(), 0);
    let st = pool.status();
    assert_eq!(
        (st.live_streams(), st.free_slots(), st.max_streams()),
        (7, 0, 7)
    );
}

#[tokio::test]
async fn a_stream_s_frames_resets_and_end_go_to_its_own_engine() {
    let pool = EnginePool::new(vec![engine(0, 2, None, false), engine(1, 2, None, false)]).unwrap();
    let mut a = open(&pool);
    let mut b = open(&pool);
    assert_eq!((a.device(), b.device()), (0, 1));
    for t in 0..3 {
        frame_matches(&mut a, 10, t).await;
        frame_matches(&mut b, 11, t).await;
    }
    b.reset().unwrap();
    assert_eq!(next(&b).await, StreamEvent::ResetDone { next_frame: 3 });
    b.finish().unwrap();
    assert_eq!(next(&b).await, StreamEvent::Finished { frames: 3 });
    let frames = |e: usize| {
        let m = pool.engines()[e].metrics();
        m.frames_decoded.load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!((frames(0), frames(1)), (3, 3));
}

#[test]
fn engines_of_one_pool_must_differ_in_device() {
    let e = EnginePool::new(vec![engine(1, 1, None, false), engine(1, 1, None, false)])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("device 1 is given twice"), "{e}");
    assert!(EnginePool::new(Vec::new()).is_err());
}

/// Two devices with two streams each; device 1 breaks while its streams are open.
async fn a_failed_device_ends_only_its_own_streams(pipelined: bool) {
    let fault = DeviceFault::default();
    let pool = EnginePool::new(vec![
        engine(0, 4, None, pipelined),
        engine(1, 4, Some(fault.clone()), pipelined),
    ])
    .unwrap();
    let mut streams: Vec<Stream> = (0..4).map(|_| open(&pool)).collect();
    let on = |d: usize| -> Vec<usize> { (0..4).filter(|&i| streams[i].device() == d).collect() };
    let (healthy, doomed) = (on(0), on(1));
    assert_eq!((healthy.len(), doomed.len()), (2, 2));
    for (i, s) in streams.iter_mut().enumerate() {
        frame_matches(s, i as u64, 0).await;
    }
    fault.trip();
    // One stream of the broken device sends a frame; the other sends nothing.
    streams[doomed[0]]
        .submit_codes(&codes(doomed[0] as u64, 1))
        .unwrap();
    for &i in &doomed {
        match next(&streams[i]).await {
            StreamEvent::Failed(StreamError::DecodeFailed(msg)) => {
                assert!(msg.contains("device 1 failed"), "stream {i}: {msg}");
            }
            other => panic!("stream {i} on the failed device got {other:?}"),
        }
    }
    let st = pool.status();
    assert!(st.ready(), "one device is still healthy");
    assert!(st.devices[0].healthy() && !st.devices[1].healthy());
    assert!(st.devices[1]
        .failure
        .as_deref()
        .unwrap()
        .contains("device lost"));
    assert_eq!(st.devices[1].free_slots, 0);
    let failed = pool.engines()[1].metrics().errors.get("decode_failed");
    assert_eq!(failed, 2, "each of its streams counted once");
    // Device 0's streams lose nothing, and new streams land there though device 1 has more room.
    for t in 1..4 {
        for &i in &healthy {
            frame_matches(&mut streams[i], i as u64, t).await;
        }
    }
    let mut fresh = open(&pool);
    assert_eq!(fresh.device(), 0);
    frame_matches(&mut fresh, 99, 0).await;
    let _other = open(&pool);
    assert_eq!(
        pool.open(StreamInput::Codes { n_q: N_Q }).err(),
        Some(StreamError::Busy { max_slots: 4 }),
        "only device 0's slots are offered"
    );
}

#[tokio::test]
async fn a_failed_device_ends_only_its_own_streams_stepping_one_at_a_time() {
    a_failed_device_ends_only_its_own_streams(false).await;
}

#[tokio::test]
async fn a_failed_device_ends_only_its_own_streams_pipelined() {
    a_failed_device_ends_only_its_own_streams(true).await;
}

#[tokio::test]
async fn a_step_failure_on_a_working_device_keeps_the_device() {
    // A poisoned frame fails its step but a reset still works: the device stays in service.
    let opts = FakeOptions {
        max_slots: 2,
        largest_batch: 2,
        poison: chorus_engine::fake::Poison::Backend,
        ..FakeOptions::default()
    };
    let e = Engine::start_on(
        3,
        Box::new(move || Ok(Box::new(FakeDecoder::new(opts)) as _)),
        EngineConfig::default(),
    )
    .unwrap();
    let pool = EnginePool::from(e);
    let mut bad = open(&pool);
    assert_eq!(bad.device(), 3);
    bad.submit_codes(&[chorus_engine::fake::POISON_CODE, 1, 2, 3])
        .unwrap();
    assert!(matches!(
        next(&bad).await,
        StreamEvent::Failed(StreamError::DecodeFailed(_))
    ));
    assert!(pool.status().devices[0].healthy());
    let mut good = open(&pool);
    frame_matches(&mut good, 5, 0).await;
}

#[tokio::test]
async fn draining_the_pool_drains_every_device() {
    let pool = EnginePool::new(vec![engine(0, 1, None, false), engine(1, 1, None, false)]).unwrap();
    let mut s = open(&pool);
    pool.drain();
    assert!(!pool.status().ready());
    assert_eq!(
        pool.open(StreamInput::Codes { n_q: N_Q }).err(),
        Some(StreamError::Draining)
    );
    frame_matches(&mut s, 1, 0).await;
}
