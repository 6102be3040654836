//! The LM's paged attention and CFG draw on CUDA, in f32 (validation mode) and bf16, against the
//! CPU backend and against references written here (causal attention in f64; for the draw, the
//! CPU backend's codes exactly). Every op runs inside `Backend::run`, so what is checked on CUDA is
//! a captured graph's replay. Every figure is printed (run with `--nocapture` to see them). Skips
//! (passes with a note) when no CUDA device is present.
//!
//! The tests live in `tests/lm_attention/`: decode, prefill, sliding windows and draw; `paged.rs`
//! is the paged-attention harness they share.

mod common;

#[path = "lm_attention/combine.rs"]
mod combine;
#[path = "lm_attention/decode.rs"]
mod decode;
#[path = "lm_attention/draw.rs"]
mod draw;
#[path = "lm_attention/fp8.rs"]
mod fp8;
#[path = "lm_attention/mma.rs"]
mod mma;
#[path = "lm_attention/paged.rs"]
mod paged;
#[path = "lm_attention/prefill.rs"]
mod prefill;
#[path = "lm_attention/rope_kv.rs"]
mod rope_kv;
#[path = "lm_attention/window.rs"]
mod window;

use std::sync::atomic::{AtomicUsize, Ordering};

use chorus_core::{Backend, BufRole, LmOps, Precision, Result};
use chorus_cuda::CudaBackend;
use common::*;

/// A fresh program key: a captured graph points at the buffers of its first run, so every call
/// with other buffers needs its own key.
fn key() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1 << 20);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Device ints holding `v`, through the pinned path as the host feeds them.
fn ints<B: LmOps>(be: &B, v: &[i32]) -> Result<B::Ints> {
    let mut pinned = be.pinned_ints(v.len())?;
    be.pinned_ints_mut(&mut pinned)?.copy_from_slice(v);
    let mut out = be.ints(v.len(), -7)?;
    be.copy_in_ints(&pinned, &mut out, v.len())?;
    // Waits for the copy while `pinned` is still alive.
    be.download_ints(&out)?;
    Ok(out)
}

/// `||got - want|| / ||want||` against an f64 reference.
fn rel_l2_f64(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    assert!(got.iter().all(|g| g.is_finite()), "non-finite output");
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w) * (g as f64 - w);
        den += w * w;
    }
    assert!(
        den > 0.0,
        "the reference is all zeros: the test would prove nothing"
    );
    (num / den).sqrt()
}

fn assert_ref(what: &str, p: Precision, got: &[f32], want: &[f64]) {
    let err = rel_l2_f64(got, want);
    let tol = tolerance(p);
    eprintln!(
        "reference {what} [{}]: rel L2 vs f64 {err:.3e} (tolerance {tol:.0e})",
        p.name()
    );
    assert!(
        err <= tol,
        "{what} [{}]: relative L2 error vs f64 {err:e} > {tol:e}",
        p.name()
    );
}
