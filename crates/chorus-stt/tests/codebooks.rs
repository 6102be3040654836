//! Unmute's production settings on the CPU backend (`KYUTAI_STT.md` §4.4): the first N audio
//! codebooks only (moshi's `audio_codebooks`, 20 in production) and a sampled text token
//! (temperature 0.25, Gumbel over the whole vocabulary, a seed per stream).
//!
//! moshi-server builds its LM with N audio embeddings and its Mimi with N codebooks, so the
//! codebooks past N add nothing to the input: the reference is the same model with the tables of
//! codebooks N..32 zeroed, fed all 32 codes.

mod common;

use chorus_core::{FRAME_SAMPLES, NO_CODE};
use chorus_cpu::CpuBackend;
use chorus_lm::Sampling;
use chorus_mimi::random::{random_model as random_mimi, small_config};
use chorus_stt::frame::DrawSettings;
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{
    random_model, StreamEvent, StreamRequest, SttConfig, SttModel, SttOptions, SttStage,
};
use common::oracle::{fixture, ints};

const ALL: usize = 32;
const UNMUTE_CODEBOOKS: usize = 20;
const UNMUTE_TEMPERATURE: f32 = 0.25;

#[derive(Debug, PartialEq)]
struct Run {
    tokens: Vec<u32>,
    /// Logits as bits: compared exactly.
    logits: Vec<Vec<u32>>,
    codes: Vec<Vec<i32>>,
}

fn cpu() -> CpuBackend {
    CpuBackend::new(Some(2)).unwrap()
}

fn model() -> SttModel {
    random_model(SttConfig::random_small(), RANDOM_STT_SEED).unwrap()
}

fn opts(books: Option<usize>, draws: Option<DrawSettings>) -> SttOptions {
    let mut o = SttOptions::for_streams(1).unwrap();
    o.max_frames = 40;
    o.keep_logits = true;
    o.audio_codebooks = books;
    if let Some(d) = draws {
        o.draws = d;
    }
    o
}

fn record(r: &mut Run) -> impl FnMut(StreamEvent<'_>) + '_ {
    |e| {
        if let StreamEvent::Token {
            token,
            logits,
            codes,
            ..
        } = e
        {
            r.tokens.push(token);
            r.logits
                .push(logits.unwrap().iter().map(|x| x.to_bits()).collect());
            if let Some(c) = codes {
                r.codes.push(c.to_vec());
            }
        }
    }
}

fn drain(st: &mut SttStage<CpuBackend>) -> Run {
    let mut r = Run {
        tokens: Vec::new(),
        logits: Vec::new(),
        codes: Vec::new(),
    };
    st.drain(&mut record(&mut r)).unwrap();
    r
}

/// The fixture's 19 frames of 32 codes, each cut to its first `books`, through a codes stage.
fn codes_run(m: &SttModel, o: SttOptions, books: usize, sampling: Sampling) -> Run {
    let frames = ints(&fixture(), "frames");
    let mut st = SttStage::new(cpu(), m, o).unwrap();
    let id = st
        .add(StreamRequest {
            sampling,
            forced: None,
        })
        .unwrap();
    for f in frames.chunks_exact(ALL) {
        st.push_frame(id, &f[..books]).unwrap();
    }
    st.end(id).unwrap();
    drain(&mut st)
}

#[test]
fn twenty_codebooks_equal_the_model_with_the_last_twelve_tables_zeroed() {
    let m = model();
    let books = Some(UNMUTE_CODEBOOKS);
    let twenty = codes_run(&m, opts(books, None), UNMUTE_CODEBOOKS, Sampling::Greedy);
    let mut zeroed = model();
    let row = m.config.codebook_vocab * m.config.hidden_size;
    zeroed.weights.audio_emb.data[UNMUTE_CODEBOOKS * row..].fill(0.0);
    let reference = codes_run(&zeroed, opts(None, None), ALL, Sampling::Greedy);
    assert_eq!(twenty, reference);
    assert_eq!(twenty.tokens.len(), 20);
    let all = codes_run(&m, opts(None, None), ALL, Sampling::Greedy);
    assert_ne!(
        twenty.logits, all.logits,
        "the skipped codebooks changed nothing"
    );
    // Asking for all 32 is today's stage, bit for bit.
    let explicit = codes_run(&m, opts(Some(ALL), None), ALL, Sampling::Greedy);
    assert_eq!(explicit, all);
}

#[test]
fn twenty_codebooks_from_pcm_stop_the_rvq_and_equal_the_codes_path() {
    let m = model();
    let mimi = random_mimi(&small_config(), 0x51).unwrap();
    let pcm: Vec<f32> = (0..8 * FRAME_SAMPLES)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            0.3 * (std::f32::consts::TAU * (200.0 + 90.0 * t) * t).sin()
        })
        .collect();
    let run_pcm = |books: Option<usize>| {
        let mut st = SttStage::with_encoder(cpu(), &m, &mimi, opts(books, None)).unwrap();
        let id = st.add(StreamRequest::default()).unwrap();
        st.push_pcm(id, &pcm).unwrap();
        st.end(id).unwrap();
        drain(&mut st)
    };
    let all = run_pcm(None);
    let twenty = run_pcm(Some(UNMUTE_CODEBOOKS));
    assert_eq!(twenty.codes.len(), 8);
    for (a, t) in all.codes.iter().zip(&twenty.codes) {
        assert_eq!(a[..UNMUTE_CODEBOOKS], t[..UNMUTE_CODEBOOKS]);
        assert!(t[UNMUTE_CODEBOOKS..].iter().all(|&c| c == NO_CODE), "{t:?}");
    }
    // The same codes pushed as codes: the same tokens and logits.
    let mut st = SttStage::new(cpu(), &m, opts(Some(UNMUTE_CODEBOOKS), None)).unwrap();
    let id = st.add(StreamRequest::default()).unwrap();
    for c in &twenty.codes {
        let c: Vec<u32> = c[..UNMUTE_CODEBOOKS].iter().map(|&v| v as u32).collect();
        st.push_frame(id, &c).unwrap();
    }
    st.end(id).unwrap();
    let codes = drain(&mut st);
    assert_eq!((codes.tokens, codes.logits), (twenty.tokens, twenty.logits));
}

#[test]
fn sampling_at_unmutes_temperature_is_seeded_and_differs_from_greedy() {
    let m = model();
    let vocab = m.config.text_vocab;
    let draws = Some(DrawSettings::gumbel(UNMUTE_TEMPERATURE, vocab));
    let books = Some(UNMUTE_CODEBOOKS);
    let run = |s| codes_run(&m, opts(books, draws), UNMUTE_CODEBOOKS, s);
    let greedy = run(Sampling::Greedy);
    let a = run(Sampling::Seeded(7));
    assert_eq!(a, run(Sampling::Seeded(7)), "a seed gives one draw");
    assert_eq!(
        a.logits[0], greedy.logits[0],
        "position 0 has no sampled input yet"
    );
    assert_ne!(a.tokens, greedy.tokens);
    assert_ne!(a.tokens, run(Sampling::Seeded(8)).tokens);
    // The temperature is the stage's: greedy streams ignore it.
    let plain = codes_run(&m, opts(books, None), UNMUTE_CODEBOOKS, Sampling::Greedy);
    assert_eq!(greedy, plain);
}

#[test]
fn codebook_counts_outside_the_model_are_refused_by_name() {
    let m = model();
    for bad in [0, ALL + 1] {
        let e = SttStage::new(cpu(), &m, opts(Some(bad), None))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!("audio_codebooks {bad} must be 1..=32")),
            "{e}"
        );
    }
    let mut st = SttStage::new(cpu(), &m, opts(Some(UNMUTE_CODEBOOKS), None)).unwrap();
    assert_eq!(st.audio_codebooks(), UNMUTE_CODEBOOKS);
    let id = st.add(StreamRequest::default()).unwrap();
    let e = st.push_frame(id, &[0; ALL]).unwrap_err().to_string();
    assert!(e.contains("a frame has 20 codes, got 32"), "{e}");
}
