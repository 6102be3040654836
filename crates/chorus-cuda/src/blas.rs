//! cuBLAS: one handle bound to the backend's stream with an explicit workspace, so that GEMMs
//! capture into graphs; bf16 (or f32 with TF32 off) operands with f32 accumulation.

use std::sync::Arc;

use chorus_core::{Precision, Result};
use cudarc::cublas::sys as cublas;
use cudarc::driver::{sys, CudaContext};

use crate::error::{cuda_error, OrCuda};
use crate::memory::DevMem;

/// One column-major GEMM: `C[m, n] = op(A) op(B) + beta * C` (cuBLAS conventions).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: sys::CUdeviceptr,
    pub lda: usize,
    pub b: sys::CUdeviceptr,
    pub ldb: usize,
    pub c: sys::CUdeviceptr,
    pub ldc: usize,
    pub beta: f32,
}

pub(crate) struct Blas {
    handle: cublas::cublasHandle_t,
    data_type: cublas::cudaDataType,
    workspace: DevMem,
    workspace_bytes: usize,
}

fn status(code: cublas::cublasStatus_t, op: &'static str) -> Result<()> {
    if code == cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(cuda_error(op, format!("{code:?}")))
    }
}

fn dim(v: usize, op: &'static str) -> Result<i32> {
    i32::try_from(v).or_cuda(op)
}

impl Blas {
    /// Creates the handle on `stream` with a `workspace_bytes` workspace.
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        stream: sys::CUstream,
        precision: Precision,
        workspace_bytes: usize,
    ) -> Result<Self> {
        let mut handle: cublas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        status(
            unsafe { cublas::cublasCreate_v2(&mut handle) },
            "cublasCreate",
        )?;
        let workspace = DevMem::new(ctx, workspace_bytes, None)?;
        let blas = Self {
            handle,
            data_type: match precision {
                Precision::F32 => cublas::cudaDataType::CUDA_R_32F,
                Precision::Bf16 => cublas::cudaDataType::CUDA_R_16BF,
            },
            workspace,
            workspace_bytes,
        };
        // SAFETY: the handle is alive; the stream belongs to the current context. The workspace
        // must be set after the stream (setting the stream resets it) and outlives the handle.
        unsafe {
            status(
                cublas::cublasSetStream_v2(handle, stream as cublas::cudaStream_t),
                "cublasSetStream",
            )?;
            status(
                cublas::cublasSetWorkspace_v2(
                    handle,
                    blas.workspace.ptr() as *mut std::ffi::c_void,
                    workspace_bytes,
                ),
                "cublasSetWorkspace",
            )?;
            // Default math: no TF32 for f32 operands (the validation mode must be exact f32).
            status(
                cublas::cublasSetMathMode(handle, cublas::cublasMath_t::CUBLAS_DEFAULT_MATH),
                "cublasSetMathMode",
            )?;
        }
        Ok(blas)
    }

    /// The workspace (address, bytes), for a cuBLASLt handle on the same stream.
    pub(crate) fn workspace(&self) -> (sys::CUdeviceptr, usize) {
        (self.workspace.ptr(), self.workspace_bytes)
    }

    /// Enqueues one GEMM on the handle's stream.
    pub(crate) fn gemm(&self, g: Gemm) -> Result<()> {
        const OP: &str = "cublasGemmEx";
        let alpha = 1.0f32;
        let beta = g.beta;
        // SAFETY: the pointers are device buffers sized by the caller for these dimensions;
        // alpha and beta live through the call (host pointer mode, read at enqueue time).
        let code = unsafe {
            cublas::cublasGemmEx(
                self.handle,
                op(g.trans_a),
                op(g.trans_b),
                dim(g.m, OP)?,
                dim(g.n, OP)?,
                dim(g.k, OP)?,
                &alpha as *const f32 as *const std::ffi::c_void,
                g.a as *const std::ffi::c_void,
                self.data_type,
                dim(g.lda, OP)?,
                g.b as *const std::ffi::c_void,
                self.data_type,
                dim(g.ldb, OP)?,
                &beta as *const f32 as *const std::ffi::c_void,
                g.c as *mut std::ffi::c_void,
                self.data_type,
                dim(g.ldc, OP)?,
                cublas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        status(code, OP).map_err(|e| cuda_error(OP, format!("{e} for {g:?}")))
    }
}

/// The cuBLAS operation for "transpose this operand or not".
fn op(transpose: bool) -> cublas::cublasOperation_t {
    if transpose {
        cublas::cublasOperation_t::CUBLAS_OP_T
    } else {
        cublas::cublasOperation_t::CUBLAS_OP_N
    }
}

/// Strides between the matrices of a batched GEMM, in elements.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    pub count: usize,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
}

impl Blas {
    /// Enqueues `batch.count` GEMMs of the same shape at the given strides.
    pub(crate) fn gemm_batched(&self, g: Gemm, batch: Batch) -> Result<()> {
        const OP: &str = "cublasGemmStridedBatchedEx";
        let alpha = 1.0f32;
        let beta = g.beta;
        // SAFETY: as in `gemm`; every matrix of the batch lies inside the caller's buffers.
        let code = unsafe {
            cublas::cublasGemmStridedBatchedEx(
                self.handle,
                op(g.trans_a),
                op(g.trans_b),
                dim(g.m, OP)?,
                dim(g.n, OP)?,
                dim(g.k, OP)?,
                &alpha as *const f32 as *const std::ffi::c_void,
                g.a as *const std::ffi::c_void,
                self.data_type,
                dim(g.lda, OP)?,
                batch.stride_a,
                g.b as *const std::ffi::c_void,
                self.data_type,
                dim(g.ldb, OP)?,
                batch.stride_b,
                &beta as *const f32 as *const std::ffi::c_void,
                g.c as *mut std::ffi::c_void,
                self.data_type,
                dim(g.ldc, OP)?,
                batch.stride_c,
                dim(batch.count, OP)?,
                cublas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        status(code, OP).map_err(|e| cuda_error(OP, format!("{e} for {g:?} x {batch:?}")))
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created once and is destroyed once.
        let _ = unsafe { cublas::cublasDestroy_v2(self.handle) };
    }
}
