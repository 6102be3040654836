//! Scalar math kernels written to auto-vectorize (branch-free, no libm calls in hot loops).

use crate::simd::dispatch;

/// Below this, `exp(x)` underflows f32's normal range; ELU saturates to -1 there anyway.
const EXP_MIN_ARG: f32 = -87.0;
/// 1.5 * 2^23: adding it rounds an f32 of magnitude < 2^22 to the nearest integer.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `exp(x)` for `x <= 0`, about 2 ulp (Cephes `expf` range reduction and polynomial).
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f32) -> f32 {
    // Cephes expf: x = n ln2 + r with ln2 split in two for an exact product.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.max(EXP_MIN_ARG);
    let shifted = x * std::f32::consts::LOG2_E + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let n_int = shifted.to_bits() as i32 - ROUND_MAGIC.to_bits() as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let scale = f32::from_bits(((n_int + 127) as u32) << 23);
    e * scale
}

/// `expm1(x)` for `x <= 0`, accurate in relative terms near zero: with `x = n ln2 + r`,
/// `|r| <= ln2 / 2`, `expm1(x) = 2^n expm1(r) + (2^n - 1)`, which is exactly `expm1(r)` when
/// `n = 0` and cancels at most one bit otherwise (the reduction of FreeBSD's `expm1f`).
#[inline(always)]
fn expm1_nonpositive(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.max(EXP_MIN_ARG);
    let shifted = x * std::f32::consts::LOG2_E + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let n_int = shifted.to_bits() as i32 - ROUND_MAGIC.to_bits() as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Taylor series of expm1(r) to r^8/8!: the truncation error at |r| = ln2/2 is below 3e-10.
    let mut p = 1.0 / 40_320.0_f32;
    p = p * r + 1.0 / 5_040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    let em1_r = (p * r + 1.0) * r;
    let scale = f32::from_bits(((n_int + 127) as u32) << 23);
    scale * em1_r + (scale - 1.0)
}

/// ELU with alpha 1: `x` for `x > 0`, `expm1(x)` otherwise.
#[inline(always)]
pub(crate) fn elu(x: f32) -> f32 {
    let neg = expm1_nonpositive(x.min(0.0));
    if x > 0.0 {
        x
    } else {
        neg
    }
}

dispatch! {
    /// `dst[i] = elu(src[i])`.
    pub(crate) fn elu_into(dst: &mut [f32], src: &[f32]) {
        // Fixed-width blocks copied by value: LLVM then vectorizes at full register width.
        const BLOCK: usize = 16;
        let mut d_blocks = dst.chunks_exact_mut(BLOCK);
        let mut s_blocks = src.chunks_exact(BLOCK);
        for (d, s) in (&mut d_blocks).zip(&mut s_blocks) {
            let mut v = [0.0_f32; BLOCK];
            v.copy_from_slice(s);
            for x in v.iter_mut() {
                *x = elu(*x);
            }
            d.copy_from_slice(&v);
        }
        for (d, &s) in d_blocks.into_remainder().iter_mut().zip(s_blocks.remainder()) {
            *d = elu(s);
        }
    }
}

/// Below this `|z|`, `erf(z)` comes from its odd series; above, from the logarithm of `erfc`.
const ERF_SPLIT: f32 = 0.921_875;
/// Past this `|z|`, `erfc(z) < 2e-8`: `1 + erf(z)` is taken as 2 (or 0).
const ERF_ONE: f32 = 4.0;

/// `1 + erf(z)`, branch-free so that blocks of it vectorize. Both pieces are weighted
/// least-squares (Lawson) fits made for this function: `erf(z) = z P(z^2)` on `|z| < ERF_SPLIT`
/// (relative error 1.6e-8) and `ln erfc(t) = Q(t - ERF_SPLIT)` on `[ERF_SPLIT, ERF_ONE]`
/// (absolute error 1.2e-8). For `z < 0` past the split the result is `erfc(|z|)` itself, so it
/// keeps its relative accuracy where `1 + erf` would cancel.
#[inline(always)]
// The fit's leading coefficient lies one ulp below 2 / sqrt(pi) in f32, and is kept as fitted.
#[allow(clippy::approx_constant)]
fn one_plus_erf(z: f32) -> f32 {
    let t = z.abs();
    let s = z * z;
    let mut p = -5.990_987_4e-4_f32;
    p = p * s + 4.993_212e-3;
    p = p * s - 2.676_664_3e-2;
    p = p * s + 1.128_181_7e-1;
    p = p * s - 3.761_249_5e-1;
    p = p * s + 1.128_379_1;
    let near = 1.0 + z * p;
    let u = t.clamp(ERF_SPLIT, ERF_ONE) - ERF_SPLIT;
    let mut q = 1.602_493_2e-6_f32;
    q = q * u - 3.353_626e-5;
    q = q * u + 3.361_694e-4;
    q = q * u - 2.202_021_7e-3;
    q = q * u + 1.089_956_7e-2;
    q = q * u - 4.484_408_7e-2;
    q = q * u - 8.329_858e-1;
    q = q * u - 2.508_012_5;
    q = q * u - 1.648_562;
    // Past ERF_ONE, erfc is below f32's resolution of 1 + erf: 0, as PyTorch's f32 GELU gives.
    let erfc = if t < ERF_ONE { exp_nonpositive(q) } else { 0.0 };
    let far = if z < 0.0 { erfc } else { 2.0 - erfc };
    if t < ERF_SPLIT {
        near
    } else {
        far
    }
}

/// Exact GELU: `0.5 x (1 + erf(x / sqrt 2))`.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    0.5 * x * one_plus_erf(x * std::f32::consts::FRAC_1_SQRT_2)
}

dispatch! {
    /// `x[i] = gelu(x[i])`.
    pub(crate) fn gelu_in_place(x: &mut [f32]) {
        // Fixed-width blocks copied by value, as in `elu_into`: LLVM vectorizes both pieces.
        const BLOCK: usize = 16;
        let mut blocks = x.chunks_exact_mut(BLOCK);
        for b in &mut blocks {
            let mut v = [0.0_f32; BLOCK];
            v.copy_from_slice(b);
            for x in v.iter_mut() {
                *x = gelu(*x);
            }
            b.copy_from_slice(&v);
        }
        for x in blocks.into_remainder() {
            *x = gelu(*x);
        }
    }
}

/// `sum a[i] * b[i]` with sixteen independent accumulators so the loop vectorizes.
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut acc = [0.0_f32; LANES];
    let chunks = a.len() / LANES;
    for c in 0..chunks {
        let (xa, xb) = (
            &a[c * LANES..c * LANES + LANES],
            &b[c * LANES..c * LANES + LANES],
        );
        for l in 0..LANES {
            acc[l] += xa[l] * xb[l];
        }
    }
    let mut tail = 0.0;
    for i in chunks * LANES..a.len() {
        tail += a[i] * b[i];
    }
    // A serial sum: LLVM then keeps the loop above at full vector width (a tree sum here made it
    // pick 2-wide vectors).
    acc.iter().sum::<f32>() + tail
}

/// Sum of 16 lanes as a tree (four vector steps), not a 16-long serial chain of scalar adds.
#[inline(always)]
pub(crate) fn hsum(mut acc: [f32; 16]) -> f32 {
    let mut width = 8;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    acc[0]
}

/// `x[i] = exp(x[i] - max x)`; returns the sum (the softmax denominator).
#[inline(always)]
pub(crate) fn softmax_unnormalized(x: &mut [f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut blocks = x.chunks_exact(LANES);
    for b in &mut blocks {
        for l in 0..LANES {
            // `if` instead of `f32::max`: no NaN handling, so the loop vectorizes.
            if b[l] > lanes[l] {
                lanes[l] = b[l];
            }
        }
    }
    let mut max = lanes
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for &v in blocks.remainder() {
        if v > max {
            max = v;
        }
    }
    let mut sums = [0.0_f32; LANES];
    let mut blocks = x.chunks_exact_mut(LANES);
    for b in &mut blocks {
        let mut v = [0.0_f32; LANES];
        v.copy_from_slice(b);
        for l in 0..LANES {
            v[l] = exp_nonpositive(v[l] - max);
            sums[l] += v[l];
        }
        b.copy_from_slice(&v);
    }
    let mut sum = hsum(sums);
    for v in blocks.into_remainder() {
        *v = exp_nonpositive(*v - max);
        sum += *v;
    }
    sum
}

/// `y[i] += alpha * x[i]`.
#[inline(always)]
pub(crate) fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (d, &s) in y.iter_mut().zip(x) {
        *d += alpha * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elu_matches_f64_expm1() {
        let mut worst = 0.0_f64;
        for i in 0..=200_000 {
            let x = -100.0 + i as f32 * 1e-3;
            let want = if x > 0.0 {
                x as f64
            } else {
                (x as f64).exp_m1()
            };
            let got = elu(x) as f64;
            let err = (got - want).abs() / want.abs().max(1e-30);
            worst = worst.max(err);
        }
        for e in 1..38 {
            for m in [1.0_f32, 3.7, 6.9] {
                let x = -m * 10f32.powi(-e);
                let want = (x as f64).exp_m1();
                worst = worst.max((elu(x) as f64 - want).abs() / want.abs());
            }
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
    }

    #[test]
    fn gelu_matches_f64_erf_reference() {
        // Every 5e-5 over [-10, 10], through the vector form and the scalar one.
        let mut worst = 0.0_f64;
        let mut block = vec![0.0_f32; 400_001];
        for (i, v) in block.iter_mut().enumerate() {
            *v = -10.0 + i as f32 * 5e-5;
        }
        let mut got = block.clone();
        gelu_in_place(&mut got);
        for (&x, &g) in block.iter().zip(&got) {
            let want = 0.5 * x as f64 * libm::erfc(-x as f64 / std::f64::consts::SQRT_2);
            let err = (g as f64 - want).abs();
            // Relative to the value; absolute past x = -4 sqrt 2, where the result is 0.
            assert!(
                err <= 1e-6 * want.abs() + 1e-8 * (x as f64).abs(),
                "x={x} err={err}"
            );
            if want.abs() >= 1e-2 {
                worst = worst.max(err / want.abs());
            }
            assert_eq!(g, gelu(x), "x={x}: the block and the scalar form differ");
        }
        // Under 8 ulp wherever |gelu| >= 1e-2 (f32's own 1 + erf loses far more at x = -3).
        assert!(worst < 1e-6, "worst relative error {worst}");
    }
}
