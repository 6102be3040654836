//! The oracle fixture and one stream's run through the stage on any backend.

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_core::LmOps;
use chorus_lm::{KvCache, Sampling};
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{random_model, StreamEvent, StreamRequest, SttConfig, SttOptions, SttStage};

/// f32 bound of every compared tensor.
pub const REL_L2: f64 = 1e-4;

/// `tests/fixtures/stt_small.safetensors`.
pub fn fixture() -> SafetensorsFile {
    SafetensorsFile::open(&fixture_path("stt_small.safetensors")).unwrap()
}

/// `tests/fixtures/NAME`. (Test binaries copied to the GPU machine run from the repository
/// root: the working directory.)
pub fn fixture_path(name: &str) -> std::path::PathBuf {
    let rel = std::path::Path::new("tests/fixtures").join(name);
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(&rel);
    if built.is_file() {
        built
    } else {
        std::path::Path::new("crates/chorus-stt").join(rel)
    }
}

pub fn ints(f: &SafetensorsFile, name: &str) -> Vec<u32> {
    f.load(name)
        .unwrap()
        .data
        .iter()
        .map(|&x| x as u32)
        .collect()
}

pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
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
pub struct Run {
    pub tokens: Vec<u32>,
    pub logits: Vec<Vec<f32>>,
    pub vad: Vec<Vec<f32>>,
}

/// One stream fed the fixture's frames on `be` (beside `company` other streams), to the end.
pub fn run_on<B: LmOps>(be: B, c: SttConfig, forced: Option<Vec<u32>>, company: usize) -> Run {
    run_on_kv(be, c, forced, company, KvCache::Native)
}

/// [`run_on`] with the rings stored as `kv_cache` says.
pub fn run_on_kv<B: LmOps>(
    be: B,
    c: SttConfig,
    forced: Option<Vec<u32>>,
    company: usize,
    kv_cache: KvCache,
) -> Run {
    let f = fixture();
    let m = random_model(c.clone(), RANDOM_STT_SEED).unwrap();
    let mut opts = SttOptions::for_streams(1 + company).unwrap();
    opts.keep_logits = true;
    opts.kv_cache = kv_cache;
    let mut st = SttStage::new(be, &m, opts).unwrap();
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
            ..
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
