//! The int8 "ConvRot" weight format (`MUSIC_SEMANTIC.md` §5.6): block Hadamard rotation and
//! per-output-channel int8 quantization, on the host.
//!
//! For a linear `W [out, in]` and a group `g` (a power of 4) dividing `in`, the writer stores
//! `q = clamp(round(Wr / s), -128, 127)` (int8) and `s = max(max_k |Wr[o, k]| / 127, 1e-30)` (f32,
//! one per output row), where `Wr[o, block j] = W[o, block j] · H_g` and
//! `H_g = kron(H4, ..., H4) / sqrt(g)`, `H4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]`.
//! `H_g` is symmetric and orthogonal, so `x · W^T = (x · blockdiag(H_g)) · Wr^T` and the runtime
//! computes `y[o] = s[o] * sum_k (x H)[k] q[o, k]`.
//!
//! The rotation here is a fast transform with one fixed order of f32 operations (the definition
//! both this crate and `tools/fixtures/music_int8.py` implement, so that they quantize bit for bit
//! alike): for the base-4 digits of the index within a block, least significant first, each
//! quadruple `(a, b, c, d)` along that digit becomes
//! `((a + b) + (c - d), (a + b) - (c - d), (a - b) + (c + d), (c + d) - (a - b))`; the block is then
//! multiplied by `2^-stages = 1 / sqrt(g)` (exact). A dense `x · H_g` product differs from it only
//! by f32 rounding.

use crate::{Error, Result};

/// Largest group the runtime rotates (the writer uses 256, 64 or 16).
pub const MAX_GROUP: usize = 4096;

/// Groups the writer tries, in order: the first dividing `in_features` is used.
pub const WRITER_GROUPS: [usize; 3] = [256, 64, 16];

/// Lower bound of a scale.
pub const MIN_SCALE: f32 = 1e-30;

/// The writer's group for a linear with `in_features` inputs, if any divides it.
pub fn writer_group(in_features: usize) -> Option<usize> {
    WRITER_GROUPS
        .into_iter()
        .find(|g| in_features.is_multiple_of(*g))
}

/// Radix-4 stages of a group (`g = 4^stages`), or `None` when `g` is not a power of 4 in
/// `4..=MAX_GROUP`.
pub fn stages(group: usize) -> Option<u32> {
    if !(4..=MAX_GROUP).contains(&group) || !group.is_power_of_two() {
        return None;
    }
    let bits = group.trailing_zeros();
    bits.is_multiple_of(2).then_some(bits / 2)
}

/// Checks `group` for op `op`: a power of 4 in `4..=MAX_GROUP` dividing `dim`.
pub fn check_group(op: &'static str, group: usize, dim: usize) -> Result<u32> {
    let s = stages(group).ok_or_else(|| {
        Error::input(
            op,
            format!("group {group} is not a power of 4 in 4..={MAX_GROUP}"),
        )
    })?;
    if !dim.is_multiple_of(group) {
        return Err(Error::input(
            op,
            format!("width {dim} is not a multiple of the group {group}"),
        ));
    }
    Ok(s)
}

/// One block in place: `x = x · H_g` with `g = x.len() = 4^stages` (see the module doc).
#[inline(always)]
pub fn rotate_block(x: &mut [f32], stages: u32) {
    let g = x.len();
    let mut s = 1;
    for _ in 0..stages {
        let mut hi = 0;
        while hi < g {
            for i in hi..hi + s {
                let (a, b, c, d) = (x[i], x[i + s], x[i + 2 * s], x[i + 3 * s]);
                let (ab, cd, amb, cpd) = (a + b, c - d, a - b, c + d);
                x[i] = ab + cd;
                x[i + s] = ab - cd;
                x[i + 2 * s] = amb + cpd;
                x[i + 3 * s] = cpd - amb;
            }
            hi += 4 * s;
        }
        s *= 4;
    }
    let scale = 1.0 / (1u32 << stages) as f32;
    x.iter_mut().for_each(|v| *v *= scale);
}

/// Every block of `group` elements of `x` in place (`x.len()` a multiple of `group`).
pub fn rotate(x: &mut [f32], group: usize) -> Result<()> {
    let s = check_group("convrot::rotate", group, x.len())?;
    x.chunks_exact_mut(group).for_each(|b| rotate_block(b, s));
    Ok(())
}

/// Quantizes one weight row: rotates `w` in place (it becomes `Wr`), writes `q` and returns the
/// scale `s` (see the module doc; `round` is half to even, as `torch.round`).
pub fn quantize_row(w: &mut [f32], group: usize, q: &mut [i8]) -> Result<f32> {
    if q.len() != w.len() {
        return Err(Error::input(
            "convrot::quantize_row",
            format!("{} int8 outputs for a row of {}", q.len(), w.len()),
        ));
    }
    rotate(w, group)?;
    let max = w.iter().fold(0f32, |m, v| m.max(v.abs()));
    let s = (max / 127.0).max(MIN_SCALE);
    for (o, &v) in q.iter_mut().zip(w.iter()) {
        *o = (v / s).round_ties_even().clamp(-128.0, 127.0) as i8;
    }
    Ok(s)
}

/// The float weights of one int8 row: `W = (q * s) · blockdiag(H_g)` (`H_g` is its own inverse).
pub fn dequantize_row(q: &[i8], scale: f32, group: usize, out: &mut [f32]) -> Result<()> {
    if q.len() != out.len() {
        return Err(Error::input(
            "convrot::dequantize_row",
            format!("{} floats for a row of {}", out.len(), q.len()),
        ));
    }
    for (o, &v) in out.iter_mut().zip(q) {
        *o = f32::from(v) * scale;
    }
    rotate(out, group)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dense `H_g` by its Kronecker definition.
    fn dense_h(g: usize) -> Vec<f64> {
        const H4: [[f64; 4]; 4] = [
            [1.0, 1.0, 1.0, -1.0],
            [1.0, 1.0, -1.0, 1.0],
            [1.0, -1.0, 1.0, 1.0],
            [-1.0, 1.0, 1.0, 1.0],
        ];
        let norm = (g as f64).sqrt();
        let digits = stages(g).unwrap_or(0);
        let mut h = vec![0.0; g * g];
        for i in 0..g {
            for j in 0..g {
                let v: f64 = (0..digits)
                    .map(|d| H4[(i >> (2 * d)) % 4][(j >> (2 * d)) % 4])
                    .product();
                h[i * g + j] = v / norm;
            }
        }
        h
    }

    #[test]
    fn the_fast_transform_is_the_dense_kronecker_product() {
        for g in [4usize, 16, 64, 256] {
            let h = dense_h(g);
            let x: Vec<f32> = (0..g).map(|i| ((i * 37 % 11) as f32 - 5.0) / 3.0).collect();
            let mut y = x.clone();
            rotate(&mut y, g).unwrap();
            for j in 0..g {
                let want: f64 = (0..g).map(|i| x[i] as f64 * h[i * g + j]).sum();
                assert!((y[j] as f64 - want).abs() < 1e-5, "g={g} j={j}");
            }
            // Symmetric orthogonal: rotating twice is the identity (to rounding).
            rotate(&mut y, g).unwrap();
            for (a, b) in y.iter().zip(&x) {
                assert!((a - b).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn groups_and_quantization_follow_the_writer() {
        assert_eq!(writer_group(4096), Some(256));
        assert_eq!(writer_group(384), Some(64));
        assert_eq!(writer_group(48), Some(16));
        assert_eq!(writer_group(40), None);
        assert_eq!(stages(256), Some(4));
        assert_eq!(stages(128), None);
        let mut w: Vec<f32> = (0..512)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 300.0)
            .collect();
        let orig = w.clone();
        let mut q = vec![0i8; 512];
        let s = quantize_row(&mut w, 256, &mut q).unwrap();
        assert!(q.iter().any(|&v| v == 127 || v == -127));
        let mut back = vec![0f32; 512];
        dequantize_row(&q, s, 256, &mut back).unwrap();
        // The rotation is orthogonal: the L2 error is the rounding error's, at most s/2 each.
        let err: f32 = orig
            .iter()
            .zip(&back)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            .sqrt();
        let bound = s / 2.0 * (512f32).sqrt() * 1.001;
        assert!(err <= bound, "dequantized within rounding: {err} > {bound}");
    }
}
