//! The step against transformers' KyutaiSpeechToText (tools/fixtures/stt_oracle.py) on the
//! seeded random-small weights, on the CPU backend in f32: teacher-forced text logits and VAD
//! probabilities within rel L2 1e-4 at every position (the window of 6 wraps three times in 20
//! positions), and free-running greedy tokens identical at every position.

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_cpu::CpuBackend;
use chorus_lm::Sampling;
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{random_model, StreamEvent, StreamRequest, SttConfig, SttOptions, SttStage};

/// f32 bound of every compared tensor.
const REL_L2: f64 = 1e-4;

fn fixture() -> SafetensorsFile {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/stt_small.safetensors");
    SafetensorsFile::open(&p).unwrap()
}

fn ints(f: &SafetensorsFile, name: &str) -> Vec<u32> {
    f.load(name)
        .unwrap()
        .data
        .iter()
        .map(|&x| x as u32)
        .collect()
}

fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    assert!(got.iter().all(|g| g.is_finite()), "non-finite output");
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (f64::from(g) - f64::from(w)).powi(2);
        den += f64::from(w).powi(2);
    }
    assert!(den > 0.0, "an all-zero reference proves nothing");
    (num / den).sqrt()
}

/// Tokens, logits and VAD of every position of one stream fed the fixture's frames.
struct Run {
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
    vad: Vec<Vec<f32>>,
}

fn run(forced: Option<Vec<u32>>, company: usize) -> Run {
    run_with(SttConfig::random_small(), forced, company)
}

fn run_with(c: SttConfig, forced: Option<Vec<u32>>, company: usize) -> Run {
    let f = fixture();
    let m = random_model(c.clone(), RANDOM_STT_SEED).unwrap();
    let mut opts = SttOptions::for_streams(1 + company).unwrap();
    opts.keep_logits = true;
    let mut st = SttStage::new(CpuBackend::new(Some(2)).unwrap(), &m, opts).unwrap();
    st.warmup().unwrap();
    let frames = ints(&f, "frames");
    // Other streams with their own frames, started at other times: nothing may leak.
    let mut others = Vec::new();
    for i in 0..company {
        let id = st.add(StreamRequest::default()).unwrap();
        for k in 0..3 + i {
            let fr: Vec<u32> = (0..32)
                .map(|j| ((k * 131 + j * 7 + i) % 2048) as u32)
                .collect();
            st.push_frame(id, &fr).unwrap();
        }
        others.push(id);
    }
    let id = st
        .add(StreamRequest {
            sampling: Sampling::Greedy,
            forced,
        })
        .unwrap();
    for fr in frames.chunks_exact(32) {
        st.push_frame(id, fr).unwrap();
    }
    st.end(id).unwrap();
    let mut out = Run {
        tokens: Vec::new(),
        logits: Vec::new(),
        vad: Vec::new(),
    };
    let mut ended = false;
    st.drain(&mut |e| match e {
        StreamEvent::Token {
            stream,
            position,
            token,
            vad,
            logits,
        } if stream == id => {
            assert_eq!(position, out.tokens.len());
            out.tokens.push(token);
            out.logits.push(logits.unwrap().to_vec());
            out.vad.push(vad.unwrap().to_vec());
        }
        StreamEvent::Ended { stream, positions } if stream == id => {
            assert_eq!(positions, 20);
            ended = true;
        }
        _ => {}
    })
    .unwrap();
    assert!(ended, "the ended stream left the stage");
    out
}

#[test]
fn teacher_forced_logits_and_vad_match_transformers() {
    let f = fixture();
    let forced = ints(&f, "forced");
    let r = run(Some(forced.clone()), 0);
    assert_eq!(r.tokens, forced, "forced tokens are kept");
    let want = f.load("forced.logits").unwrap().data;
    let want_vad = f.load("forced.vad").unwrap().data;
    let mut worst = 0f64;
    for p in 0..20 {
        let e = rel_l2(&r.logits[p], &want[p * 40..(p + 1) * 40]);
        let v = rel_l2(&r.vad[p], &want_vad[p * 4..(p + 1) * 4]);
        eprintln!("position {p}: logits rel L2 {e:.2e}, vad rel L2 {v:.2e}");
        assert!(e <= REL_L2 && v <= REL_L2, "position {p}: {e:e} / {v:e}");
        worst = worst.max(e);
    }
    eprintln!("worst teacher-forced logits rel L2 {worst:.2e}");
}

#[test]
fn greedy_tokens_match_transformers_past_the_window() {
    let f = fixture();
    let want = ints(&f, "greedy.tokens");
    let r = run(None, 0);
    assert_eq!(r.tokens, want);
    let logits = f.load("greedy.logits").unwrap().data;
    let all: Vec<f32> = r.logits.concat();
    let e = rel_l2(&all, &logits);
    eprintln!("greedy logits rel L2 {e:.2e}");
    assert!(e <= REL_L2);
}

#[test]
fn a_stream_beside_others_equals_it_alone_bit_for_bit() {
    let alone = run(None, 0);
    let together = run(None, 3);
    assert_eq!(alone.tokens, together.tokens);
    for (a, b) in alone.logits.iter().zip(&together.logits) {
        let (a, b): (Vec<u32>, Vec<u32>) = (
            a.iter().map(|x| x.to_bits()).collect(),
            b.iter().map(|x| x.to_bits()).collect(),
        );
        assert_eq!(a, b);
    }
}

#[test]
fn the_window_is_what_makes_the_match() {
    // The same weights with a window longer than the run: equal before the ring wraps (position
    // 5 sees positions 0..=5 either way), far off after it.
    let f = fixture();
    let forced = ints(&f, "forced");
    let want = f.load("forced.logits").unwrap().data;
    let c = SttConfig {
        sliding_window: 32,
        ..SttConfig::random_small()
    };
    let r = run_with(c, Some(forced), 0);
    let e5 = rel_l2(&r.logits[5], &want[5 * 40..6 * 40]);
    let e6 = rel_l2(&r.logits[6], &want[6 * 40..7 * 40]);
    eprintln!("unwindowed: position 5 rel L2 {e5:.2e}, position 6 {e6:.2e}");
    assert!(e5 <= REL_L2, "{e5:e}");
    assert!(e6 > 1e-2, "{e6:e}");
}
