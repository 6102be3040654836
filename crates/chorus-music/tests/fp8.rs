//! The 8-bit KV cache (`KvCache::Fp8`) on the CPU backend: teacher-forced against the oracle it
//! stays within the bound the format allows, and it is not the f32 cache under another name.

mod common;

use chorus_music::{KvCache, SemanticStage, StageOptions};
use common::oracle::{teacher_forcing_errors, CONTEXT};
use common::*;

/// The format's cost on `random-small` (E4M3: 3 mantissa bits, a scale per head vector).
const FP8_BOUND: f64 = 5e-2;

#[test]
fn an_fp8_kv_cache_stays_near_the_oracle_when_teacher_forced() {
    let model = small_model(1.0);
    let mut opts = StageOptions::for_songs(1, CONTEXT).unwrap();
    opts.kv_cache = KvCache::Fp8;
    let be = chorus_cpu::CpuBackend::new(Some(2)).unwrap();
    let mut st = SemanticStage::new(be, &model, opts).unwrap();
    let errors = teacher_forcing_errors(&mut st);
    let mut quantized = false;
    for (name, e) in &errors {
        eprintln!("fp8 KV cache teacher forcing {name}: rel L2 {e:.3e} (bound {FP8_BOUND:e})");
        assert!(*e <= FP8_BOUND, "{name}: rel L2 {e:.3e}");
        quantized |= *e > 1e-4;
    }
    assert!(quantized, "the 8-bit cache changed nothing: {errors:?}");
    assert!(KvCache::parse("int4")
        .unwrap_err()
        .to_string()
        .contains("`int4`"));
}
