//! Shared helpers of the decoder tests.
#![allow(dead_code)]

use chorus_core::{Buckets, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{DecoderOptions, MimiConfig, SlotDecoder};
use std::sync::OnceLock;

pub fn tiny_config() -> MimiConfig {
    chorus_mimi::random::small_config()
}

pub fn tiny_model() -> &'static LoadedModel {
    static MODEL: OnceLock<LoadedModel> = OnceLock::new();
    MODEL.get_or_init(|| chorus_mimi::random::random_model(&tiny_config(), 7).unwrap())
}

pub fn decoder(
    model: &LoadedModel,
    max_slots: usize,
    buckets: &[usize],
) -> SlotDecoder<CpuBackend> {
    let opts = DecoderOptions {
        max_slots,
        buckets: Buckets::new(buckets).unwrap(),
        chunk_frames: 1,
    };
    SlotDecoder::from_weights(
        CpuBackend::new(None).unwrap(),
        &model.config,
        &model.weights,
        opts,
    )
    .unwrap()
}

/// Deterministic codes `[frames][n_q]` for a stream.
pub fn codes(stream: u64, frames: usize, n_q: usize) -> Vec<Vec<u32>> {
    let mut x = stream.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..frames)
        .map(|_| {
            (0..n_q)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 2048) as u32
                })
                .collect()
        })
        .collect()
}

/// A stream decoded alone, frame by frame, in a fresh decoder.
pub fn alone(model: &LoadedModel, frames: &[Vec<u32>]) -> Vec<Vec<f32>> {
    let mut d = decoder(model, 1, &[1]);
    frames
        .iter()
        .map(|c| d.step_codes(&[0], c, c.len()).unwrap())
        .collect()
}

/// Relative L2 error of `got` against `want`.
pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    chorus_mimi::oracle::rel_l2(got, want)
}

/// Frame `i` of a multi-row PCM buffer.
pub fn row(pcm: &[f32], i: usize) -> &[f32] {
    &pcm[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES]
}

/// The CPU backend is batch-invariant: a row's result does not depend on the bucket, the other
/// rows or their order, so "the same frame" means the same bits.
pub fn assert_same(got: &[f32], want: &[f32], what: &str) {
    assert!(
        want.iter().any(|v| v.abs() > 1e-6),
        "{what}: reference is silent"
    );
    if got != want {
        panic!(
            "{what}: differs from the reference (relative L2 {:e})",
            rel_l2(got, want)
        );
    }
}
