//! The 8-bit float KV cache format: OCP FP8 E4M3 (the "fn" variant: no infinities, 448 the
//! largest finite value, NaN only at 0x7f/0xff), one f32 scale per head vector of each cached
//! position.
//!
//! A head vector `x` (head_dim values of one position's k or v head) is stored as
//! `q = e4m3(x / s)` with `s = max|x| / 448` (`s = 1` for an all-zero vector), rounded to nearest
//! even and saturated at ±448, as `cvt.rn.satfinite.e4m3x2.f32` does on the GPU; its value is
//! `q * s`. Per-position scales need no calibration and follow every position's own range.

/// Largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;
/// Smallest E4M3 normal exponent (2^-6); below it the spacing is the subnormals' 2^-9.
const E4M3_MIN_EXP: i32 = -6;
/// Mantissa bits of E4M3.
const E4M3_MANTISSA: i32 = 3;

/// `x` rounded to the nearest E4M3 value (ties to even), saturated at ±[`E4M3_MAX`]; NaN stays NaN.
pub fn e4m3_round(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a >= E4M3_MAX {
        return E4M3_MAX.copysign(x);
    }
    if a == 0.0 {
        return x;
    }
    // The spacing of E4M3 values around `a`: 2^(e - 3) in the binade of 2^e, 2^-9 below 2^-6.
    let e = (((a.to_bits() >> 23) & 0xff) as i32 - 127).max(E4M3_MIN_EXP);
    let quantum = f32::powi(2.0, e - E4M3_MANTISSA);
    // Both scalings by a power of two are exact; the rounding is the only inexact step.
    let r = (a / quantum).round_ties_even() * quantum;
    r.min(E4M3_MAX).copysign(x)
}

/// The scale of a head vector whose largest magnitude is `amax`.
pub fn head_scale(amax: f32) -> f32 {
    if amax > 0.0 && amax.is_finite() {
        amax / E4M3_MAX
    } else {
        1.0
    }
}

/// Quantizes `x` in place to the values its E4M3 form holds (`e4m3(x / s) * s`); returns `s`.
pub fn quantize_head(x: &mut [f32]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let s = head_scale(amax);
    for v in x.iter_mut() {
        *v = e4m3_round(*v / s) * s;
    }
    s
}

/// Where the scale of kv head `h`'s vector at pool position `pos` (block * block_size + offset)
/// lies: scales are `[num_blocks, kv_heads, block_size]`, so one head's scales of a block's
/// positions are contiguous (a GPU decode reads 32 consecutive keys' scales as whole sectors; in
/// a position-major layout each 4-byte scale cost a 32-byte sector).
pub fn scale_index(pos: usize, h: usize, block_size: usize, kv_heads: usize) -> usize {
    let (block, offset) = (pos / block_size, pos % block_size);
    (block * kv_heads + h) * block_size + offset
}

/// The value of an E4M3 byte (for reading a cache back on the host).
pub fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = ((b >> 3) & 0x0f) as i32;
    let man = (b & 0x07) as f32;
    if exp == 0x0f && b & 0x07 == 0x07 {
        return f32::NAN;
    }
    let mag = if exp == 0 {
        man * f32::powi(2.0, E4M3_MIN_EXP - E4M3_MANTISSA)
    } else {
        (1.0 + man / 8.0) * f32::powi(2.0, exp - 7)
    };
    sign * mag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_e4m3_value_rounds_to_itself_and_the_range_is_the_formats() {
        let mut finite = Vec::new();
        for b in 0..=255u8 {
            let v = e4m3_to_f32(b);
            if v.is_nan() {
                assert!(b & 0x7f == 0x7f, "{b:#x}");
                continue;
            }
            assert_eq!(e4m3_round(v).to_bits(), v.to_bits(), "{b:#x} = {v}");
            finite.push(v);
        }
        assert_eq!(finite.len(), 254);
        assert_eq!(finite.iter().cloned().fold(0f32, f32::max), E4M3_MAX);
        assert_eq!(
            e4m3_to_f32(0x01),
            f32::powi(2.0, -9),
            "the smallest subnormal"
        );
        assert_eq!(e4m3_to_f32(0x08), f32::powi(2.0, -6), "the smallest normal");
    }

    #[test]
    fn rounding_is_to_nearest_even_and_saturates() {
        // 1.0625 lies halfway between 1 and 1.125: ties go to the even mantissa (1.0).
        assert_eq!(e4m3_round(1.0625), 1.0);
        assert_eq!(e4m3_round(1.1875), 1.25);
        assert_eq!(e4m3_round(1.07), 1.125);
        assert_eq!(e4m3_round(-3.3), -3.25);
        assert_eq!(e4m3_round(1e6), 448.0);
        assert_eq!(e4m3_round(-460.0), -448.0);
        // Halfway between the two smallest subnormals, and below half the smallest one.
        assert_eq!(
            e4m3_round(1.5 * f32::powi(2.0, -9)),
            2.0 * f32::powi(2.0, -9)
        );
        assert_eq!(e4m3_round(0.4 * f32::powi(2.0, -9)), 0.0);
        // Every f32 rounds to its nearest E4M3 value.
        let all: Vec<f32> = (0..=255u8)
            .map(e4m3_to_f32)
            .filter(|v| v.is_finite())
            .collect();
        for i in 0..10_000 {
            let x = (i as f32 - 5000.0) * 0.0917;
            let r = e4m3_round(x);
            let best = all
                .iter()
                .map(|&v| (v - x).abs())
                .fold(f32::INFINITY, f32::min);
            assert!((r - x).abs() <= best, "{x}: {r}");
        }
    }

    #[test]
    fn scales_of_a_heads_block_positions_are_contiguous_and_cover_the_pool_once() {
        let (blocks, bs, heads) = (3, 16, 4);
        let mut seen = vec![false; blocks * bs * heads];
        for pos in 0..blocks * bs {
            for h in 0..heads {
                let i = scale_index(pos, h, bs, heads);
                assert!(!seen[i], "position {pos} head {h} reuses index {i}");
                seen[i] = true;
                if pos % bs > 0 {
                    assert_eq!(i, scale_index(pos - 1, h, bs, heads) + 1);
                }
            }
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(scale_index(16, 2, bs, heads), (4 + 2) * 16);
    }

    #[test]
    fn a_head_keeps_its_largest_value_and_zero_heads_stay_zero() {
        let mut x = vec![0.5, -3.0, 0.001, 2.2];
        let s = quantize_head(&mut x);
        assert_eq!(s, 3.0 / E4M3_MAX);
        assert!((x[1] + 3.0).abs() < 1e-6);
        for (got, want) in x.iter().zip([0.5f32, -3.0, 0.001, 2.2]) {
            assert!(
                (got - want).abs() <= want.abs() / 16.0 + 2e-4,
                "{got} vs {want}"
            );
        }
        let mut z = vec![0.0; 4];
        assert_eq!(quantize_head(&mut z), 1.0);
        assert!(z.iter().all(|&v| v == 0.0));
    }
}
