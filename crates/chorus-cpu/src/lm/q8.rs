//! int8 ConvRot weights on the CPU (`chorus_core::convrot`): the int8 product `linear_q8` and the
//! block Hadamard rotation `hadamard`, in f32.
//!
//! - `linear_q8` is batch-invariant like `rowdot.rs`: every output element is summed in one fixed
//!   order whatever the row count (16 lane accumulators over the full 16-wide blocks of `k`, each
//!   weight converted exactly to f32 and used in one fused multiply-add, a tree sum of the lanes,
//!   the leftover terms in order, then one multiply by the row's scale). Rows are taken up to
//!   [`ROW_BLOCK`] at a time so that each converted weight block serves several of them; the
//!   blocking never changes how one element is summed. Column tiles run in parallel.
//! - `hadamard` copies each row and transforms each block in place with
//!   `convrot::rotate_block`: the fixed radix-4 order, no reduction across rows.

use rayon::prelude::*;

use crate::simd::dispatch;
use crate::{check, math, CpuBackend};
use chorus_core::convrot::{check_group, rotate_block};
use chorus_core::lm_ops::{HadamardArgs, LinearQ8Args};
use chorus_core::{Error, Result};

/// Lanes per accumulator.
const LANES: usize = 16;
/// Most activation rows one micro-kernel call handles.
const ROW_BLOCK: usize = 4;
/// Weight bytes per column tile (kept in L2 and reused by every row block).
const TILE_BYTES: usize = 256 << 10;
/// Column tiles per pool thread at least (when the columns allow), for load balance.
const TILES_PER_THREAD: usize = 4;
/// Elements per rayon task of the rotation.
const GRAIN_ELEMS: usize = 16 * 1024;

/// An int8 weight `[rows, cols]` with one f32 scale per row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CpuQWeight {
    pub(crate) data: Vec<i8>,
    pub(crate) scales: Vec<f32>,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl CpuQWeight {
    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The int8 values, row-major.
    pub fn data(&self) -> &[i8] {
        &self.data
    }

    /// One scale per row.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }
}

pub(super) fn upload_q8(
    data: &[i8],
    scales: &[f32],
    rows: usize,
    cols: usize,
) -> Result<CpuQWeight> {
    const OP: &str = "upload_q8";
    if data.len() != rows * cols || scales.len() != rows {
        return Err(Error::Shape {
            op: OP,
            name: "int8 weight and scales".into(),
            expected: vec![rows * cols, rows],
            found: vec![data.len(), scales.len()],
        });
    }
    Ok(CpuQWeight {
        data: data.to_vec(),
        scales: scales.to_vec(),
        rows,
        cols,
    })
}

/// The `[n, m]` destination, shared by tasks that write disjoint column ranges.
#[derive(Clone, Copy)]
struct Dst {
    ptr: *mut f32,
    m: usize,
    /// Add to the existing output instead of overwriting it.
    accumulate: bool,
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
    unsafe fn store(self, i: usize, j: usize, v: f32) {
        // SAFETY: guaranteed by the caller.
        unsafe {
            let p = self.ptr.add(i * self.m + j);
            *p = if self.accumulate { *p + v } else { v };
        }
    }
}

/// One product's operands (lengths checked by the caller).
struct Q8Product<'a> {
    x: &'a [f32],
    q: &'a [i8],
    scales: &'a [f32],
    n: usize,
    k: usize,
}

pub(super) fn linear_q8(be: &CpuBackend, a: LinearQ8Args<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "linear_q8";
    let (n, k, m) = (a.n, a.k, a.m);
    if a.w.rows != m || a.w.cols != k {
        return Err(Error::Shape {
            op: OP,
            name: "w".into(),
            expected: vec![m, k],
            found: vec![a.w.rows, a.w.cols],
        });
    }
    check::at_least(OP, "x", a.x.len(), n * k)?;
    check::at_least(OP, "out", a.out.len(), n * m)?;
    if n == 0 || m == 0 {
        return Ok(());
    }
    let p = Q8Product {
        x: &a.x.0[..n * k],
        q: &a.w.data,
        scales: &a.w.scales,
        n,
        k,
    };
    let out = &mut a.out.0[..n * m];
    let d = Dst {
        ptr: out.as_mut_ptr(),
        m,
        accumulate: a.accumulate,
    };
    let cache_cols = TILE_BYTES / k.max(1);
    let balance_cols = m.div_ceil(be.threads.max(1) * TILES_PER_THREAD);
    let tile = cache_cols.min(balance_cols).max(1);
    let tiles = m.div_ceil(tile);
    let task = |t: usize| tile_task(&p, d, t * tile, ((t + 1) * tile).min(m));
    if be.threads > 1 && tiles > 1 {
        be.install(|| (0..tiles).into_par_iter().for_each(task));
    } else {
        (0..tiles).for_each(task);
    }
    Ok(())
}

dispatch! {
    /// Every row block of the column tile `[j0, j1)`.
    fn tile_task(p: &Q8Product<'_>, d: Dst, j0: usize, j1: usize) {
        for i0 in (0..p.n).step_by(ROW_BLOCK) {
            match p.n - i0 {
                1 => cols::<1>(p, d, i0, j0, j1),
                2 => cols::<2>(p, d, i0, j0, j1),
                3 => cols::<3>(p, d, i0, j0, j1),
                _ => cols::<ROW_BLOCK>(p, d, i0, j0, j1),
            }
        }
    }
}

/// Rows `[i0, i0 + R)` against the weight rows `[j0, j1)`, in the order of the module doc.
#[inline(always)]
fn cols<const R: usize>(p: &Q8Product<'_>, d: Dst, i0: usize, j0: usize, j1: usize) {
    let k = p.k;
    let x: [&[f32]; R] = std::array::from_fn(|r| &p.x[(i0 + r) * k..(i0 + r + 1) * k]);
    let body = k / LANES * LANES;
    for j in j0..j1 {
        let q = &p.q[j * k..(j + 1) * k];
        let mut acc = [[0f32; LANES]; R];
        let mut o = 0;
        while o < body {
            let mut wv = [0f32; LANES];
            for l in 0..LANES {
                wv[l] = f32::from(q[o + l]);
            }
            for r in 0..R {
                let xv = &x[r][o..o + LANES];
                for l in 0..LANES {
                    acc[r][l] = xv[l].mul_add(wv[l], acc[r][l]);
                }
            }
            o += LANES;
        }
        for r in 0..R {
            let mut v = math::hsum(acc[r]);
            for kk in body..k {
                v = x[r][kk].mul_add(f32::from(q[kk]), v);
            }
            // SAFETY: i0 + r < n and j < j1 <= m; this task owns the column tile holding j.
            unsafe { d.store(i0 + r, j, v * p.scales[j]) };
        }
    }
}

dispatch! {
    /// `o = x`, then each block of `group` in place.
    fn rotate_row(o: &mut [f32], x: &[f32], group: usize, stages: u32) {
        o.copy_from_slice(x);
        for b in o.chunks_exact_mut(group) {
            rotate_block(b, stages);
        }
    }
}

pub(super) fn hadamard(be: &CpuBackend, a: HadamardArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "hadamard";
    let (n, dim, group) = (a.n, a.dim, a.group);
    let stages = check_group(OP, group, dim)?;
    check::at_least(OP, "x", a.x.len(), n * dim)?;
    check::at_least(OP, "out", a.out.len(), n * dim)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let x = &a.x.0[..n * dim];
    let out = &mut a.out.0[..n * dim];
    let grain = (GRAIN_ELEMS / dim).max(1);
    be.install(|| {
        out.par_chunks_mut(dim)
            .zip(x.par_chunks(dim))
            .with_min_len(grain)
            .for_each(|(o, xr)| rotate_row(o, xr, group, stages));
    });
    Ok(())
}
