//! Mapping of CUDA, NVRTC and cuBLAS failures onto [`chorus_core::Error`].

use chorus_core::Error;

/// The backend name carried by every error of this crate.
pub(crate) const BACKEND: &str = "cuda";

/// A backend error for `op` with a free-form reason.
pub(crate) fn cuda_error(op: &'static str, reason: impl Into<String>) -> Error {
    Error::Backend {
        op,
        backend: BACKEND,
        reason: reason.into(),
    }
}

/// Attaches the operation name to a CUDA-library error.
pub(crate) trait OrCuda<T> {
    fn or_cuda(self, op: &'static str) -> chorus_core::Result<T>;
}

impl<T, E: std::fmt::Debug> OrCuda<T> for std::result::Result<T, E> {
    fn or_cuda(self, op: &'static str) -> chorus_core::Result<T> {
        self.map_err(|e| cuda_error(op, format!("{e:?}")))
    }
}

/// Checks a raw driver return code.
pub(crate) fn check(
    code: cudarc::driver::sys::CUresult,
    op: &'static str,
) -> chorus_core::Result<()> {
    code.result().or_cuda(op)
}
