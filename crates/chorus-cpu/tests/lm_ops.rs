//! The language-model ops (`LmOps`) of the CPU backend against plain references written here:
//! f64 for the arithmetic ops (relative L2 error at most [`LM_TOL`]), exact for the data movement
//! and the draws, and bit-identical results for a row alone and the same row among others.
//!
//! The tests of each op family live in `tests/lm_ops/`.

mod common;

#[path = "lm_ops/attention.rs"]
mod attention;
#[path = "lm_ops/draw.rs"]
mod draw;
#[path = "lm_ops/draw_cases.rs"]
mod draw_cases;
#[path = "lm_ops/fused.rs"]
mod fused;
#[path = "lm_ops/norm.rs"]
mod norm;
#[path = "lm_ops/q8.rs"]
mod q8;
#[path = "lm_ops/rows.rs"]
mod rows;

use chorus_core::{Backend, BufRole, LmOps};
use chorus_cpu::{CpuBackend, CpuBuf, CpuInts};

/// Relative L2 error allowed against an f64 reference: f32 arithmetic over short reductions.
pub const LM_TOL: f64 = 1e-6;

pub fn buf(be: &CpuBackend, v: &[f32]) -> CpuBuf {
    be.upload(v, BufRole::Activation).unwrap()
}

/// Device ints holding `v`, through the pinned path (as the host feeds them).
pub fn ints(be: &CpuBackend, v: &[i32]) -> CpuInts {
    let mut pinned = be.pinned_ints(v.len()).unwrap();
    be.pinned_ints_mut(&mut pinned).unwrap().copy_from_slice(v);
    let mut out = be.ints(v.len(), -7).unwrap();
    be.copy_in_ints(&pinned, &mut out, v.len()).unwrap();
    out
}

pub fn down(be: &CpuBackend, b: &CpuBuf) -> Vec<f32> {
    be.download(b).unwrap()
}

pub fn down_ints(be: &CpuBackend, b: &CpuInts) -> Vec<i32> {
    be.download_ints(b).unwrap()
}

/// Asserts `got` is within [`LM_TOL`] of `want` in relative L2.
pub fn assert_near(what: &str, got: &[f32], want: &[f64]) {
    let err = common::rel_l2(got, want);
    assert!(
        err <= LM_TOL,
        "{what}: relative L2 error {err:e} > {LM_TOL:e}"
    );
}

/// Asserts two f32 slices are identical bit for bit.
pub fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}: {g} vs {w}");
    }
}
