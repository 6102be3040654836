//! Bounds-checked matrix product through the `gemm` crate (runtime SIMD dispatch, arbitrary
//! strides), for the long convolutions; short ones and every `linear` use `rowdot.rs`.

use chorus_core::{Error, Result};
use gemm::Parallelism;

/// `dst[m, n] (+)= lhs[m, k] @ rhs[k, n]`, with explicit row/column strides; `dst` columns are
/// contiguous.
pub(crate) struct MatMul<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub dst: &'a mut [f32],
    pub dst_rs: usize,
    pub lhs: &'a [f32],
    pub lhs_rs: usize,
    pub lhs_cs: usize,
    pub rhs: &'a [f32],
    pub rhs_rs: usize,
    pub rhs_cs: usize,
    /// Add to the existing `dst` instead of overwriting it.
    pub accumulate: bool,
    /// Threads `gemm` may use from the current rayon pool (1: run on the calling thread).
    pub threads: usize,
}

fn span(rows: usize, rs: usize, cols: usize, cs: usize) -> usize {
    (rows - 1) * rs + (cols - 1) * cs + 1
}

fn oob(op: &'static str, what: &str, need: usize, len: usize) -> Error {
    Error::Backend {
        op,
        backend: "cpu",
        reason: format!("{what} needs {need} elements, buffer has {len}"),
    }
}

impl MatMul<'_> {
    /// Runs the product; `op` names the calling op in errors.
    pub(crate) fn run(self, op: &'static str) -> Result<()> {
        let (m, n, k) = (self.m, self.n, self.k);
        if m == 0 || n == 0 {
            return Ok(());
        }
        let dst_need = span(m, self.dst_rs, n, 1);
        if dst_need > self.dst.len() {
            return Err(oob(op, "gemm dst", dst_need, self.dst.len()));
        }
        if k == 0 {
            if !self.accumulate {
                for row in 0..m {
                    self.dst[row * self.dst_rs..row * self.dst_rs + n].fill(0.0);
                }
            }
            return Ok(());
        }
        let lhs_need = span(m, self.lhs_rs, k, self.lhs_cs);
        if lhs_need > self.lhs.len() {
            return Err(oob(op, "gemm lhs", lhs_need, self.lhs.len()));
        }
        let rhs_need = span(k, self.rhs_rs, n, self.rhs_cs);
        if rhs_need > self.rhs.len() {
            return Err(oob(op, "gemm rhs", rhs_need, self.rhs.len()));
        }
        let parallelism = if self.threads > 1 {
            Parallelism::Rayon(self.threads)
        } else {
            Parallelism::None
        };
        // SAFETY: the three spans were checked against the slice lengths above, so every element
        // gemm touches lies inside its slice; `dst` is exclusively borrowed and cannot alias the
        // shared `lhs`/`rhs` borrows.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                self.dst.as_mut_ptr(),
                1,
                self.dst_rs as isize,
                self.accumulate,
                self.lhs.as_ptr(),
                self.lhs_cs as isize,
                self.lhs_rs as isize,
                self.rhs.as_ptr(),
                self.rhs_cs as isize,
                self.rhs_rs as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
        Ok(())
    }
}
