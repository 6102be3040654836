//! The row ops of `LmOps` on CUDA (kernels/lm_rows.cu) against the CPU backend, in f32 and bf16.
//! Every op runs inside `Backend::run`, so what is checked is the captured graph's replay; ids,
//! codes and positions are device data, changed between replays where it matters. Inputs are
//! rounded to bf16 values first, so the upload is exact in both precisions and pure data movement
//! must match bit for bit. Every figure is printed (`--nocapture` shows them). Skips (passes with
//! a note) when no CUDA device is present.
//!
//! The tests of each op family live in `tests/lm_rows/`.

mod common;

#[path = "lm_rows/lengths.rs"]
mod lengths;
#[path = "lm_rows/norm.rs"]
mod norm;
#[path = "lm_rows/rope.rs"]
mod rope;
#[path = "lm_rows/rows.rs"]
mod rows;
#[path = "lm_rows/timing.rs"]
mod timing;

use chorus_core::{Backend, BufRole, LmOps, Precision, Result};
use chorus_cuda::CudaBackend;
use common::*;

/// Where a part must match the CPU bit for bit (else: within the precision's tolerance).
#[derive(Clone, Copy, PartialEq)]
enum Exact {
    /// Pure data movement, or f32 arithmetic in the reference's order in both precisions.
    Always,
    /// Bit for bit in f32 storage only (bf16 rounds the arithmetic's result).
    F32,
    /// Reductions or transcendental functions: tolerance only.
    Never,
}

/// Round to nearest even bf16, as an f32 (so both precisions upload the same values).
fn bf16_round(v: f32) -> f32 {
    let u = v.to_bits();
    let r = u.wrapping_add(0x7fff + ((u >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(r)
}

fn rvec(r: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    r.vec(n, scale).into_iter().map(bf16_round).collect()
}

fn ints<B: Backend>(be: &B, v: &[i32]) -> Result<B::Ints> {
    let mut out = be.ints(v.len(), 0)?;
    for (i, &x) in v.iter().enumerate() {
        be.fill_ints(&mut out, i, x)?;
    }
    Ok(out)
}

/// Runs `run` on every available precision and compares each named part with `want`.
fn check(
    name: &str,
    parts: &[(&str, Exact)],
    want: &[Vec<f32>],
    run: impl Fn(&CudaBackend) -> Result<Vec<Vec<f32>>>,
) {
    assert_eq!(parts.len(), want.len(), "{name}: one name per part");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run(&be).unwrap_or_else(|e| panic!("{name} [{}]: {e}", precision.name()));
        for ((part, exact), (g, w)) in parts.iter().zip(got.iter().zip(want)) {
            let what = format!("{name}: {part}");
            let bitwise = match exact {
                Exact::Always => true,
                Exact::F32 => precision == Precision::F32,
                Exact::Never => false,
            };
            if bitwise {
                let diffs = g
                    .iter()
                    .zip(w)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                let max = g
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                eprintln!(
                    "exact  {what} [{}]: {diffs} of {} elements differ (max |diff| {max:.3e})",
                    precision.name(),
                    g.len()
                );
                assert_eq!(g.len(), w.len(), "{what}: length");
                assert_eq!(diffs, 0, "{what} [{}]: not bit-exact", precision.name());
            } else {
                assert_parity(&what, precision, g, w);
            }
        }
    }
}
