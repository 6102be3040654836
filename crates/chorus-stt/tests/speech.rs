//! Real speech (espeak-ng, committed as `tests/fixtures/speech.wav`) against transformers'
//! Kyutai STT from PCM (tools/fixtures/stt_speech_oracle.py): the file decoded as `chorus
//! transcribe` decodes it, with the stage's flush of silence after it, through the in-frame Mimi
//! encoder (Chorus's `random` Mimi) and the random-small LM on the CPU backend in f32. The codes
//! of every frame and the greedy tokens of every position equal the oracle's, the text logits
//! are within rel L2 1e-4; the oracle's codes pushed as codes give the same tokens.

mod common;

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_core::FRAME_SAMPLES;
use chorus_cpu::CpuBackend;
use chorus_mimi::random::{random_model as random_mimi, RANDOM_MODEL_SEED};
use chorus_mimi::MimiConfig;
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{random_model, StreamEvent, StreamRequest, SttConfig, SttOptions, SttStage};
use common::oracle::{fixture_path, ints, rel_l2, REL_L2};

const CODEBOOKS: usize = 32;

struct Trace {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    codes: Vec<Vec<u32>>,
}

fn record(t: &mut Trace) -> impl FnMut(StreamEvent<'_>) + '_ {
    |e| {
        if let StreamEvent::Token {
            position,
            token,
            logits,
            codes,
            ..
        } = e
        {
            assert_eq!(t.tokens.len(), position);
            t.tokens.push(token);
            t.logits.push(logits.unwrap().to_vec());
            if let Some(c) = codes {
                t.codes
                    .push(c[..CODEBOOKS].iter().map(|&v| v as u32).collect());
            }
        }
    }
}

fn opts(frames: usize) -> SttOptions {
    let mut o = SttOptions::for_streams(1).unwrap();
    o.max_frames = frames;
    o.keep_logits = true;
    o
}

fn cpu() -> CpuBackend {
    CpuBackend::new(Some(2)).unwrap()
}

#[test]
fn espeak_speech_from_pcm_gives_the_oracles_codes_and_tokens() {
    let f = SafetensorsFile::open(&fixture_path("stt_speech.safetensors")).unwrap();
    let want_tokens = ints(&f, "tokens");
    let want_codes = ints(&f, "codes");
    let want_logits = f.load("logits").unwrap().data;
    let audio = chorus_audio::read_audio_file(fixture_path("speech.wav"), None).unwrap();
    assert_eq!(audio.samples.len() % FRAME_SAMPLES, 0);

    let stt = random_model(SttConfig::random_small(), RANDOM_STT_SEED).unwrap();
    let mimi = random_mimi(&MimiConfig::default(), RANDOM_MODEL_SEED).unwrap();
    let frames = want_tokens.len() - 1;
    let mut st = SttStage::with_encoder(cpu(), &stt, &mimi, opts(frames)).unwrap();
    // transcribe's padding: no silence prefix for random-small, then the flush.
    let flush = st.flush_frames();
    assert_eq!(audio.samples.len() / FRAME_SAMPLES + flush, frames);
    let id = st.add(StreamRequest::default()).unwrap();
    st.push_pcm(id, &audio.samples).unwrap();
    st.push_pcm(id, &vec![0.0; flush * FRAME_SAMPLES]).unwrap();
    st.end(id).unwrap();
    let mut t = Trace {
        tokens: Vec::new(),
        logits: Vec::new(),
        codes: Vec::new(),
    };
    st.drain(&mut record(&mut t)).unwrap();

    assert_eq!(t.codes.len(), frames);
    for (k, got) in t.codes.iter().enumerate() {
        assert_eq!(
            got[..],
            want_codes[k * CODEBOOKS..(k + 1) * CODEBOOKS],
            "frame {k}"
        );
    }
    assert_eq!(t.tokens, want_tokens);
    let vocab = SttConfig::random_small().text_vocab;
    let mut worst = 0f64;
    for (p, got) in t.logits.iter().enumerate() {
        let e = rel_l2(got, &want_logits[p * vocab..(p + 1) * vocab]);
        assert!(e <= REL_L2, "position {p}: logits rel L2 {e:e}");
        worst = worst.max(e);
    }
    eprintln!(
        "{} positions, worst logits rel L2 {worst:.2e}",
        t.tokens.len()
    );

    // The oracle's codes pushed as codes: the same tokens.
    let mut st = SttStage::new(cpu(), &stt, opts(frames)).unwrap();
    let id = st.add(StreamRequest::default()).unwrap();
    for frame in want_codes.chunks_exact(CODEBOOKS) {
        st.push_frame(id, frame).unwrap();
    }
    st.end(id).unwrap();
    let mut c = Trace {
        tokens: Vec::new(),
        logits: Vec::new(),
        codes: Vec::new(),
    };
    st.drain(&mut record(&mut c)).unwrap();
    assert_eq!(c.tokens, want_tokens);
}
