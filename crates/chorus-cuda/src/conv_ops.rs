//! Host side of the convolution kernels: geometry checks, path choice, launches.

use std::sync::atomic::Ordering;

use chorus_core::{Conv1dArgs, Conv1dGeom, ConvTr1dArgs, Precision, Result};

use crate::backend::{CudaBackend, CudaBuf, SCRATCH_ALIGN};
use crate::blas::{Batch, Gemm};
use crate::error::cuda_error;
use crate::kernels::{kargs, Kernel, Launch};

/// Convolutions with at most this many output channels skip the GEMM (a GEMV-shaped product
/// would waste the matrix units and re-read the im2col matrix).
const DIRECT_CONV_MAX_C_OUT: usize = 4;
/// Shared-memory floats of the direct convolution's input tile and weights (as in conv.cu).
const DIRECT_SMEM_FLOATS: usize = 8192;
const DIRECT_MAX_WEIGHTS: usize = 4096;
/// Most output times per direct-convolution block, and its threads.
const DIRECT_MAX_TILE: usize = 128;
const DIRECT_THREADS: u32 = 128;
/// The one-output kernel (`conv_out1.cu`, bf16 tensor cores): its input channels, most taps,
/// output times per block, most history columns, threads.
const OUT1_C_IN: usize = 64;
const OUT1_TAPS: usize = 8;
const OUT1_TILE: usize = 256;
/// Fewest output times per block: small batches split their rows this far to fill the SMs
/// (at one row, 256-time tiles left 124 of 132 SMs idle and took 11 us on the H200).
const OUT1_MIN_TILE: usize = 32;
const OUT1_MAX_HISTORY: usize = 64;
const OUT1_THREADS: u32 = 128;
/// Mirrors `ConvDims` in `prelude.cuh`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ConvDims {
    rows: i32,
    time: i32,
    c_in: i32,
    c_out: i32,
    kernel: i32,
    dilation: i32,
    history: i32,
    elu: i32,
    elu_out: i32,
}

/// Mirrors `ConvTrDims` in `prelude.cuh`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ConvTrDims {
    rows: i32,
    time: i32,
    c_in: i32,
    c_out: i32,
    kernel: i32,
    stride: i32,
    tail: i32,
    depthwise: i32,
    elu: i32,
}

impl ConvDims {
    pub(crate) fn of(g: Conv1dGeom, op: &'static str) -> Result<Self> {
        Ok(Self {
            rows: i32_of(g.rows, op)?,
            time: i32_of(g.time, op)?,
            c_in: i32_of(g.c_in, op)?,
            c_out: i32_of(g.c_out, op)?,
            kernel: i32_of(g.kernel, op)?,
            dilation: i32_of(g.dilation, op)?,
            history: i32_of(g.history(), op)?,
            elu: i32::from(g.elu_input),
            elu_out: 0,
        })
    }
}

/// The device address of a convolution's history (0 where it keeps none).
pub(crate) fn history_ptr(
    state: Option<&CudaBuf>,
    history: usize,
    op: &'static str,
) -> Result<u64> {
    match (state, history) {
        (Some(s), _) => Ok(s.mem.ptr()),
        (None, 0) => Ok(0),
        (None, _) => Err(cuda_error(
            op,
            format!("history {history} needs a state buffer"),
        )),
    }
}

pub(crate) fn i32_of(v: usize, op: &'static str) -> Result<i32> {
    i32::try_from(v).map_err(|_| cuda_error(op, format!("size {v} exceeds i32")))
}

fn align(bytes: usize) -> usize {
    bytes.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN
}

impl CudaBackend {
    /// Elements per 16-byte vector of the storage type.
    fn vec_elems(&self) -> usize {
        16 / self.esize()
    }

    pub(crate) fn op_conv1d(&self, a: Conv1dArgs<'_, Self>) -> Result<()> {
        self.conv1d_then_elu(a, false)
    }

    /// `op_conv1d`, with the output ELU'd when `elu_out` (the residual block's hidden
    /// activation): in the tap-split path's shift-add, else by one pass over the output.
    pub(crate) fn conv1d_then_elu(&self, a: Conv1dArgs<'_, Self>, elu_out: bool) -> Result<()> {
        const OP: &str = "conv1d";
        let g = a.geom;
        let history = g.history();
        let mut d = ConvDims::of(g, OP)?;
        let mut elu_pending = elu_out;
        let state_ptr = history_ptr(a.state.as_deref(), history, OP)?;
        let x = a.x.mem.ptr();
        let slots = a.slots.mem.ptr();
        let bias = a.bias.map_or(0u64, |b| b.mem.ptr());
        let residual = a.residual.map_or(0u64, |r| r.mem.ptr());
        let out = a.out.mem.ptr();
        let n = g.rows * g.time;
        // Times per direct-convolution block such that the padded input window fits its tile.
        let tile = (DIRECT_SMEM_FLOATS / (g.c_in + 1))
            .saturating_sub(history)
            .min(DIRECT_MAX_TILE);
        let direct = g.c_out <= DIRECT_CONV_MAX_C_OUT
            && g.c_out * g.kernel * g.c_in <= DIRECT_MAX_WEIGHTS
            && tile > 0;
        let one_output = self.conv_mma
            && self.precision == Precision::Bf16
            && g.c_out == 1
            && g.c_in == OUT1_C_IN
            && g.kernel <= OUT1_TAPS
            && history <= OUT1_MAX_HISTORY;
        if one_output {
            // The widest tile that still gives every SM a block.
            let mut tile = OUT1_TILE;
            while tile > OUT1_MIN_TILE && g.rows * g.time.div_ceil(tile) < self.sm_count {
                tile /= 2;
            }
            let blocks = g.rows * g.time.div_ceil(tile);
            let cfg = Launch {
                grid: u32::try_from(blocks).map_err(|_| cuda_error(OP, "too many blocks"))?,
                block: OUT1_THREADS,
                smem: 0,
            };
            let (w, tile) = (a.w.mem.ptr(), tile as i32);
            self.launch(
                Kernel::ConvOut1,
                cfg,
                &mut kargs![&x, &state_ptr, &slots, &w, &bias, &residual, &out, &d, &tile],
            )?;
            self.out1_launches.fetch_add(1, Ordering::Relaxed);
        } else if self.conv1d_wide(g, [x, state_ptr, slots, a.w.mem.ptr(), bias, residual, out])? {
            // Ran on the wide tensor-core kernel; the history update below is shared.
        } else if self.conv1d_mma(g, [x, state_ptr, slots, a.w.mem.ptr(), bias, residual, out])? {
            // Ran on the tensor cores; the history update below is shared with the other paths.
        } else if direct {
            let blocks = g.rows * g.time.div_ceil(tile);
            let cfg = Launch {
                grid: u32::try_from(blocks).map_err(|_| cuda_error(OP, "too many blocks"))?,
                block: DIRECT_THREADS,
                smem: 0,
            };
            let (w, tile) = (a.w.mem.ptr(), tile as i32);
            let vec = i32::from(g.c_in.is_multiple_of(self.vec_elems()));
            self.launch(
                Kernel::ConvDirect,
                cfg,
                &mut kargs![&x, &state_ptr, &slots, &w, &bias, &residual, &out, &d, &tile, &vec],
            )?;
        } else if self.tap_split && g.kernel > 1 && g.c_out < g.c_in {
            d.elu_out = i32::from(elu_out);
            elu_pending = false;
            self.conv_tap_split(
                &d,
                g,
                (x, state_ptr, slots, a.w.mem.ptr()),
                (bias, residual, out),
            )?;
        } else {
            let k_total = g.kernel * g.c_in;
            let direct_input = g.kernel == 1 && history == 0;
            let b = if direct_input && !g.elu_input {
                x
            } else if direct_input {
                let buf = self.scratch(n * g.c_in * self.esize())?;
                self.elu_into(x, buf, n * g.c_in)?;
                buf
            } else {
                let col = self.scratch(n * k_total * self.esize())?;
                let vec = i32::from(g.c_in.is_multiple_of(self.vec_elems()));
                let chunks = if vec == 1 {
                    g.c_in / self.vec_elems()
                } else {
                    g.c_in
                };
                self.launch(
                    Kernel::ConvGather,
                    // One thread per chunk of an input column (history included).
                    self.grid_for(g.rows * (g.time + history) * chunks)?,
                    &mut kargs![&x, &state_ptr, &slots, &col, &d, &vec],
                )?;
                col
            };
            let gemm = Gemm {
                trans_a: true,
                trans_b: false,
                m: g.c_out,
                n,
                k: k_total,
                a: a.w.mem.ptr(),
                lda: k_total,
                b,
                ldb: k_total,
                c: out,
                ldc: g.c_out,
                beta: 0.0,
            };
            // Bias and residual in the product's epilogue where cuBLASLt takes the shape: no
            // second pass over the output.
            let fused = bias != 0 || residual != 0;
            let in_epilogue = match &self.blas_lt {
                Some(lt) if fused => lt.gemm_epilogue(gemm, bias, residual)?,
                _ => false,
            };
            if in_epilogue {
                self.epilogue_launches.fetch_add(1, Ordering::Relaxed);
            } else {
                self.blas.gemm(gemm)?;
                if fused {
                    let count = n as i64;
                    let c_out = d.c_out;
                    let vec = i32::from(g.c_out.is_multiple_of(self.vec_elems()));
                    let per_thread = if vec == 1 { self.vec_elems() } else { 1 };
                    self.launch(
                        Kernel::BiasResidual,
                        self.grid_for(n * g.c_out / per_thread)?,
                        &mut kargs![&out, &bias, &residual, &count, &c_out, &vec],
                    )?;
                }
            }
        }
        if elu_pending {
            self.elu_into(out, out, n * g.c_out)?;
        }
        self.conv_history_update(&d, x, state_ptr, slots)
    }

    /// Writes the last `history` columns of each row's (ELU'd) input to its slot's history,
    /// after the convolution has read the old ones.
    pub(crate) fn conv_history_update(
        &self,
        d: &ConvDims,
        x: u64,
        state: u64,
        slots: u64,
    ) -> Result<()> {
        if d.history == 0 {
            return Ok(());
        }
        let rows_channels = (d.rows as usize) * (d.c_in as usize);
        self.launch(
            Kernel::ConvState,
            self.grid_for(rows_channels)?,
            &mut kargs![&x, &state, &slots, d],
        )
    }

    /// Narrowing convolution: xin once, one batched GEMM over the taps, a shift-add with bias and
    /// residual (see conv.cu).
    fn conv_tap_split(
        &self,
        d: &ConvDims,
        g: Conv1dGeom,
        (x, state, slots, w): (u64, u64, u64, u64),
        (bias, residual, out): (u64, u64, u64),
    ) -> Result<()> {
        let es = self.esize();
        let span = g.time + g.history();
        let n_in = g.rows * span;
        let xin_bytes = n_in * g.c_in * es;
        let base = self.scratch(
            xin_bytes.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN + g.kernel * n_in * g.c_out * es,
        )?;
        let xin = base;
        let z = base + (xin_bytes.div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN) as u64;
        let vec_in = i32::from(g.c_in.is_multiple_of(self.vec_elems()));
        let per_in = if vec_in == 1 { self.vec_elems() } else { 1 };
        self.launch(
            Kernel::ConvConcat,
            self.grid_for(n_in * g.c_in / per_in)?,
            &mut kargs![&x, &state, &slots, &xin, d, &vec_in],
        )?;
        self.blas.gemm_batched(
            Gemm {
                trans_a: true,
                trans_b: false,
                m: g.c_out,
                n: n_in,
                k: g.c_in,
                a: w,
                lda: g.kernel * g.c_in,
                b: xin,
                ldb: g.c_in,
                c: z,
                ldc: g.c_out,
                beta: 0.0,
            },
            Batch {
                count: g.kernel,
                stride_a: g.c_in as i64,
                stride_b: 0,
                stride_c: (n_in * g.c_out) as i64,
            },
        )?;
        let vec_out = i32::from(g.c_out.is_multiple_of(self.vec_elems()));
        let per_out = if vec_out == 1 { self.vec_elems() } else { 1 };
        self.launch(
            Kernel::ConvShiftAdd,
            self.grid_for(g.rows * g.time * g.c_out / per_out)?,
            &mut kargs![&z, &bias, &residual, &out, d, &vec_out],
        )
    }

    /// out = ELU(x) over `n` elements.
    pub(crate) fn elu_into(&self, x: u64, out: u64, n: usize) -> Result<()> {
        let vec = i32::from(n.is_multiple_of(self.vec_elems()));
        let count = n as i64;
        let items = if vec == 1 { n / self.vec_elems() } else { n };
        self.launch(
            Kernel::Elu,
            self.grid_for(items)?,
            &mut kargs![&x, &out, &count, &vec],
        )
    }

    pub(crate) fn op_conv_tr1d(&self, a: ConvTr1dArgs<'_, Self>) -> Result<()> {
        const OP: &str = "conv_tr1d";
        let g = a.geom;
        let tail = g.tail();
        if g.time * g.stride < tail {
            return Err(cuda_error(
                OP,
                format!(
                    "{} output columns cannot absorb a tail of {tail}",
                    g.time * g.stride
                ),
            ));
        }
        if g.depthwise && g.c_in != g.c_out {
            return Err(cuda_error(OP, "depthwise needs c_in == c_out"));
        }
        let d = ConvTrDims {
            rows: i32_of(g.rows, OP)?,
            time: i32_of(g.time, OP)?,
            c_in: i32_of(g.c_in, OP)?,
            c_out: i32_of(g.c_out, OP)?,
            kernel: i32_of(g.kernel, OP)?,
            stride: i32_of(g.stride, OP)?,
            tail: i32_of(tail, OP)?,
            depthwise: i32::from(g.depthwise),
            elu: i32::from(g.elu_input),
        };
        let n = g.rows * g.time;
        let x = a.x.mem.ptr();
        let bias = a.bias.map_or(0u64, |b| b.mem.ptr());
        let state = a.state.mem.ptr();
        let slots = a.slots.mem.ptr();
        let out = a.out.mem.ptr();
        let (src, w) = if g.depthwise {
            (x, a.w.mem.ptr())
        } else {
            let es = self.esize();
            let elu_bytes = if g.elu_input {
                align(n * g.c_in * es)
            } else {
                0
            };
            let base = self.scratch(elu_bytes + n * g.kernel * g.c_out * es)?;
            let input = if g.elu_input {
                self.elu_into(x, base, n * g.c_in)?;
                base
            } else {
                x
            };
            let y = base + elu_bytes as u64;
            let m = g.kernel * g.c_out;
            self.blas.gemm(Gemm {
                trans_a: false,
                trans_b: false,
                m,
                n,
                k: g.c_in,
                a: a.w.mem.ptr(),
                lda: m,
                b: input,
                ldb: g.c_in,
                c: y,
                ldc: m,
                beta: 0.0,
            })?;
            (y, 0u64)
        };
        let vec = i32::from(g.c_out.is_multiple_of(self.vec_elems()));
        let per_thread = if vec == 1 { self.vec_elems() } else { 1 };
        self.launch(
            Kernel::ConvTrOverlap,
            self.grid_for(n * g.stride * g.c_out / per_thread)?,
            &mut kargs![&src, &w, &bias, &state, &slots, &out, &d, &vec],
        )
    }
}
