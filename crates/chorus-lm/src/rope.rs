//! The rotate-half RoPE table that `LmOps::qk_norm_rope` reads: `[positions, 2, head_dim / 2]`,
//! for each position the cos of every frequency, then their sin; its frequencies plain or with
//! Llama 3's scaling (Sesame CSM's backbone and depth decoder).

/// How a model rescales its RoPE frequencies (`rope_scaling` of a transformers config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// `inv_freq[j] = 1 / theta^(2j / d)`.
    None,
    /// `rope_type: "llama3"`.
    Llama3(Llama3Scaling),
}

/// The four values of a `llama3` `rope_scaling` (transformers' names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_max_position_embeddings: f32,
}

/// The frequencies, in f32 as transformers computes them.
///
/// Plain: `modeling_rope_utils._compute_default_rope_parameters` (`theta` rounded to f32 first).
/// Llama 3 (`_compute_llama3_parameters`; torchtune's `Llama3ScaledRoPE` gives the same bits,
/// `CSM.md` §1.1): with `L = original_max_position_embeddings` and the wavelength `w = 2π / f`,
/// keep `f` where `w < L / high_freq_factor`, use `f / factor` where `w > L / low_freq_factor`,
/// and between them `(1 - s) f / factor + s f` with `s = (L / w - low) / (high - low)`; every
/// step in f32, in that order.
pub fn inv_freq(head_dim: usize, theta: f64, scaling: RopeScaling) -> Vec<f32> {
    let theta = theta as f32;
    let plain = (0..head_dim / 2).map(|j| 1.0 / theta.powf((2 * j) as f32 / head_dim as f32));
    match scaling {
        RopeScaling::None => plain.collect(),
        RopeScaling::Llama3(s) => {
            let old = s.original_max_position_embeddings;
            let low_wavelen = old / s.low_freq_factor;
            let high_wavelen = old / s.high_freq_factor;
            let two_pi = 2.0 * std::f64::consts::PI;
            plain
                .map(|f| {
                    let wavelen = two_pi as f32 / f;
                    let scaled = if wavelen > low_wavelen {
                        f / s.factor
                    } else {
                        f
                    };
                    // transformers' `~(w < high) * ~(w > low)`; the wavelengths are finite.
                    let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                    if medium {
                        let smooth = (old / wavelen - s.low_freq_factor)
                            / (s.high_freq_factor - s.low_freq_factor);
                        (1.0 - smooth) * scaled / s.factor + smooth * scaled
                    } else {
                        scaled
                    }
                })
                .collect()
        }
    }
}

/// The table as transformers builds it (`Qwen3RotaryEmbedding.forward`): the angle
/// `p * inv_freq[j]` rounded to f32, then its cos and sin (taken in f64 and rounded).
pub fn rope_table(positions: usize, head_dim: usize, theta: f64) -> Vec<f32> {
    rope_table_scaled(positions, head_dim, theta, RopeScaling::None)
}

/// [`rope_table`] over [`inv_freq`] with `scaling`.
pub fn rope_table_scaled(
    positions: usize,
    head_dim: usize,
    theta: f64,
    scaling: RopeScaling,
) -> Vec<f32> {
    let inv_freq = inv_freq(head_dim, theta, scaling);
    let mut t = Vec::with_capacity(positions * 2 * inv_freq.len());
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

    /// CSM's rope_scaling as Sesame states it (factor 32, 1, 4, 8192).
    const SESAME: Llama3Scaling = Llama3Scaling {
        factor: 32.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192.0,
    };

    /// Counts of (unscaled, smoothed, divided by the factor) frequencies.
    fn bands(head_dim: usize, s: Llama3Scaling) -> (usize, usize, usize) {
        let plain = inv_freq(head_dim, 5e5, RopeScaling::None);
        let scaled = inv_freq(head_dim, 5e5, RopeScaling::Llama3(s));
        let mut n = (0, 0, 0);
        for (p, q) in plain.iter().zip(&scaled) {
            if p == q {
                n.0 += 1;
            } else if *q == p / s.factor {
                n.2 += 1;
            } else {
                assert!(
                    q < p && *q > p / s.factor,
                    "a smoothed frequency lies between"
                );
                n.1 += 1;
            }
        }
        n
    }

    #[test]
    fn llama3_scaling_splits_csm_frequencies_into_the_brief_bands() {
        // CSM.md §1.1: backbone head_dim 64: 15 unscaled, 3 smoothed, 14 divided; depth 128:
        // 29, 6, 29.
        assert_eq!(bands(64, SESAME), (15, 3, 14));
        assert_eq!(bands(128, SESAME), (29, 6, 29));
    }

    #[test]
    fn hf_stored_llama3_values_give_sesames_frequencies_bit_for_bit() {
        // transformers stores the same thresholds with other (power-of-two) numbers.
        let backbone = Llama3Scaling {
            low_freq_factor: 0.125,
            high_freq_factor: 0.5,
            original_max_position_embeddings: 1024.0,
            ..SESAME
        };
        let depth = Llama3Scaling {
            low_freq_factor: 1.0 / 512.0,
            high_freq_factor: 1.0 / 128.0,
            original_max_position_embeddings: 16.0,
            ..SESAME
        };
        for (d, hf) in [(64, backbone), (128, depth)] {
            let a = inv_freq(d, 5e5, RopeScaling::Llama3(SESAME));
            let b = inv_freq(d, 5e5, RopeScaling::Llama3(hf));
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "head_dim {d}");
        }
        let t = rope_table_scaled(2048, 64, 5e5, RopeScaling::Llama3(backbone));
        assert_eq!(t.len(), 2048 * 64);
    }
}
