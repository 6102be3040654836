//! Helpers of the CUDA parity tests: device discovery (tests skip without a GPU), a
//! deterministic generator, the error metric and the per-precision tolerances.
#![allow(dead_code)]

use chorus_core::{Backend, BufRole, Precision, Result};
use chorus_cpu::CpuBackend;
use chorus_cuda::{CudaBackend, CudaOptions};

/// Relative L2 bound against the CPU backend, by precision.
pub fn tolerance(p: Precision) -> f64 {
    match p {
        Precision::F32 => 1e-4,
        Precision::Bf16 => 2e-2,
    }
}

/// Both precisions, validation mode first.
pub const PRECISIONS: [Precision; 2] = [Precision::F32, Precision::Bf16];

/// A CUDA backend, or `None` (with a note) when this machine has no usable device.
pub fn cuda(precision: Precision) -> Option<CudaBackend> {
    cuda_with(CudaOptions {
        precision,
        ..Default::default()
    })
}

/// As [`cuda`], with the wide tensor-core convolution (and the phase-form upsampling) on.
pub fn cuda_wide(precision: Precision) -> Option<CudaBackend> {
    cuda_with(CudaOptions {
        precision,
        conv_wide: true,
        ..Default::default()
    })
}

/// As [`cuda`], with attention on the CUDA cores even where the tensor-core kernel applies.
pub fn cuda_scalar_attention(precision: Precision) -> Option<CudaBackend> {
    cuda_with(CudaOptions {
        precision,
        attention_mma: false,
        ..Default::default()
    })
}

/// A CUDA backend with `opts`, or `None` (with a note) when this machine has no usable device.
pub fn cuda_with(opts: CudaOptions) -> Option<CudaBackend> {
    if !chorus_cuda::cuda_available() {
        eprintln!("skipped: no CUDA device on this machine");
        return None;
    }
    Some(CudaBackend::new(opts).unwrap_or_else(|e| panic!("CudaBackend::new: {e}")))
}

pub fn cpu() -> CpuBackend {
    CpuBackend::new(Some(2)).expect("cpu backend")
}

/// SplitMix64.
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

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `||got - want|| / ||want||`, after checking that the comparison can fail.
pub fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    assert!(got.iter().all(|g| g.is_finite()), "non-finite output");
    assert!(
        want.iter().any(|&w| w != 0.0),
        "the reference is all zeros: the test would prove nothing"
    );
    chorus_mimi::oracle::rel_l2(got, want)
}

/// Asserts parity and prints the error, so that the device log records every figure.
pub fn assert_parity(what: &str, precision: Precision, got: &[f32], want: &[f32]) {
    let err = rel_l2(got, want);
    let tol = tolerance(precision);
    eprintln!(
        "parity {what} [{}]: rel L2 {err:.3e} (tolerance {tol:.0e})",
        precision.name()
    );
    assert!(
        err <= tol,
        "{what} [{}]: relative L2 error {err:e} > {tol:e}",
        precision.name()
    );
}

/// Drops the dummy row (the last of `rows` rows of `row_len`): padded entries race on it.
pub fn without_dummy(v: &[f32], row_len: usize) -> Vec<f32> {
    v[..v.len() - row_len].to_vec()
}

pub fn up<B: Backend>(be: &B, data: &[f32], role: BufRole) -> Result<B::Buf> {
    be.upload(data, role)
}
