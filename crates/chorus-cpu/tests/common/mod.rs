//! Helpers shared by the op tests: a deterministic generator and the error metric.
#![allow(dead_code)]

use chorus_cpu::CpuBackend;

/// Relative L2 error every op must meet against its f64 reference.
pub const TOL: f64 = 1e-5;

/// A small deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-scale, scale)`.
    pub fn uniform(&mut self, scale: f32) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    pub fn vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.uniform(scale)).collect()
    }
}

pub fn backend() -> CpuBackend {
    CpuBackend::new(Some(2)).expect("backend")
}

/// `||got - want|| / ||want||`.
pub fn rel_l2(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w) * (g as f64 - w);
        den += w * w;
    }
    (num / den.max(1e-300)).sqrt()
}

pub fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    let err = rel_l2(got, want);
    assert!(err <= TOL, "{what}: relative L2 error {err:e} > {TOL:e}");
}

pub fn elu(x: f64) -> f64 {
    if x > 0.0 {
        x
    } else {
        x.exp_m1()
    }
}
