//! cuBLASLt for products with an epilogue: `D = op(A) op(B) + residual + bias` (bias per row of
//! the column-major result, i.e. per output channel) in one kernel, where cuBLAS needs a second
//! pass that reads and writes the whole output again. Descriptors live for one enqueue: steps
//! are captured into graphs, so this host work runs at capture, never at replay.

use chorus_core::{Precision, Result};
use cudarc::cublas::sys as cublas;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys;

use crate::blas::Gemm;
use crate::error::{cuda_error, OrCuda};

/// Heuristic candidates asked for; the first that fits the workspace is taken.
const LT_CANDIDATES: i32 = 1;

pub(crate) struct BlasLt {
    handle: lt::cublasLtHandle_t,
    data_type: lt::cudaDataType,
    stream: lt::cudaStream_t,
    workspace: sys::CUdeviceptr,
    workspace_bytes: usize,
}

fn status(code: lt::cublasStatus_t, op: &'static str) -> Result<()> {
    if code == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(cuda_error(op, format!("{code:?}")))
    }
}

fn lt_op(transpose: bool) -> cublas::cublasOperation_t {
    if transpose {
        cublas::cublasOperation_t::CUBLAS_OP_T
    } else {
        cublas::cublasOperation_t::CUBLAS_OP_N
    }
}

/// Destroys the descriptors of one product when it goes out of scope.
#[derive(Default)]
struct Descriptors {
    desc: Option<lt::cublasLtMatmulDesc_t>,
    pref: Option<lt::cublasLtMatmulPreference_t>,
    layouts: Vec<lt::cublasLtMatrixLayout_t>,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once by this struct's owner and is destroyed once;
        // cublasLtMatmul read them at enqueue.
        unsafe {
            if let Some(d) = self.desc {
                let _ = lt::cublasLtMatmulDescDestroy(d);
            }
            if let Some(p) = self.pref {
                let _ = lt::cublasLtMatmulPreferenceDestroy(p);
            }
            for &l in &self.layouts {
                let _ = lt::cublasLtMatrixLayoutDestroy(l);
            }
        }
    }
}

impl BlasLt {
    /// A handle that enqueues on `stream` with the given workspace (shared with the cuBLAS
    /// handle: both enqueue on the one stream, so their uses never overlap).
    pub(crate) fn new(
        stream: sys::CUstream,
        precision: Precision,
        workspace: sys::CUdeviceptr,
        workspace_bytes: usize,
    ) -> Result<Self> {
        let mut handle: lt::cublasLtHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        status(unsafe { lt::cublasLtCreate(&mut handle) }, "cublasLtCreate")?;
        Ok(Self {
            handle,
            data_type: match precision {
                Precision::F32 => lt::cudaDataType::CUDA_R_32F,
                Precision::Bf16 => lt::cudaDataType::CUDA_R_16BF,
            },
            stream: stream as lt::cudaStream_t,
            workspace,
            workspace_bytes,
        })
    }

    fn layout(&self, d: &mut Descriptors, rows: usize, cols: usize, ld: usize) -> Result<()> {
        const OP: &str = "cublasLtMatrixLayoutCreate";
        let mut l: lt::cublasLtMatrixLayout_t = std::ptr::null_mut();
        let ld = i64::try_from(ld).or_cuda(OP)?;
        // SAFETY: valid out-pointer; plain sizes.
        status(
            unsafe {
                lt::cublasLtMatrixLayoutCreate(&mut l, self.data_type, rows as u64, cols as u64, ld)
            },
            OP,
        )?;
        d.layouts.push(l);
        Ok(())
    }

    /// Enqueues `C = op(A) op(B) + residual + bias` (`g.beta` is ignored: the residual, laid out
    /// as C, is added when its pointer is not 0; so is the bias, `[m]`). Returns false, having
    /// enqueued nothing, when cuBLASLt has no algorithm for the shape (the caller then takes the
    /// product and a second pass).
    pub(crate) fn gemm_epilogue(
        &self,
        g: Gemm,
        bias: sys::CUdeviceptr,
        residual: sys::CUdeviceptr,
    ) -> Result<bool> {
        const OP: &str = "cublasLtMatmul";
        let mut d = Descriptors::default();
        let mut desc: lt::cublasLtMatmulDesc_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer. Pure f32 compute: the f32 validation mode must stay exact.
        status(
            unsafe {
                lt::cublasLtMatmulDescCreate(
                    &mut desc,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType::CUDA_R_32F,
                )
            },
            "cublasLtMatmulDescCreate",
        )?;
        d.desc = Some(desc);
        let (ta, tb) = (lt_op(g.trans_a), lt_op(g.trans_b));
        let epilogue = if bias != 0 {
            lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS
        } else {
            lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT
        };
        let set =
            |attr: lt::cublasLtMatmulDescAttributes_t, p: *const std::ffi::c_void, n: usize| {
                // SAFETY: `p` points at a live value of `n` bytes of the type the attribute takes.
                status(
                    unsafe { lt::cublasLtMatmulDescSetAttribute(desc, attr, p, n) },
                    "cublasLtMatmulDescSetAttribute",
                )
            };
        use lt::cublasLtMatmulDescAttributes_t as A;
        set(
            A::CUBLASLT_MATMUL_DESC_TRANSA,
            (&ta as *const cublas::cublasOperation_t).cast(),
            size_of_val(&ta),
        )?;
        set(
            A::CUBLASLT_MATMUL_DESC_TRANSB,
            (&tb as *const cublas::cublasOperation_t).cast(),
            size_of_val(&tb),
        )?;
        set(
            A::CUBLASLT_MATMUL_DESC_EPILOGUE,
            (&epilogue as *const lt::cublasLtEpilogue_t).cast(),
            size_of_val(&epilogue),
        )?;
        if bias != 0 {
            let bias_type = self.data_type;
            set(
                A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                (&bias as *const u64).cast(),
                size_of_val(&bias),
            )?;
            set(
                A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                (&bias_type as *const lt::cudaDataType).cast(),
                size_of_val(&bias_type),
            )?;
        }
        // Stored shapes (column-major): A is m x k, or k x m transposed; B is k x n, or n x k.
        let (a_rows, a_cols) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
        let (b_rows, b_cols) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
        self.layout(&mut d, a_rows, a_cols, g.lda)?;
        self.layout(&mut d, b_rows, b_cols, g.ldb)?;
        self.layout(&mut d, g.m, g.n, g.ldc)?;
        let (la, lb, lc) = (d.layouts[0], d.layouts[1], d.layouts[2]);
        let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        status(
            unsafe { lt::cublasLtMatmulPreferenceCreate(&mut pref) },
            "cublasLtMatmulPreferenceCreate",
        )?;
        d.pref = Some(pref);
        let ws = self.workspace_bytes;
        // SAFETY: `ws` is a live usize, the size the attribute takes.
        status(
            unsafe {
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    (&ws as *const usize).cast(),
                    size_of_val(&ws),
                )
            },
            "cublasLtMatmulPreferenceSetAttribute",
        )?;
        // SAFETY: the result struct is plain data that the heuristic overwrites.
        let mut found: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        let mut count = 0i32;
        // SAFETY: descriptors are alive; one result slot for LT_CANDIDATES = 1.
        status(
            unsafe {
                lt::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    desc,
                    la,
                    lb,
                    lc,
                    lc,
                    pref,
                    LT_CANDIDATES,
                    &mut found,
                    &mut count,
                )
            },
            "cublasLtMatmulAlgoGetHeuristic",
        )?;
        if count < 1 {
            return Ok(false);
        }
        let alpha = 1.0f32;
        let beta = if residual != 0 { 1.0f32 } else { 0.0 };
        // C is the residual (read only when beta is 1), D the output, in the same layout.
        let c_in = if residual != 0 { residual } else { g.c };
        // SAFETY: the pointers are device buffers sized by the caller for these layouts; alpha
        // and beta live through the call (host scalars, read at enqueue).
        let code = unsafe {
            lt::cublasLtMatmul(
                self.handle,
                desc,
                (&alpha as *const f32).cast(),
                g.a as *const std::ffi::c_void,
                la,
                g.b as *const std::ffi::c_void,
                lb,
                (&beta as *const f32).cast(),
                c_in as *const std::ffi::c_void,
                lc,
                g.c as *mut std::ffi::c_void,
                lc,
                &found.algo,
                self.workspace as *mut std::ffi::c_void,
                self.workspace_bytes,
                self.stream,
            )
        };
        status(code, OP).map_err(|e| cuda_error(OP, format!("{e} for {g:?}")))?;
        Ok(true)
    }
}

impl Drop for BlasLt {
    fn drop(&mut self) {
        // SAFETY: the handle was created once and is destroyed once.
        let _ = unsafe { lt::cublasLtDestroy(self.handle) };
    }
}
