//! Chorus CUDA backend.
//!
//! Implements [`chorus_core::Backend`] on an NVIDIA GPU through `cudarc`, loading the driver,
//! NVRTC and cuBLAS at run time (nothing from CUDA is needed to build). The kernels are CUDA C
//! sources in `kernels/`, compiled by NVRTC for the device's architecture at start-up and cached
//! on disk; matrix products go through cuBLAS with f32 accumulation. Every buffer is allocated
//! before the first step, all work runs on one non-default stream, and each bucket's step
//! program is captured once into a CUDA graph (after warm-up runs whose effect on slot state is
//! rolled back) and replayed from then on; the graph is checked to hold only kernel, copy and
//! memset nodes. Staging is pinned host memory, copied in and out by nodes of the graph.

mod attention_ops;
mod backend;
mod blas;
mod blas_lt;
mod conv_ops;
mod encode_ops;
mod error;
mod graph;
mod kernels;
mod lm;
mod loader;
mod memory;
mod mma_ops;
mod ops;
mod profile;
mod res_block_ops;
mod wide_ops;

pub use backend::{
    CudaBackend, CudaBuf, CudaInts, CudaOptions, CudaStaging, BATCH_INVARIANT_ENV,
    DEFAULT_CONV_MMA_MAX_OUT, DEFAULT_CUBLAS_WORKSPACE, DEFAULT_WARMUP_RUNS, SKINNY_ENV,
};
pub use kernels::{compile, compile_check, kernel_source, nvrtc_version, INCLUDE_ENV};
pub use lm::gemv::GEMV_MIN_K;
pub use lm::q8_gemm::Q8_GEMM_MAX_ROWS;
pub use lm::skinny::SKINNY_MAX_ROWS;
pub use lm::{CudaPinnedFloats, CudaPinnedInts, CudaQWeight};
pub use loader::{cuda_available, nvrtc_available};
pub use profile::OpTime;
