//! Host buffer types of the CPU backend.

use chorus_core::StagingDims;

use std::sync::OnceLock;

/// An f32 buffer: every role is stored as f32 on the CPU.
#[derive(Clone, Debug, Default)]
pub struct CpuBuf(
    pub(crate) Vec<f32>,
    pub(crate) OnceLock<Padded>,
    pub(crate) OnceLock<PairSum>,
);

/// Equality of contents; a cached padded copy is a derived layout, not part of the value.
impl PartialEq for CpuBuf {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

/// A derived copy of a weight matrix, made on first use: either its rows padded (for an op that
/// reads the matrix with a power-of-two row stride, which aliases in the caches and costs `gemm`
/// 3x) or its transpose (for the row-invariant product of `rowdot.rs`, which reads rows of `k`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Padded {
    pub rows: usize,
    pub cols: usize,
    /// Row stride of `data` (`cols + ROW_PAD` padded, `rows` transposed).
    pub stride: usize,
    /// `data` holds the `[cols, rows]` transpose instead of padded rows.
    pub transposed: bool,
    pub data: Vec<f32>,
}

/// A `[outer, 2, inner]` weight's two taps summed, `[outer, inner]` with row stride `stride`
/// (made on first use, for `pairs.rs`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PairSum {
    pub outer: usize,
    pub inner: usize,
    pub stride: usize,
    pub data: Vec<f32>,
}

/// Floats added to each padded row: one cache line, which moves consecutive rows to new sets.
const ROW_PAD: usize = 16;

impl CpuBuf {
    pub(crate) fn new(data: Vec<f32>) -> Self {
        Self(data, OnceLock::new(), OnceLock::new())
    }

    /// The buffer as `[outer, 2, inner]` with its middle axis summed (copied once, then cached),
    /// or `None` if it was first summed for another shape or is too short.
    pub(crate) fn pair_sum(&self, outer: usize, inner: usize) -> Option<&PairSum> {
        if self.0.len() < outer * 2 * inner {
            return None;
        }
        let p = self.2.get_or_init(|| {
            // Padded like `padded`'s rows: Mimi's widths are powers of two.
            let stride = inner + ROW_PAD;
            let mut data = vec![0.0; outer * stride];
            for (d, s) in data
                .chunks_exact_mut(stride)
                .zip(self.0.chunks_exact(2 * inner))
            {
                let (a, b) = s.split_at(inner);
                for ((d, &a), &b) in d.iter_mut().zip(a).zip(b) {
                    *d = a + b;
                }
            }
            PairSum {
                outer,
                inner,
                stride,
                data,
            }
        });
        (p.outer == outer && p.inner == inner).then_some(p)
    }

    /// The buffer as a `[rows, cols]` matrix with padded row stride (copied once, then cached),
    /// or `None` if it was first padded for another shape.
    pub(crate) fn padded(&self, rows: usize, cols: usize) -> Option<&Padded> {
        let p = self.1.get_or_init(|| {
            let stride = cols + ROW_PAD;
            let mut data = vec![0.0; rows * stride];
            for (d, s) in data.chunks_exact_mut(stride).zip(self.0.chunks_exact(cols)) {
                d[..cols].copy_from_slice(s);
            }
            Padded {
                rows,
                cols,
                stride,
                transposed: false,
                data,
            }
        });
        (p.rows == rows && p.cols == cols && !p.transposed).then_some(p)
    }

    /// The buffer as a `[rows, cols]` matrix, transposed to `[cols, rows]` (copied once, then
    /// cached), or `None` if it was first derived for another shape or layout.
    pub(crate) fn transposed(&self, rows: usize, cols: usize) -> Option<&Padded> {
        let p = self.1.get_or_init(|| {
            let mut data = vec![0.0; rows * cols];
            for (r, s) in self.0.chunks_exact(cols).take(rows).enumerate() {
                for (c, &v) in s.iter().enumerate() {
                    data[c * rows + r] = v;
                }
            }
            Padded {
                rows,
                cols,
                stride: rows,
                transposed: true,
                data,
            }
        });
        (p.rows == rows && p.cols == cols && p.transposed).then_some(p)
    }

    /// The elements.
    pub fn as_slice(&self) -> &[f32] {
        &self.0
    }

    /// The elements, mutably (drops any cached padded copy, which could go stale).
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        self.1 = OnceLock::new();
        self.2 = OnceLock::new();
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
