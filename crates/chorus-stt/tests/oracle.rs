//! The step against transformers' KyutaiSpeechToText (tools/fixtures/stt_oracle.py) on the
//! seeded random-small weights, on the CPU backend in f32: teacher-forced text logits and VAD
//! probabilities within rel L2 1e-4 at every position (the window of 6 wraps three times in 20
//! positions), and free-running greedy tokens identical at every position.

mod common;

use chorus_core::checkpoint::TensorSource;
use chorus_cpu::CpuBackend;
use chorus_stt::SttConfig;
use common::oracle::{fixture, ints, rel_l2, run_on, run_on_kv, Run, REL_L2};

fn run(forced: Option<Vec<u32>>, company: usize) -> Run {
    run_with(SttConfig::random_small(), forced, company)
}

fn run_with(c: SttConfig, forced: Option<Vec<u32>>, company: usize) -> Run {
    run_on(CpuBackend::new(Some(2)).unwrap(), c, forced, company)
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

/// Bound of the 8-bit rings (E4M3, a scale per head vector) against transformers' f32 cache.
const FP8_REL_L2: f64 = 5e-2;

#[test]
fn teacher_forced_logits_over_8bit_rings_stay_near_transformers() {
    // Every entry of the window's ring is rewritten three times: the format holds past the wrap.
    let f = fixture();
    let forced = ints(&f, "forced");
    let cpu = CpuBackend::new(Some(2)).unwrap();
    let r = run_on_kv(
        cpu,
        SttConfig::random_small(),
        Some(forced),
        2,
        chorus_lm::KvCache::Fp8,
    );
    let want = f.load("forced.logits").unwrap().data;
    let want_vad = f.load("forced.vad").unwrap().data;
    let e = rel_l2(&r.logits.concat(), &want);
    let v = rel_l2(&r.vad.concat(), &want_vad);
    eprintln!("8-bit rings: logits rel L2 {e:.3e}, vad {v:.3e} (bound {FP8_REL_L2:e})");
    assert!(e <= FP8_REL_L2 && v <= FP8_REL_L2, "{e:e} / {v:e}");
    // The 8-bit format is really in use: the f32 rings are 1e-4 from the oracle.
    assert!(
        e > REL_L2,
        "8-bit rings as exact as f32 ones ({e:e}): not in use?"
    );
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
