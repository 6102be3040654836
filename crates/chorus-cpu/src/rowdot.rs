//! Batch-invariant product `out[i, j] = sum_kk x[i, kk] * w[j, kk]` (both operands contiguous in
//! `kk`), used by `linear`.
//!
//! Every output element is summed in one fixed order, whatever the number of rows: 16 lane
//! accumulators over the full 16-wide blocks of `kk` (one fused multiply-add per term), a tree sum
//! of the lanes, then the leftover terms in order. Rows are processed in chunks of up to
//! [`ROW_BLOCK`] and columns in groups of [`COL_BLOCK`]; the blocking only decides which elements
//! share loads, never how one element is summed, so a row's result is the same bit for bit in a
//! batch of 1 or of 64 (a decode stream's output then does not depend on its batch bucket). A
//! call takes up to 8 rows against [`cols_per_call`] columns: with many rows each weight load
//! feeds 8 rows (the weights stream from L2), with few rows more columns keep 8 or more
//! accumulators in flight.
//!
//! Columns are split into tiles of about [`TILE_ELEMS`] weights (kept in L2 and reused by every row
//! chunk); tiles run in parallel across the pool.

use crate::math;
use crate::simd::dispatch;
use rayon::prelude::*;

/// Lanes per accumulator (one AVX-512 register).
const LANES: usize = 16;
/// Most lhs rows one micro-kernel call handles.
const ROW_BLOCK: usize = 8;
/// Column tiles are whole multiples of this many columns.
const COL_BLOCK: usize = 24;

/// Output columns one micro-kernel call handles for `r` rows: `r * c` accumulators, `c` weight
/// vectors and one activation vector within AVX-512's 32 registers, and at least 8 accumulators
/// (two FMA ports of four cycles' latency).
const fn cols_per_call(r: usize) -> usize {
    match r {
        1 | 2 => 8,
        3 | 4 => 6,
        5 | 6 => 4,
        _ => 3,
    }
}
/// Weights per column tile: 256 KiB of f32, well inside L2, reused across all row chunks.
const TILE_ELEMS: usize = 64 << 10;
/// Column tiles per pool thread at least (when the columns allow), for load balance.
const TILES_PER_THREAD: usize = 4;

/// One product; the caller has checked `x.len() >= (n - 1) * x_rs + k`, `w.len() >= m * k`,
/// `out.len() >= n * m`.
pub(crate) struct RowDot<'a> {
    pub n: usize,
    pub m: usize,
    pub k: usize,
    /// Row `i` of the lhs is `x[i * x_rs..i * x_rs + k]`.
    pub x: &'a [f32],
    pub x_rs: usize,
    /// Row `j` of the weights is `w[j * k..(j + 1) * k]`.
    pub w: &'a [f32],
    /// Add to the existing output instead of overwriting it.
    pub accumulate: bool,
    /// Threads from the current rayon pool (1: run on the calling thread).
    pub threads: usize,
}

/// The destination `[n, m]`, shared by tasks that write disjoint column ranges.
#[derive(Clone, Copy)]
struct Dst {
    ptr: *mut f32,
    m: usize,
}
// SAFETY: tasks only write disjoint column ranges of the destination (see `store`).
unsafe impl Send for Dst {}
// SAFETY: as above; no task reads what another writes.
unsafe impl Sync for Dst {}

impl Dst {
    /// # Safety
    /// `(i, j)` must lie inside the `[n, m]` destination, and no other task may access column `j`
    /// concurrently.
    #[inline(always)]
    unsafe fn store(self, i: usize, j: usize, v: f32, accumulate: bool) {
        // SAFETY: guaranteed by the caller.
        unsafe {
            let p = self.ptr.add(i * self.m + j);
            *p = if accumulate { *p + v } else { v };
        }
    }
}

impl RowDot<'_> {
    /// Writes the product into `out[..n * m]`.
    pub(crate) fn run(&self, out: &mut [f32]) {
        let (n, m, k) = (self.n, self.m, self.k);
        if n == 0 || m == 0 {
            return;
        }
        let out = &mut out[..n * m];
        let d = Dst {
            ptr: out.as_mut_ptr(),
            m,
        };
        // Cache-sized tiles, but enough of them to keep every thread busy.
        let cache_cols = TILE_ELEMS / k.max(1);
        let balance_cols = m.div_ceil(self.threads.max(1) * TILES_PER_THREAD);
        let tile = cache_cols.min(balance_cols).max(1).div_ceil(COL_BLOCK) * COL_BLOCK;
        let tiles = m.div_ceil(tile);
        let task = |t: usize| {
            let j1 = ((t + 1) * tile).min(m);
            tile_task(self, d, t * tile, j1);
        };
        if self.threads > 1 && tiles > 1 {
            (0..tiles).into_par_iter().for_each(task);
        } else {
            (0..tiles).for_each(task);
        }
    }
}

/// Every chunk of `ROW_BLOCK` rows (the last one shorter) of a column tile, each through the `cols`
/// in scope with its row count's columns per call: the portable and the AVX-512 kernels share it.
macro_rules! row_chunks {
    ($p:expr, $d:expr, $j0:expr, $j1:expr) => {
        for i0 in (0..$p.n).step_by(ROW_BLOCK) {
            match $p.n - i0 {
                1 => cols::<1, { cols_per_call(1) }>($p, $d, i0, $j0, $j1),
                2 => cols::<2, { cols_per_call(2) }>($p, $d, i0, $j0, $j1),
                3 => cols::<3, { cols_per_call(3) }>($p, $d, i0, $j0, $j1),
                4 => cols::<4, { cols_per_call(4) }>($p, $d, i0, $j0, $j1),
                5 => cols::<5, { cols_per_call(5) }>($p, $d, i0, $j0, $j1),
                6 => cols::<6, { cols_per_call(6) }>($p, $d, i0, $j0, $j1),
                7 => cols::<7, { cols_per_call(7) }>($p, $d, i0, $j0, $j1),
                _ => cols::<ROW_BLOCK, { cols_per_call(ROW_BLOCK) }>($p, $d, i0, $j0, $j1),
            }
        }
    };
}

/// Every row chunk of one column tile `[j0, j1)`.
fn tile_task(p: &RowDot<'_>, d: Dst, j0: usize, j1: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above), which implies FMA.
            return unsafe { avx512::tile_task(p, d, j0, j1) };
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            return unsafe { avx2::tile_task(p, d, j0, j1) };
        }
    }
    portable_tile_task(p, d, j0, j1);
}

dispatch! {
    fn portable_tile_task(p: &RowDot<'_>, d: Dst, j0: usize, j1: usize) {
        row_chunks!(p, d, j0, j1);
    }
}

/// Defines `cols` (rows `[i0, i0 + R)` against columns `[j0, j1)`, `C` columns a call of the
/// `micro` in scope) with the given attributes: the portable, AVX-512 and AVX2 kernels share it.
macro_rules! cols_fn {
    ($(#[$attr:meta])*) => {
        $(#[$attr])*
        fn cols<const R: usize, const C: usize>(
            p: &RowDot<'_>,
            d: Dst,
            i0: usize,
            j0: usize,
            j1: usize,
        ) {
            let k = p.k;
            let x: [&[f32]; R] =
                std::array::from_fn(|r| &p.x[(i0 + r) * p.x_rs..(i0 + r) * p.x_rs + k]);
            let mut j = j0;
            while j + C <= j1 {
                micro::<R, C>(&x, p, d, i0, j);
                j += C;
            }
            while j < j1 {
                micro::<R, 1>(&x, p, d, i0, j);
                j += 1;
            }
        }
    };
}

cols_fn!(#[inline(always)]);

/// `R x C` outputs at `(i0.., j0..)`; the per-element order is the one the module doc fixes.
#[inline(always)]
fn micro<const R: usize, const C: usize>(
    x: &[&[f32]; R],
    p: &RowDot<'_>,
    d: Dst,
    i0: usize,
    j0: usize,
) {
    let (k, w, accumulate) = (p.k, p.w, p.accumulate);
    let wr: [&[f32]; C] = std::array::from_fn(|c| &w[(j0 + c) * k..(j0 + c + 1) * k]);
    let body = k / LANES * LANES;
    let mut acc = [[[0.0_f32; LANES]; C]; R];
    let mut o = 0;
    while o < body {
        for r in 0..R {
            let xv = &x[r][o..o + LANES];
            for c in 0..C {
                let wv = &wr[c][o..o + LANES];
                for l in 0..LANES {
                    acc[r][c][l] = xv[l].mul_add(wv[l], acc[r][c][l]);
                }
            }
        }
        o += LANES;
    }
    for r in 0..R {
        for c in 0..C {
            let mut v = math::hsum(acc[r][c]);
            for kk in body..k {
                v = x[r][kk].mul_add(wr[c][kk], v);
            }
            // SAFETY: i0 + r < n and j0 + c < m (the callers' loops stay in range); this task
            // owns the column tile holding j0 + c.
            unsafe { d.store(i0 + r, j0 + c, v, accumulate) };
        }
    }
}

/// The same arithmetic as `micro` in explicit AVX-512 (LLVM does not keep the portable version's
/// 16 accumulator arrays in registers).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{cols_per_call, Dst, RowDot, LANES, ROW_BLOCK};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn tile_task(p: &RowDot<'_>, d: Dst, j0: usize, j1: usize) {
        row_chunks!(p, d, j0, j1);
    }

    cols_fn!(#[target_feature(enable = "avx512f,fma")] #[inline]);

    #[target_feature(enable = "avx512f,fma")]
    #[inline]
    fn micro<const R: usize, const C: usize>(
        x: &[&[f32]; R],
        p: &RowDot<'_>,
        d: Dst,
        i0: usize,
        j0: usize,
    ) {
        let (k, w, accumulate) = (p.k, p.w, p.accumulate);
        let wr: [&[f32]; C] = std::array::from_fn(|c| &w[(j0 + c) * k..(j0 + c + 1) * k]);
        let body = k / LANES * LANES;
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let mut o = 0;
        while o < body {
            // SAFETY: o + LANES <= body <= k, the length of every row slice in `wr` and `x`.
            let wv: [__m512; C] =
                std::array::from_fn(|c| unsafe { _mm512_loadu_ps(wr[c].as_ptr().add(o)) });
            for r in 0..R {
                // SAFETY: as above.
                let xv = unsafe { _mm512_loadu_ps(x[r].as_ptr().add(o)) };
                for c in 0..C {
                    acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
                }
            }
            o += LANES;
        }
        for r in 0..R {
            for c in 0..C {
                let mut v = hsum(acc[r][c]);
                for kk in body..k {
                    v = x[r][kk].mul_add(wr[c][kk], v);
                }
                // SAFETY: i0 + r < n and j0 + c < m (the callers' loops stay in range); this task
                // owns the column tile holding j0 + c.
                unsafe { d.store(i0 + r, j0 + c, v, accumulate) };
            }
        }
    }

    /// `math::hsum`'s tree (lane l plus lane l + 8, then + 4, + 2, + 1) in vector steps.
    #[target_feature(enable = "avx512f,fma")]
    #[inline]
    fn hsum(v: __m512) -> f32 {
        let lo = _mm512_castps512_ps256(v);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
        let s8 = _mm256_add_ps(lo, hi);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
        _mm_cvtss_f32(s1)
    }
}

/// The same arithmetic as `micro` in explicit AVX2: a 16-lane accumulator is two 8-lane registers
/// (lanes 0-7 and 8-15), so the per-element order and bits match the AVX-512 and portable kernels.
/// AVX2 has 16 registers, half AVX-512's 32, so a call holds fewer rows and columns.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Dst, RowDot, LANES};
    use std::arch::x86_64::*;

    /// Most lhs rows one call handles: three rows of two columns are 12 accumulator registers
    /// for 10 loads per 12 multiply-adds (six rows of one column took 14, and ran 30% slower on
    /// the whole-file chunk's 64-row linears: the loads, not the multiply-adds, bound the loop).
    const ROWS: usize = 3;

    /// Columns per call for `r` rows: at most 12 of the 16 registers hold accumulators (two per
    /// output), the rest the activation or weight vectors in flight.
    const fn cols_per_call(r: usize) -> usize {
        match r {
            1 => 6,
            2 => 3,
            _ => 2,
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn tile_task(p: &RowDot<'_>, d: Dst, j0: usize, j1: usize) {
        for i0 in (0..p.n).step_by(ROWS) {
            match p.n - i0 {
                1 => cols::<1, { cols_per_call(1) }>(p, d, i0, j0, j1),
                2 => cols::<2, { cols_per_call(2) }>(p, d, i0, j0, j1),
                _ => cols::<ROWS, { cols_per_call(ROWS) }>(p, d, i0, j0, j1),
            }
        }
    }

    cols_fn!(#[target_feature(enable = "avx2,fma")] #[inline]);

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn micro<const R: usize, const C: usize>(
        x: &[&[f32]; R],
        p: &RowDot<'_>,
        d: Dst,
        i0: usize,
        j0: usize,
    ) {
        let (k, w, accumulate) = (p.k, p.w, p.accumulate);
        let wr: [&[f32]; C] = std::array::from_fn(|c| &w[(j0 + c) * k..(j0 + c + 1) * k]);
        let body = k / LANES * LANES;
        let mut lo = [[_mm256_setzero_ps(); C]; R];
        let mut hi = [[_mm256_setzero_ps(); C]; R];
        let mut o = 0;
        while o < body {
            for r in 0..R {
                // SAFETY: o + LANES <= body <= k, the length of every row slice in `wr` and `x`.
                let (xl, xh) = unsafe {
                    let px = x[r].as_ptr().add(o);
                    (_mm256_loadu_ps(px), _mm256_loadu_ps(px.add(8)))
                };
                for c in 0..C {
                    // SAFETY: as above.
                    let (wl, wh) = unsafe {
                        let pw = wr[c].as_ptr().add(o);
                        (_mm256_loadu_ps(pw), _mm256_loadu_ps(pw.add(8)))
                    };
                    lo[r][c] = _mm256_fmadd_ps(xl, wl, lo[r][c]);
                    hi[r][c] = _mm256_fmadd_ps(xh, wh, hi[r][c]);
                }
            }
            o += LANES;
        }
        for r in 0..R {
            for c in 0..C {
                let mut v = hsum(lo[r][c], hi[r][c]);
                for kk in body..k {
                    v = x[r][kk].mul_add(wr[c][kk], v);
                }
                // SAFETY: i0 + r < n and j0 + c < m (the callers' loops stay in range); this task
                // owns the column tile holding j0 + c.
                unsafe { d.store(i0 + r, j0 + c, v, accumulate) };
            }
        }
    }

    /// `math::hsum`'s tree over lanes 0-7 (`lo`) and 8-15 (`hi`): lane l plus lane l + 8 first.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn hsum(lo: __m256, hi: __m256) -> f32 {
        let s8 = _mm256_add_ps(lo, hi);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
        _mm_cvtss_f32(s1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one whole product through `tile` on a fresh output.
    fn product(p: &RowDot<'_>, tile: fn(&RowDot<'_>, Dst, usize, usize)) -> Vec<f32> {
        let mut out = vec![f32::NAN; p.n * p.m];
        let d = Dst {
            ptr: out.as_mut_ptr(),
            m: p.m,
        };
        tile(p, d, 0, p.m);
        out
    }

    /// Deterministic values in about [-0.8, 0.9].
    fn gen(len: usize, mul: u32, seed: u32) -> Vec<f32> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(mul).wrapping_add(seed) >> 8) as f32 / 1e7 - 0.8)
            .collect()
    }

    /// The `[n, m]` product of `n` rows of `x` (rows `k` apart) and `w` on one thread.
    fn dot<'a>(x: &'a [f32], w: &'a [f32], n: usize, m: usize, k: usize) -> RowDot<'a> {
        RowDot {
            n,
            m,
            k,
            x,
            x_rs: k,
            w,
            accumulate: false,
            threads: 1,
        }
    }

    type Tile = fn(&RowDot<'_>, Dst, usize, usize);

    /// The AVX2 kernel, named so that it is tested on AVX-512 machines too (where `tile_task`
    /// takes the AVX-512 one); `None` without AVX2 and FMA.
    fn avx2_kernel() -> Option<Tile> {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            fn run(p: &RowDot<'_>, d: Dst, j0: usize, j1: usize) {
                // SAFETY: only returned after the CPU was found to support AVX2 and FMA.
                unsafe { avx2::tile_task(p, d, j0, j1) }
            }
            return Some(run);
        }
        None
    }

    /// Every kernel this CPU can run: the dispatched one, the portable one and AVX2's.
    fn kernels() -> Vec<Tile> {
        let mut all: Vec<Tile> = vec![tile_task, portable_tile_task];
        all.extend(avx2_kernel());
        all
    }

    #[test]
    fn a_rows_bits_do_not_depend_on_how_many_rows_share_the_call() {
        // Every row count 1..=17 takes each row tail (1 to 7 rows, AVX2's 1 to 5) and its column count; m leaves
        // a partial group of every width and k a partial 16-lane block.
        let (m, k) = (53, 83);
        let (x, w) = (gen(17 * k, 2_246_822_519, 3), gen(m * k, 2_246_822_519, 4));
        for tile in kernels() {
            let alone: Vec<Vec<f32>> = (0..17)
                .map(|i| product(&dot(&x[i * k..(i + 1) * k], &w, 1, m, k), tile))
                .collect();
            for n in 1..=17 {
                let out = product(&dot(&x, &w, n, m, k), tile);
                for (i, row) in out.chunks_exact(m).enumerate() {
                    assert!(
                        row.iter()
                            .zip(&alone[i])
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "row {i} among {n} rows differs from the row alone"
                    );
                }
            }
        }
    }

    #[test]
    fn portable_and_dispatched_kernels_agree_bit_for_bit() {
        // k leaves a partial 16-lane block and m a partial column group, so every path runs.
        let (n, m, k) = (7, 11, 83);
        let (x, w) = (gen(n * k, 2_654_435_761, 1), gen(m * k, 2_654_435_761, 2));
        let p = dot(&x, &w, n, m, k);
        let fast = product(&p, tile_task);
        let portable = product(&p, portable_tile_task);
        assert!(fast.iter().all(|v| v.is_finite()));
        assert!(fast == portable, "dispatched and portable kernels differ");
        if let Some(avx2) = avx2_kernel() {
            assert!(
                product(&p, avx2) == portable,
                "AVX2 and portable kernels differ"
            );
        }
        let want: Vec<f32> = (0..n * m)
            .map(|e| {
                let (i, j) = (e / m, e % m);
                (0..k)
                    .map(|kk| x[i * k + kk] as f64 * w[j * k + kk] as f64)
                    .sum::<f64>() as f32
            })
            .collect();
        for (g, w) in fast.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
        }
    }
}
