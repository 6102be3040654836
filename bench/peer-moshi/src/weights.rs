//! Deterministic pseudo-random weights served to candle's `VarBuilder` by name and shape.
//!
//! The tensors follow the layout of the released Mimi checkpoint (plain conv `weight`, LayerNorm
//! `weight`/`bias`), so the crate takes the same construction paths as with real weights.

use std::sync::Mutex;

use candle_core::{DType, Device, Result, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;

/// Initial value of the transformer layer scales (`Config::v0_1` layer_scale).
const LAYER_SCALE: f32 = 0.01;

/// SplitMix64 (Steele, Lea, Flood 2014): small, seedable, good enough for benchmark inputs.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn next_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// Standard normal via Box-Muller.
    fn next_normal(&mut self) -> f64 {
        let (u1, u2) = (self.next_unit(), self.next_unit());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

pub struct RandomWeights {
    rng: Mutex<SplitMix64>,
}

impl RandomWeights {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(SplitMix64::new(seed)),
        }
    }

    fn values(&self, shape: &Shape, name: &str) -> Vec<f32> {
        let n = shape.elem_count();
        let leaf = name.rsplit('.').next().unwrap_or(name);
        let is_vector = shape.rank() == 1;
        match leaf {
            // Codebook bookkeeping: usage 1 makes embedding = embedding_sum.
            "_initialized" | "cluster_usage" => vec![1.0; n],
            "scale" => vec![LAYER_SCALE; n],
            "weight" | "alpha" if is_vector => vec![1.0; n],
            _ => {
                // Fan-in scaled normal keeps activations bounded through the deep conv stack.
                let fan_in = (n / shape.dims().first().copied().unwrap_or(1).max(1)).max(1);
                let std = if leaf == "bias" {
                    0.01
                } else {
                    1.0 / (fan_in as f64).sqrt()
                };
                // A poisoned lock only means another loader thread panicked; the state is still valid.
                let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                (0..n).map(|_| (std * rng.next_normal()) as f32).collect()
            }
        }
    }
}

impl SimpleBackend for RandomWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> Result<Tensor> {
        Tensor::from_vec(self.values(&s, name), s, dev)?.to_dtype(dtype)
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> Result<Tensor> {
        candle_core::bail!("shape of {name} is unknown to the random-weight backend")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        // The released checkpoint stores folded conv weights, not weight-norm `weight_g`/`weight_v`,
        // and LayerNorm `weight`, not `alpha`.
        name.ends_with(".weight")
    }
}
