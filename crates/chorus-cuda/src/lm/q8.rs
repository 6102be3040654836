//! int8 ConvRot weights (kernels/lm_q8.cu): the int8 product `linear_q8` (the GEMV kernel for at
//! most [`Q8_GEMV_MAX_ROWS`] rows and `k` a multiple of 16; otherwise the rows dequantized into
//! scratch and one cuBLAS product) and the block Hadamard rotation `hadamard` of activations. Each
//! op checks its buffers (O(1)) and launches without allocating (scratch grows only outside a
//! capture) or syncing, so a frame program captures it.

use chorus_core::convrot::check_group;
use chorus_core::lm_ops::{HadamardArgs, LinearQ8Args};
use chorus_core::Result;

use super::check_len;
use crate::backend::{CudaBackend, CudaBuf};
use crate::blas::Gemm;
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};
use crate::memory::DevMem;

/// Most activation rows the int8 GEMV kernel takes. On the H200 (`tests/lm_q8.rs`) it streams
/// 1.9 TB/s of int8 at 2 rows (the weights per second of the bf16 GEMV), 1.3 TB/s at 4, and falls
/// as the rows' FMAs and loads grow (0.7 TB/s at 8); more rows go through dequantization + cuBLAS.
const Q8_GEMV_MAX_ROWS: usize = 4;
/// Warps per block of the GEMV kernel.
const Q8_GEMV_WARPS: u32 = 8;
/// Int8 weights per 16-byte load (`Q8_VEC`).
const Q8_VEC: usize = 16;
/// Most threads of one rotation block (a quarter of the group each do a butterfly).
const HADAMARD_MAX_THREADS: usize = 256;
/// Threads of the norm + rotation kernel (`Q8_NORM_THREADS`): the row's sum of squares is theirs.
const NORM_ROTATION_THREADS: u32 = 256;

/// The offset of the device's int8 bytes: `b` is stored as `b + 128` (`b ^ 0x80`).
const Q8_BIAS: u8 = 0x80;

/// An int8 weight `[rows, cols]` (biased by [`Q8_BIAS`]) and its `[rows]` f32 scales on the
/// device.
pub struct CudaQWeight {
    pub(crate) q: DevMem,
    pub(crate) scales: DevMem,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl CudaQWeight {
    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// `v` as a kernel `int`.
fn int(op: &'static str, name: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| cuda_error(op, format!("`{name}` = {v} exceeds the i32 range")))
}

use super::t_ptr;

pub(super) fn upload_q8(
    be: &CudaBackend,
    data: &[i8],
    scales: &[f32],
    rows: usize,
    cols: usize,
) -> Result<CudaQWeight> {
    const OP: &str = "upload_q8";
    if data.len() != rows * cols || scales.len() != rows {
        return Err(cuda_error(
            OP,
            format!(
                "{} int8 values and {} scales for a [{rows}, {cols}] weight",
                data.len(),
                scales.len()
            ),
        ));
    }
    // Each int8 b is held as the byte b + 128, so the kernels' conversions need no sign flip
    // (kernels/lm_q8.cu): transformed here, once, at load time.
    let biased: Vec<u8> = data.iter().map(|&b| (b as u8) ^ Q8_BIAS).collect();
    let q = be.alloc(data.len(), false)?;
    let s = be.alloc(scales.len() * 4, false)?;
    be.copy_htod(q.ptr(), biased.as_ptr(), biased.len())?;
    be.copy_htod(s.ptr(), scales.as_ptr() as *const u8, scales.len() * 4)?;
    // The host slices are pageable and borrowed: wait for the copies before returning.
    be.sync()?;
    Ok(CudaQWeight {
        q,
        scales: s,
        rows,
        cols,
    })
}

pub(super) fn linear_q8(be: &CudaBackend, a: LinearQ8Args<'_, CudaBackend>) -> Result<()> {
    const OP: &str = "linear_q8";
    let _timer = be.op_timer(OP);
    let (n, k, m) = (a.n, a.k, a.m);
    if a.w.rows != m || a.w.cols != k {
        return Err(cuda_error(
            OP,
            format!(
                "`w` is [{}, {}] but the product needs [{m}, {k}]",
                a.w.rows, a.w.cols
            ),
        ));
    }
    check_len(OP, "x", a.x.len, n * k)?;
    check_len(OP, "out", a.out.len, n * m)?;
    if n == 0 || m == 0 {
        return Ok(());
    }
    let x = t_ptr(be, OP, "x", a.x)?;
    let out = t_ptr(be, OP, "out", a.out)?;
    let (w, s) = (a.w.q.ptr(), a.w.scales.ptr());
    let (n32, k32, m32) = (int(OP, "n", n)?, int(OP, "k", k)?, int(OP, "m", m)?);
    let acc = i32::from(a.accumulate);
    if n <= Q8_GEMV_MAX_ROWS && k.is_multiple_of(Q8_VEC) {
        let tile: i32 = if n <= 2 { 2 } else { 4 };
        let cfg = Launch {
            grid: m.div_ceil(Q8_GEMV_WARPS as usize) as u32,
            block: 32 * Q8_GEMV_WARPS,
            smem: 0,
        };
        return be.launch(
            Kernel::LmGemvQ8,
            cfg,
            &mut kargs![&x, &w, &s, &out, &n32, &k32, &m32, &tile, &acc],
        );
    }
    // More rows: the int8 rows times their scales (already in the rotated basis of `x`) into
    // scratch in the storage type, then one cuBLAS product.
    let deq = be.scratch(m * k * be.esize())?;
    let vec = i32::from(k.is_multiple_of(Q8_VEC));
    be.launch(
        Kernel::LmDequantQ8,
        be.grid_for(if vec == 1 { m * k / Q8_VEC } else { m * k })?,
        &mut kargs![&w, &s, &deq, &m32, &k32, &vec],
    )?;
    be.blas.gemm(Gemm {
        trans_a: true,
        trans_b: false,
        m,
        n,
        k,
        a: deq,
        lda: k,
        b: x,
        ldb: k,
        c: out,
        ldc: m,
        beta: if a.accumulate { 1.0 } else { 0.0 },
    })
}

pub(super) fn hadamard(be: &CudaBackend, a: HadamardArgs<'_, CudaBackend>) -> Result<()> {
    rotate_rows(be, "hadamard", a, None, RotationOut::Storage)
}

/// What a rotation stores: the storage type, or f16 bits for the skinny kernel's int8 products
/// (finite values past the f16 range saturate to +-65504).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum RotationOut {
    Storage,
    F16,
}

/// The rotation of `a.x` as f16 bits (see [`RotationOut::F16`]).
pub(super) fn hadamard_f16(be: &CudaBackend, a: HadamardArgs<'_, CudaBackend>) -> Result<()> {
    rotate_rows(be, "fused_linear", a, None, RotationOut::F16)
}

/// The RMSNorm of `a.x` by `weight` (as `rms_norm_rows`), then its rotation as f16 bits, in one
/// launch.
pub(super) fn norm_hadamard_f16(
    be: &CudaBackend,
    a: HadamardArgs<'_, CudaBackend>,
    weight: &CudaBuf,
    eps: f32,
) -> Result<()> {
    rotate_rows(be, "fused_linear", a, Some((weight, eps)), RotationOut::F16)
}

/// `lm_hadamard`, or `lm_norm_hadamard` with a norm's weight and epsilon.
fn rotate_rows(
    be: &CudaBackend,
    op: &'static str,
    a: HadamardArgs<'_, CudaBackend>,
    norm: Option<(&CudaBuf, f32)>,
    store: RotationOut,
) -> Result<()> {
    let _timer = be.op_timer(if norm.is_some() {
        "norm_hadamard"
    } else {
        "hadamard"
    });
    let (n, dim, group) = (a.n, a.dim, a.group);
    let stages = check_group(op, group, dim)?;
    check_len(op, "x", a.x.len, n * dim)?;
    check_len(op, "out", a.out.len, n * dim)?;
    if n == 0 || dim == 0 {
        return Ok(());
    }
    let x = t_ptr(be, op, "x", a.x)?;
    let out = t_ptr(be, op, "out", a.out)?;
    if x == out {
        return Err(cuda_error(op, "`out` aliases `x`"));
    }
    let blocks = int(op, "blocks", n * (dim / group))?;
    let rotation_threads = (group / 4).next_multiple_of(32).min(HADAMARD_MAX_THREADS) as u32;
    let cfg = Launch {
        grid: blocks as u32,
        block: if norm.is_some() {
            NORM_ROTATION_THREADS
        } else {
            rotation_threads
        },
        smem: (group * 4) as u32,
    };
    let (dim32, group32, stages32) = (int(op, "dim", dim)?, group as i32, stages as i32);
    let half = i32::from(store == RotationOut::F16);
    if half == 1 && be.esize() != 2 {
        return Err(cuda_error(
            op,
            "an f16 rotation needs 2-byte (bf16) storage for its output",
        ));
    }
    match norm {
        None => be.launch(
            Kernel::LmHadamard,
            cfg,
            &mut kargs![&x, &out, &dim32, &group32, &stages32, &half],
        ),
        Some((weight, eps)) => {
            check_len(op, "norm.weight", weight.len, dim)?;
            let vec = 16 / be.esize();
            if !dim.is_multiple_of(vec) {
                return Err(cuda_error(
                    op,
                    format!("the norm + rotation kernel loads {vec} elements at once: dim {dim} is not a multiple"),
                ));
            }
            let gamma = t_ptr(be, op, "norm.weight", weight)?;
            be.launch(
                Kernel::LmNormHadamard,
                cfg,
                &mut kargs![&x, &gamma, &out, &dim32, &group32, &stages32, &eps, &half],
            )
        }
    }
}
