//! The CUDA slot decoder against transformers' `MimiModel.decode` (fp32, full sequence) on the
//! oracle fixtures in `tests/fixtures/` (HF-layout cases, n_q 8/16/32 side by side, 140 frames,
//! past the 250-token window): f32 within 1e-4 and bf16 within 2e-2 relative L2.
//! Skips (passes with a note) when no CUDA device is present.

mod common;

use std::path::PathBuf;

use chorus_core::npy::{read_npy, NpyArray, NpyData};
use chorus_core::{Buckets, Frame, FrameDecoder, FrameInput, Precision, FRAME_SAMPLES};
use chorus_mimi::random::random_model;
use chorus_mimi::{DecoderOptions, MimiConfig, SlotDecoder};
use common::*;

/// The fixtures folder: `CHORUS_FIXTURES`, else the checkout's, else `tests/fixtures` under the
/// working directory (the device machine runs the binaries from the repository root).
fn fixtures() -> PathBuf {
    if let Some(dir) = std::env::var_os("CHORUS_FIXTURES") {
        return PathBuf::from(dir);
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    if built.join("manifest.json").exists() {
        built
    } else {
        PathBuf::from("tests/fixtures")
    }
}

fn read(name: &str) -> NpyArray {
    let path = fixtures().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    read_npy(&bytes, &path.display().to_string()).expect("npy")
}

struct Case {
    name: String,
    n_q: usize,
    frames: usize,
    /// `[n_q, frames]`.
    codes: Vec<u32>,
    pcm: Vec<f32>,
}

fn hf_cases() -> (u64, Vec<Case>) {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("manifest.json")).expect("manifest.json"),
    )
    .expect("manifest json");
    let mut seed = 0;
    let mut out = Vec::new();
    for c in manifest["cases"].as_array().expect("cases") {
        if c["layout"] != "hf" {
            continue;
        }
        seed = c["weight_seed"].as_u64().expect("weight_seed");
        let codes = read(c["codes"].as_str().expect("codes"));
        let pcm = read(c["pcm"].as_str().expect("pcm"));
        let (n_q, frames) = (codes.shape[0], codes.shape[1]);
        let (NpyData::Int(codes), NpyData::Float(pcm)) = (codes.data, pcm.data) else {
            panic!("codes must be integers and pcm floats")
        };
        out.push(Case {
            name: c["case"].as_str().expect("case").to_string(),
            n_q,
            frames,
            codes: codes.iter().map(|&v| v as u32).collect(),
            pcm,
        });
    }
    assert!(!out.is_empty(), "no hf case in the manifest");
    (seed, out)
}

#[test]
fn cuda_decoder_matches_transformers_oracle() {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return;
    }
    let (seed, cases) = hf_cases();
    let model = random_model(&MimiConfig::default(), seed).expect("random model");
    let n = cases.len();
    let frames = cases.iter().map(|c| c.frames).min().expect("frames");
    for precision in [Precision::F32, Precision::Bf16] {
        let Some(be) = cuda(precision) else { return };
        let opts = DecoderOptions {
            max_slots: n,
            buckets: Buckets::new(&[n]).expect("buckets"),
        };
        let mut dec =
            SlotDecoder::from_weights(be, &model.config, &model.weights, opts).expect("decoder");
        let mut got = vec![Vec::with_capacity(frames * FRAME_SAMPLES); n];
        for t in 0..frames {
            let frame_codes: Vec<Vec<u32>> = cases
                .iter()
                .map(|c| (0..c.n_q).map(|q| c.codes[q * c.frames + t]).collect())
                .collect();
            let inputs: Vec<Frame<'_>> = frame_codes
                .iter()
                .enumerate()
                .map(|(slot, codes)| Frame {
                    slot,
                    input: FrameInput::Codes(codes),
                })
                .collect();
            let mut pcm = vec![0f32; n * FRAME_SAMPLES];
            dec.step(&inputs, &mut pcm).expect("step");
            for (s, out) in got.iter_mut().enumerate() {
                out.extend_from_slice(&pcm[s * FRAME_SAMPLES..(s + 1) * FRAME_SAMPLES]);
            }
        }
        for (c, g) in cases.iter().zip(&got) {
            assert_parity(
                &format!("oracle {} ({frames} frames)", c.name),
                precision,
                g,
                &c.pcm[..frames * FRAME_SAMPLES],
            );
        }
    }
}
