//! PCM in (the Mimi encoder inside the step) on the CPU backend: samples pushed in any chunk
//! sizes give the same codes and text tokens as Chorus's slot encoder run first and its codes
//! stepped; streams are independent of their company and of the slot they recycle; bad input
//! is refused by name and changes nothing.

use std::collections::BTreeMap;

use chorus_core::{AudioFrame, Buckets, FrameEncoder, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::random::{random_model as random_mimi, small_config};
use chorus_mimi::{EncoderOptions, SlotEncoder};
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{
    random_model, StreamEvent, StreamId, StreamRequest, SttConfig, SttModel, SttOptions, SttStage,
};

const MIMI_SEED: u64 = 0x51;
const FRAMES: usize = 9;
/// Samples past the last whole frame: the stage completes them with silence.
const PARTIAL: usize = 700;

fn models() -> (SttModel, LoadedModel) {
    let stt = random_model(SttConfig::random_small(), RANDOM_STT_SEED).unwrap();
    (stt, random_mimi(&small_config(), MIMI_SEED).unwrap())
}

fn opts(streams: usize) -> SttOptions {
    let mut o = SttOptions::for_streams(streams).unwrap();
    o.max_frames = 30;
    o
}

fn cpu() -> CpuBackend {
    CpuBackend::new(Some(2)).unwrap()
}

/// Speech-like test audio: two drifting tones and seeded noise, different per `salt`.
fn audio(salt: usize) -> Vec<f32> {
    let mut x = 0x9e37_79b9_u32.wrapping_mul(salt as u32 + 1);
    (0..FRAMES * FRAME_SAMPLES + PARTIAL)
        .map(|i| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let t = i as f32 / 24_000.0;
            let f = 180.0 + 40.0 * salt as f32 + 60.0 * t;
            let noise = (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
            0.3 * (std::f32::consts::TAU * f * t).sin()
                + 0.1 * (std::f32::consts::TAU * 2.7 * f * t).sin()
                + 0.05 * noise
        })
        .collect()
}

/// The 32 codes of each frame of `pcm` (zero-padded to whole frames) from the slot encoder.
fn encode_apart(mimi: &LoadedModel, pcm: &[f32]) -> Vec<Vec<u32>> {
    let eo = EncoderOptions {
        chunk_frames: 1,
        max_slots: 1,
        buckets: Buckets::new(&[1]).unwrap(),
    };
    let mut enc = SlotEncoder::from_weights(cpu(), &mimi.config, &mimi.weights, eo).unwrap();
    let mut padded = pcm.to_vec();
    padded.resize(pcm.len().div_ceil(FRAME_SAMPLES) * FRAME_SAMPLES, 0.0);
    let nq = enc.max_codebooks();
    padded
        .chunks_exact(FRAME_SAMPLES)
        .map(|f| {
            let mut codes = vec![0u32; nq];
            let frame = AudioFrame {
                slot: 0,
                pcm: f,
                n_q: 32,
            };
            enc.step(&[frame], &mut codes, None).unwrap();
            codes[..32].to_vec()
        })
        .collect()
}

/// Per stream: tokens by position and the in-frame codes by position.
#[derive(Default, Debug, PartialEq)]
struct Trace {
    tokens: Vec<u32>,
    codes: BTreeMap<usize, Vec<u32>>,
}

fn sink(traces: &mut BTreeMap<StreamId, Trace>) -> impl FnMut(StreamEvent<'_>) + '_ {
    |e| {
        if let StreamEvent::Token {
            stream,
            position,
            token,
            codes,
            ..
        } = e
        {
            let t = traces.entry(stream).or_default();
            assert_eq!(t.tokens.len(), position);
            t.tokens.push(token);
            if let Some(c) = codes {
                t.codes
                    .insert(position, c[..32].iter().map(|&v| v as u32).collect());
            }
        }
    }
}

/// Runs `pcm` alone through a PCM stage in chunks of `chunk` samples.
fn pcm_alone(stt: &SttModel, mimi: &LoadedModel, pcm: &[f32], chunk: usize) -> Trace {
    let mut st = SttStage::with_encoder(cpu(), stt, mimi, opts(1)).unwrap();
    st.warmup().unwrap();
    let id = st.add(StreamRequest::default()).unwrap();
    let mut traces = BTreeMap::new();
    for c in pcm.chunks(chunk) {
        st.push_pcm(id, c).unwrap();
        st.step(&mut sink(&mut traces)).unwrap();
    }
    st.end(id).unwrap();
    st.drain(&mut sink(&mut traces)).unwrap();
    traces.remove(&id).unwrap()
}

#[test]
fn pcm_through_the_step_equals_encoding_first_then_stepping_codes() {
    let (stt, mimi) = models();
    let pcm = audio(0);
    let apart = encode_apart(&mimi, &pcm);
    assert_eq!(apart.len(), FRAMES + 1);
    let distinct: std::collections::HashSet<_> = apart.iter().collect();
    assert!(distinct.len() > 1, "every frame encoded alike: {apart:?}");

    let mut st = SttStage::new(cpu(), &stt, opts(1)).unwrap();
    st.warmup().unwrap();
    let id = st.add(StreamRequest::default()).unwrap();
    for f in &apart {
        st.push_frame(id, f).unwrap();
    }
    st.end(id).unwrap();
    let mut traces = BTreeMap::new();
    st.drain(&mut sink(&mut traces)).unwrap();
    let codes_path = traces.remove(&id).unwrap();
    assert_eq!(codes_path.tokens.len(), FRAMES + 2);
    assert!(codes_path.codes.is_empty());

    // Chunks smaller than, equal to and larger than a frame, none aligned to it.
    for chunk in [1000, FRAME_SAMPLES, 5001] {
        let t = pcm_alone(&stt, &mimi, &pcm, chunk);
        for (k, frame) in apart.iter().enumerate() {
            assert_eq!(
                t.codes.get(&(k + 1)),
                Some(frame),
                "chunk {chunk}: frame {k}"
            );
        }
        assert_eq!(t.codes.len(), apart.len(), "chunk {chunk}");
        assert_eq!(t.tokens, codes_path.tokens, "chunk {chunk}");
    }
}

#[test]
fn pcm_streams_in_company_and_on_recycled_slots_equal_each_alone() {
    let (stt, mimi) = models();
    let pcms: Vec<Vec<f32>> = (0..3).map(audio).collect();
    let alone: Vec<Trace> = pcms
        .iter()
        .map(|p| pcm_alone(&stt, &mimi, p, 1920))
        .collect();

    let mut st = SttStage::with_encoder(cpu(), &stt, &mimi, opts(2)).unwrap();
    st.warmup().unwrap();
    let mut traces = BTreeMap::new();
    // Stream 0 runs alone first, so streams 1 and 2 reuse its slot and encoder row.
    let first = st.add(StreamRequest::default()).unwrap();
    st.push_pcm(first, &pcms[0]).unwrap();
    st.end(first).unwrap();
    st.drain(&mut sink(&mut traces)).unwrap();
    let a = st.add(StreamRequest::default()).unwrap();
    let b = st.add(StreamRequest::default()).unwrap();
    let (mut pa, mut pb) = (pcms[1].as_slice(), pcms[2].as_slice());
    let (ca, cb) = (777, 3001);
    while !pa.is_empty() || !pb.is_empty() {
        let (x, rest) = pa.split_at(ca.min(pa.len()));
        st.push_pcm(a, x).unwrap();
        pa = rest;
        let (y, rest) = pb.split_at(cb.min(pb.len()));
        st.push_pcm(b, y).unwrap();
        pb = rest;
        st.step(&mut sink(&mut traces)).unwrap();
    }
    st.end(a).unwrap();
    st.end(b).unwrap();
    st.drain(&mut sink(&mut traces)).unwrap();
    assert_eq!(traces[&first], alone[0]);
    assert_eq!(traces[&a], alone[1]);
    assert_eq!(traces[&b], alone[2]);
    assert_ne!(alone[1].codes, alone[2].codes);
}

#[test]
fn bad_pcm_is_refused_by_name_and_changes_nothing() {
    let (stt, mimi) = models();
    let mut st = SttStage::with_encoder(cpu(), &stt, &mimi, opts(1)).unwrap();
    st.warmup().unwrap();
    let id = st.add(StreamRequest::default()).unwrap();
    st.push_pcm(id, &[0.1; 500]).unwrap();
    let mut bad = vec![0.0; 3000];
    bad[1234] = f32::NAN;
    let e = st.push_pcm(id, &bad).unwrap_err().to_string();
    assert!(e.contains("sample 1234 of 3000 is not finite"), "{e}");
    assert_eq!(st.buffered_samples(id), Some(500));
    let e = st.push_frame(id, &[0; 32]).unwrap_err().to_string();
    assert!(e.contains("push samples with push_pcm"), "{e}");
    let e = st.push_pcm(id + 5, &[0.0]).unwrap_err().to_string();
    assert!(e.contains(&format!("no running stream {}", id + 5)), "{e}");
    // Past max_frames (30): refused whole, nothing queued.
    let e = st
        .push_pcm(id, &vec![0.0; 30 * FRAME_SAMPLES])
        .unwrap_err()
        .to_string();
    assert!(e.contains("reached the stage's 30 frames"), "{e}");
    assert_eq!(st.buffered_samples(id), Some(500));

    let mut codes_stage = SttStage::new(cpu(), &stt, opts(1)).unwrap();
    let c = codes_stage.add(StreamRequest::default()).unwrap();
    let e = codes_stage.push_pcm(c, &[0.0; 10]).unwrap_err().to_string();
    assert!(e.contains("built without an encoder"), "{e}");

    let few = chorus_mimi::MimiConfig {
        num_quantizers: 16,
        ..small_config()
    };
    let mimi16 = random_mimi(&few, MIMI_SEED).unwrap();
    let e = SttStage::with_encoder(cpu(), &stt, &mimi16, opts(1))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("reads 32 codebooks of 2048 codes"), "{e}");
}

#[test]
fn the_stage_has_work_only_while_a_whole_frame_or_a_step_waits() {
    let (stt, mimi) = models();
    let mut st = SttStage::with_encoder(cpu(), &stt, &mimi, opts(1)).unwrap();
    assert!(st.encodes_pcm());
    assert!(!st.has_work(), "an empty stage sleeps");
    let id = st.add(StreamRequest::default()).unwrap();
    assert!(st.has_work(), "position 0 is queued at admission");
    st.drain(&mut |_| {}).unwrap();
    assert!(!st.has_work());
    let pcm = audio(0);
    st.push_pcm(id, &pcm[..FRAME_SAMPLES - 1]).unwrap();
    assert!(!st.has_work(), "a partial frame is not work");
    st.push_pcm(id, &pcm[FRAME_SAMPLES - 1..FRAME_SAMPLES])
        .unwrap();
    assert!(st.has_work());
    assert_eq!(st.step(&mut |_| {}).unwrap(), 1);
    assert!(st.has_work(), "the step in flight is still to be read");
    assert_eq!(st.step(&mut |_| {}).unwrap(), 0);
    assert!(!st.has_work());
    st.end(id).unwrap();
    assert!(st.has_work(), "an ended stream is to be retired");
    st.drain(&mut |_| {}).unwrap();
    assert!(!st.has_work() && st.active() == 0);
}
