//! Streaming kernels for products with very few lhs rows (batch-1 linears and convolutions).
//!
//! With `m <= SKINNY_MAX_M` rows the product is bound by reading the weights once; `gemm` would
//! pack (copy) the weights first, doubling the traffic. These kernels read each weight exactly once,
//! in contiguous runs, and split the output columns across the pool.

use crate::math;
use crate::simd::dispatch;
use rayon::prelude::*;

/// Most lhs rows the skinny kernels handle.
pub(crate) const SKINNY_MAX_M: usize = 4;
/// Output columns per task for the dot-product kernel.
const DOT_BLOCK: usize = 32;
/// Output columns per task for the row-axpy kernel (its accumulator tile lives on the stack).
const AXPY_BLOCK: usize = 512;

/// `dst[i, j] (+)= sum_kk lhs[i, kk] * w(kk, j)` for `i < m <= SKINNY_MAX_M`; `lhs` rows are
/// contiguous in `kk` with stride `lhs_rs`, `dst` rows contiguous in `j` with stride `dst_rs`.
pub(crate) struct Skinny<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lhs: &'a [f32],
    pub lhs_rs: usize,
    /// Weights: element `(kk, j)` at `j * w_stride + kk` (dots) or `kk * w_stride + j` (axpy).
    pub w: &'a [f32],
    pub w_stride: usize,
    pub accumulate: bool,
}

/// The destination, shared by tasks that write disjoint column ranges.
#[derive(Clone, Copy)]
struct Dst {
    ptr: *mut f32,
    rs: usize,
}
// SAFETY: tasks only write disjoint column ranges of the destination (see `store`).
unsafe impl Send for Dst {}
// SAFETY: as above; no task reads what another writes.
unsafe impl Sync for Dst {}

impl Dst {
    /// Stores `vals[i]` for row `i` at column `j`.
    ///
    /// # Safety
    /// `(i, j)` must lie inside the destination checked by the caller, and no other task may
    /// access column `j` concurrently.
    #[inline(always)]
    unsafe fn store(self, i: usize, j: usize, v: f32, accumulate: bool) {
        // SAFETY: guaranteed by the caller (bounds checked in `MatMul::run`, columns disjoint).
        unsafe {
            let p = self.ptr.add(i * self.rs + j);
            *p = if accumulate { *p + v } else { v };
        }
    }
}

impl Skinny<'_> {
    /// `w(kk, j) = w[j * w_stride + kk]`: one dot product per output element.
    pub(crate) fn run_dots(&self, dst: &mut [f32], dst_rs: usize, threads: usize) {
        let d = Dst {
            ptr: dst.as_mut_ptr(),
            rs: dst_rs,
        };
        let blocks = self.n.div_ceil(DOT_BLOCK);
        let task = |b: usize| {
            let j1 = ((b + 1) * DOT_BLOCK).min(self.n);
            dots_block(self, d, b * DOT_BLOCK, j1);
        };
        if threads > 1 {
            (0..blocks).into_par_iter().for_each(task);
        } else {
            (0..blocks).for_each(task);
        }
    }

    /// `w(kk, j) = w[kk * w_stride + j]`: rows of weights scaled and summed into a tile.
    pub(crate) fn run_axpy(&self, dst: &mut [f32], dst_rs: usize, threads: usize) {
        let d = Dst {
            ptr: dst.as_mut_ptr(),
            rs: dst_rs,
        };
        let blocks = self.n.div_ceil(AXPY_BLOCK);
        let task = |b: usize| {
            let j1 = ((b + 1) * AXPY_BLOCK).min(self.n);
            axpy_block(self, d, b * AXPY_BLOCK, j1);
        };
        if threads > 1 {
            (0..blocks).into_par_iter().for_each(task);
        } else {
            (0..blocks).for_each(task);
        }
    }
}

#[inline(always)]
fn dots<const M: usize>(s: &Skinny<'_>, d: Dst, j0: usize, j1: usize) {
    for j in j0..j1 {
        let w = &s.w[j * s.w_stride..j * s.w_stride + s.k];
        for i in 0..M {
            let v = math::dot(&s.lhs[i * s.lhs_rs..i * s.lhs_rs + s.k], w);
            // SAFETY: i < m and j < n lie in the checked destination; this task owns column j.
            unsafe { d.store(i, j, v, s.accumulate) };
        }
    }
}

dispatch! {
    fn dots_block(s: &Skinny<'_>, d: Dst, j0: usize, j1: usize) {
        match s.m {
            1 => dots::<1>(s, d, j0, j1),
            2 => dots::<2>(s, d, j0, j1),
            3 => dots::<3>(s, d, j0, j1),
            _ => dots::<4>(s, d, j0, j1),
        }
    }
}

#[inline(always)]
fn axpys<const M: usize>(s: &Skinny<'_>, d: Dst, j0: usize, j1: usize) {
    let nb = j1 - j0;
    let mut acc = [[0.0_f32; AXPY_BLOCK]; M];
    for kk in 0..s.k {
        let w = &s.w[kk * s.w_stride + j0..kk * s.w_stride + j1];
        for (i, a) in acc.iter_mut().enumerate() {
            let xv = s.lhs[i * s.lhs_rs + kk];
            for (av, &wv) in a[..nb].iter_mut().zip(w) {
                *av += xv * wv;
            }
        }
    }
    for (i, a) in acc.iter().enumerate() {
        for (jj, &v) in a[..nb].iter().enumerate() {
            // SAFETY: i < m and j0 + jj < n lie in the checked destination; this task owns them.
            unsafe { d.store(i, j0 + jj, v, s.accumulate) };
        }
    }
}

dispatch! {
    fn axpy_block(s: &Skinny<'_>, d: Dst, j0: usize, j1: usize) {
        match s.m {
            1 => axpys::<1>(s, d, j0, j1),
            2 => axpys::<2>(s, d, j0, j1),
            3 => axpys::<3>(s, d, j0, j1),
            _ => axpys::<4>(s, d, j0, j1),
        }
    }
}
