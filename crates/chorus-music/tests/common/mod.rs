//! Shared helpers: the small random model, a CPU stage, fixtures from the PyTorch oracle.
#![allow(dead_code)]

pub mod oracle;

/// A free-running divergence is excused only below this oracle margin (scores are O(1)-O(10);
/// f32 differences between two implementations are ~1e-6).
pub const MARGIN_EPS: f32 = 1e-4;

use std::path::PathBuf;

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_cpu::CpuBackend;
use chorus_music::load::random_model;
use chorus_music::prompt::PromptIds;
use chorus_music::song::LEVELS;
use chorus_music::{DepthConfig, MusicModel, Qwen3Config, SemanticStage, StageOptions};

/// The `random-small` model with the LM head's END row scaled by `end_gain`.
pub fn small_model(end_gain: f32) -> MusicModel {
    random_model(Qwen3Config::small(), DepthConfig::small(), end_gain).unwrap()
}

/// A CPU stage for `songs` songs of up to `context` positions (two threads: CI's size).
pub fn stage(model: &MusicModel, songs: usize, context: usize) -> SemanticStage<CpuBackend> {
    let opts = StageOptions::for_songs(songs, context).unwrap();
    SemanticStage::new(CpuBackend::new(Some(2)).unwrap(), model, opts).unwrap()
}

/// `tests/fixtures/music/<name>.safetensors`.
/// (Test binaries copied to the GPU machine run from the repository root: the working directory.)
pub fn fixture(name: &str) -> SafetensorsFile {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/music");
    let dir = if built.is_dir() {
        built
    } else {
        PathBuf::from("tests/fixtures/music")
    };
    SafetensorsFile::open(&dir.join(format!("{name}.safetensors"))).unwrap()
}

pub fn floats(f: &SafetensorsFile, name: &str) -> Vec<f32> {
    f.load(name).unwrap().data
}

pub fn ints(f: &SafetensorsFile, name: &str) -> (Vec<usize>, Vec<i32>) {
    f.load_i32(name).unwrap()
}

/// The fixture's prompt as ids.
pub fn prompt(f: &SafetensorsFile) -> PromptIds {
    let (shape, ids) = ints(f, "prompt_ids");
    let p = shape[1];
    let v = |s: &[i32]| s.iter().map(|&x| x as u32).collect::<Vec<_>>();
    PromptIds::from_pair(v(&ids[..p]), v(&ids[p..]), 200_000).unwrap()
}

/// The fixture's codes as frames.
pub fn code_frames(f: &SafetensorsFile, name: &str) -> Vec<[u32; LEVELS]> {
    let (_, c) = ints(f, name);
    c.chunks_exact(LEVELS)
        .map(|r| std::array::from_fn(|l| r[l] as u32))
        .collect()
}

/// Relative L2 error of `got` against `want`; panics on an all-zero reference or a non-finite value.
pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    assert!(got.iter().all(|x| x.is_finite()), "non-finite output");
    let (mut num, mut den) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    assert!(den > 0.0, "all-zero reference");
    (num / den).sqrt()
}

/// A tiny model of the real architecture (the vocabulary stays real: audio ids reach 168,059;
/// int8 groups 16 and 64).
pub fn tiny() -> (Qwen3Config, DepthConfig) {
    let lm = Qwen3Config {
        hidden_size: 32,
        intermediate_size: 64,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 1,
        head_dim: 16,
        ..Qwen3Config::small()
    };
    let depth = DepthConfig {
        hidden_size: 32,
        num_layers: 1,
        num_attention_heads: 2,
        intermediate_size: 48,
        ..DepthConfig::small()
    };
    (lm, depth)
}
