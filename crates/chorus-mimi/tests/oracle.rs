//! Exactness against transformers' `MimiModel.decode` on the whole sequence (fp32), at the real
//! architecture, in both checkpoint layouts, past the 250-token window: decoding the same codes
//! frame by frame through the CPU slot decoder must match to relative L2 <= 1e-4.
//!
//! The fixtures in `tests/fixtures/` come from `tools/fixtures/make_fixtures.py`; the weights are
//! regenerated here from their seed, written as a checkpoint of the case's layout, and loaded
//! through the same path as a real checkpoint.

mod common;

use chorus_core::npy::{read_npy, NpyData};
use chorus_core::{Buckets, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::{load_model, write_safetensors, Dtype, Layout};
use chorus_mimi::{DecoderOptions, MimiConfig, SlotDecoder};
use common::rel_l2;
use std::path::PathBuf;

/// The bound for f32 against the fp32 oracle.
const TOLERANCE: f64 = 1e-4;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

struct Case {
    name: String,
    n_q: usize,
    frames: usize,
    codes: Vec<u32>,
    pcm: Vec<f32>,
}

fn read(path: &PathBuf) -> chorus_core::npy::NpyArray {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    read_npy(&bytes, &path.display().to_string()).unwrap()
}

fn cases(layout: &str) -> (u64, Vec<Case>) {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("manifest.json")).expect("tests/fixtures/manifest.json"),
    )
    .unwrap();
    let mut seed = None;
    let mut out = Vec::new();
    for c in manifest["cases"].as_array().unwrap() {
        if c["layout"] != layout {
            continue;
        }
        seed = Some(c["weight_seed"].as_u64().unwrap());
        let codes = read(&fixtures().join(c["codes"].as_str().unwrap()));
        let pcm = read(&fixtures().join(c["pcm"].as_str().unwrap()));
        let (n_q, frames) = (codes.shape[0], codes.shape[1]);
        let NpyData::Int(codes) = codes.data else {
            panic!("codes must be integers")
        };
        let NpyData::Float(pcm) = pcm.data else {
            panic!("pcm must be float")
        };
        assert_eq!(pcm.len(), frames * FRAME_SAMPLES);
        out.push(Case {
            name: c["case"].as_str().unwrap().to_string(),
            n_q,
            frames,
            codes: codes.iter().map(|&v| v as u32).collect(),
            pcm,
        });
    }
    assert!(!out.is_empty(), "no {layout} case in the manifest");
    (seed.unwrap(), out)
}

/// Decodes every case of a layout side by side, one slot each, frame by frame.
fn check_layout(manifest_layout: &str, layout: Layout) {
    let (seed, cases) = cases(manifest_layout);
    let cfg = MimiConfig::default();
    let dir = std::env::temp_dir().join(format!(
        "chorus-oracle-{manifest_layout}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("model.safetensors");
    write_safetensors(
        &file,
        &chorus_mimi::random::random_tensors(&cfg, seed, layout),
        Dtype::F32,
    )
    .unwrap();
    let model = load_model(file.to_str().unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(model.layout, layout);
    let n = cases.len();
    let opts = DecoderOptions {
        max_slots: n,
        buckets: Buckets::new(&[n]).unwrap(),
    };
    let mut dec = SlotDecoder::from_weights(
        CpuBackend::new(None).unwrap(),
        &model.config,
        &model.weights,
        opts,
    )
    .unwrap();
    let frames = cases.iter().map(|c| c.frames).min().unwrap();
    let mut got = vec![Vec::with_capacity(frames * FRAME_SAMPLES); n];
    let slots: Vec<usize> = (0..n).collect();
    for t in 0..frames {
        let mut frame = Vec::new();
        let mut n_qs = Vec::new();
        for c in &cases {
            frame.extend((0..c.n_q).map(|q| c.codes[q * c.frames + t]));
            n_qs.push(c.n_q);
        }
        // Cases differ in n_q, so they go through the mixed-frame API.
        let mut offset = 0;
        let inputs: Vec<chorus_core::Frame<'_>> = n_qs
            .iter()
            .enumerate()
            .map(|(slot, &q)| {
                let f = chorus_core::Frame {
                    slot,
                    input: chorus_core::FrameInput::Codes(&frame[offset..offset + q]),
                };
                offset += q;
                f
            })
            .collect();
        let mut pcm = vec![0f32; n * FRAME_SAMPLES];
        chorus_core::FrameDecoder::step(&mut dec, &inputs, &mut pcm).unwrap();
        for (s, out) in slots.iter().zip(got.iter_mut()) {
            out.extend_from_slice(&pcm[s * FRAME_SAMPLES..(s + 1) * FRAME_SAMPLES]);
        }
    }
    for (c, g) in cases.iter().zip(&got) {
        let want = &c.pcm[..frames * FRAME_SAMPLES];
        let e = rel_l2(g, want);
        println!("{}: {} frames, relative L2 {e:.3e}", c.name, frames);
        assert!(
            e <= TOLERANCE,
            "{}: relative L2 {e:e} > {TOLERANCE:e}",
            c.name
        );
        // The window is 250 tokens = 125 frames: the fixtures must run past it.
        assert!(
            frames * cfg.frame_tokens() > cfg.sliding_window,
            "{}: too short to cross the window",
            c.name
        );
    }
}

#[test]
fn hf_layout_matches_transformers() {
    check_layout("hf", Layout::HuggingFace);
}

#[test]
fn kyutai_layout_matches_transformers() {
    check_layout("kyutai", Layout::Kyutai);
}
