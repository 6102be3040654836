//! int8 ConvRot weights (`tools/fixtures/music_int8.py`, fixture `small_int8`): the Rust
//! quantizer equals the Python writer bit for bit, and the `random-small-int8` stage's
//! teacher-forced traces match the dequantized PyTorch reference within rel L2 1e-4 (CPU, f32;
//! the int8 model differs from the float one by ~1.5e-2, so the check discriminates).
//! Checkpoint loading of the int8 layout is in `tests/int8_files.rs`.

mod common;

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_core::LmOps;
use chorus_lm::HostLinear;
use chorus_music::linear_source::LinearSource;
use chorus_music::load::random_int8_model;
use chorus_music::random::{RandomSource, RANDOM_MUSIC_SEED};
use chorus_music::{DepthConfig, Qwen3Config, SemanticStage, SongEvent, SongRequest};
use common::oracle::CONTEXT;
use common::*;

/// f32 tolerance of every traced quantity.
const TOL: f64 = 1e-4;
/// Loop frames whose logits the fixture holds.
const LOGIT_FRAMES: usize = 4;
const V: usize = 16_385;

#[test]
fn the_rust_quantizer_equals_the_python_writer_bit_for_bit() {
    let fx = fixture("small_int8");
    let (lm, depth) = (Qwen3Config::small(), DepthConfig::small());
    let src = RandomSource::new(&lm, &depth, RANDOM_MUSIC_SEED, 1.0).quantized();
    let mut checked = 0;
    for name in fx.names() {
        let Some(tensor) = name.strip_prefix("q8.").filter(|n| !n.ends_with(".scale")) else {
            continue;
        };
        let (shape, want_q) = fx.load_i8(&name).unwrap();
        let want_s = fx.load(&format!("{name}.scale")).unwrap().data;
        let HostLinear::Q8(got) = src.linear("test", tensor, &shape).unwrap() else {
            panic!("{tensor} is not quantized by random-small-int8");
        };
        assert_eq!((got.rows, got.cols), (shape[0], shape[1]), "{tensor}");
        let bad_q = got.data.iter().zip(&want_q).filter(|(a, b)| a != b).count();
        assert_eq!(bad_q, 0, "{tensor}: {bad_q} int8 values differ");
        assert!(
            got.scales
                .iter()
                .zip(&want_s)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{tensor}: scales differ"
        );
        eprintln!(
            "{tensor} [{}, {}] group {}: int8 and scales bitwise equal",
            got.rows, got.cols, got.group
        );
        checked += 1;
    }
    assert!(
        checked >= 3,
        "the fixture holds {checked} quantized tensors"
    );
}

/// Teacher-forces the fixture's codes through `st` and returns the relative L2 error of the LM
/// hidden (every loop frame), the logits (the first frames) and the frame hiddens.
fn teacher_forcing_errors<B: LmOps>(
    st: &mut SemanticStage<B>,
    fx: &SafetensorsFile,
) -> Vec<(&'static str, f64)> {
    let h = st.lm_config().hidden_size;
    let forced = code_frames(fx, "codes");
    st.add_song(SongRequest {
        prompt: prompt(fx),
        max_frames: forced.len() - 1,
        sampling: chorus_music::Sampling::Noise(7),
        allow_end: false,
        forced: Some(forced.clone()),
    })
    .unwrap();
    let (mut hid, mut logits, mut frames) = (Vec::new(), Vec::new(), Vec::new());
    let ended = std::cell::Cell::new(false);
    let mut on_event = |ev: SongEvent<'_>| match ev {
        SongEvent::Frame { hidden, .. } => frames.extend_from_slice(hidden),
        SongEvent::Ended { .. } => ended.set(true),
    };
    for f in 0..forced.len() {
        st.step(&mut on_event).unwrap();
        let t = st.trace().unwrap();
        hid.extend_from_slice(&t.h[..2 * h]);
        if f < LOGIT_FRAMES {
            logits.extend_from_slice(&t.logits[..2 * V]);
        }
    }
    while !ended.get() {
        st.step(&mut on_event).unwrap();
    }
    [
        ("lm_hidden", rel_l2(&hid, &floats(fx, "lm_hidden"))),
        ("logits", rel_l2(&logits, &floats(fx, "logits"))),
        (
            "frame_hiddens",
            rel_l2(&frames, &floats(fx, "frame_hiddens")),
        ),
    ]
    .into_iter()
    .inspect(|(name, e)| eprintln!("int8 teacher forcing {name}: rel L2 {e:.3e}"))
    .collect()
}

#[test]
fn int8_teacher_forcing_matches_the_dequantized_reference() {
    let model = random_int8_model(Qwen3Config::small(), DepthConfig::small(), 1.0).unwrap();
    assert!(model.lm.layers[0].qkv.q8().is_some() && model.depth.projection.q8().is_some());
    assert!(
        model.depth.audio_heads[0].dense().is_some(),
        "audio heads stay float"
    );
    let mut st = stage(&model, 1, CONTEXT);
    for (name, e) in teacher_forcing_errors(&mut st, &fixture("small_int8")) {
        assert!(e <= TOL, "{name}: rel L2 {e:.3e} > {TOL:e}");
    }
}

#[test]
fn cuda_int8_teacher_forcing_matches_the_dequantized_reference() {
    use chorus_core::Precision;
    use chorus_cuda::{CudaBackend, CudaOptions};
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let model = random_int8_model(Qwen3Config::small(), DepthConfig::small(), 1.0).unwrap();
    for (precision, tol) in [(Precision::F32, TOL), (Precision::Bf16, 2e-2)] {
        let be = CudaBackend::new(CudaOptions {
            precision,
            ..Default::default()
        })
        .unwrap();
        let opts = chorus_music::StageOptions::for_songs(1, CONTEXT).unwrap();
        let mut st = SemanticStage::new(be, &model, opts).unwrap();
        st.warmup().unwrap();
        for (name, e) in teacher_forcing_errors(&mut st, &fixture("small_int8")) {
            eprintln!(
                "cuda {} int8 {name}: rel L2 {e:.3e} (bound {tol:e})",
                precision.name()
            );
            assert!(
                e <= tol,
                "cuda {}: {name} rel L2 {e:.3e} > {tol:e}",
                precision.name()
            );
        }
    }
}
