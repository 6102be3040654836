//! The rotate-half RoPE table that `LmOps::qk_norm_rope` reads: `[positions, 2, head_dim / 2]`,
//! for each position the cos of every frequency, then their sin.

/// The table as transformers builds it (`modeling_rope_utils._compute_default_rope_parameters`,
/// `Qwen3RotaryEmbedding.forward`): `inv_freq[j] = 1 / theta^(2j / d)` in f32, the angle
/// `p * inv_freq[j]` rounded to f32, then its cos and sin (taken in f64 and rounded). `theta` is
/// rounded to f32 first, as transformers' f32 `inv_freq` does.
pub fn rope_table(positions: usize, head_dim: usize, theta: f64) -> Vec<f32> {
    let half = head_dim / 2;
    let theta = theta as f32;
    let inv_freq: Vec<f32> = (0..half)
        .map(|j| 1.0 / theta.powf((2 * j) as f32 / head_dim as f32))
        .collect();
    let mut t = Vec::with_capacity(positions * 2 * half);
    for p in 0..positions {
        let angles: Vec<f64> = inv_freq.iter().map(|&f| (p as f32 * f) as f64).collect();
        t.extend(angles.iter().map(|a| a.cos() as f32));
        t.extend(angles.iter().map(|a| a.sin() as f32));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_cos_then_sin_per_position() {
        let t = rope_table(3, 4, 10_000.0);
        assert_eq!(t.len(), 3 * 4);
        // Position 0: no rotation.
        assert_eq!(&t[..4], &[1.0, 1.0, 0.0, 0.0]);
        // Position 2, frequency 0 (inv_freq 1): the angle is 2 radians.
        assert_eq!(t[8], (2.0f64).cos() as f32);
        assert_eq!(t[10], (2.0f64).sin() as f32);
        // Frequency 1: inv_freq = 1 / 10000^(1/2) = 0.01.
        assert!((t[11] - (0.02f64).sin() as f32).abs() < 1e-7);
    }
}
