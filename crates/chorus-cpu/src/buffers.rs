//! Host buffer types of the CPU backend.

use chorus_core::StagingDims;

/// An f32 buffer: every role is stored as f32 on the CPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuBuf(pub(crate) Vec<f32>);

impl CpuBuf {
    /// The elements.
    pub fn as_slice(&self) -> &[f32] {
        &self.0
    }

    /// The elements, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.0
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// An i32 buffer (slot ids, codes, token counters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuInts(pub(crate) Vec<i32>);

impl CpuInts {
    /// The elements.
    pub fn as_slice(&self) -> &[i32] {
        &self.0
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One bucket's step I/O: plain host vectors (there is no device to copy to).
#[derive(Clone, Debug)]
pub struct CpuStaging {
    pub(crate) dims: StagingDims,
    pub(crate) slots: Vec<i32>,
    pub(crate) codes: Vec<i32>,
    pub(crate) latents: Vec<f32>,
    pub(crate) pcm: Vec<f32>,
}

impl CpuStaging {
    pub(crate) fn new(dims: StagingDims) -> Self {
        Self {
            dims,
            slots: vec![0; dims.rows],
            codes: vec![chorus_core::NO_CODE; dims.rows * dims.codebooks],
            latents: vec![0.0; dims.rows * dims.latent_dim],
            pcm: vec![0.0; dims.rows * dims.samples],
        }
    }

    /// The sizes this staging area was allocated with.
    pub fn dims(&self) -> StagingDims {
        self.dims
    }
}
