//! Library errors as Python exceptions: bad input is a `ValueError`, a missing file an `OSError`,
//! memory too small for what was asked a `MemoryError`, anything the device reports a
//! `RuntimeError`; the message is the one the CLI prints.

use chorus_core::Error;
use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

/// The Python exception for `e`.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Io { .. } | Error::Fetch { .. } => PyOSError::new_err(msg),
        Error::Backend { .. } => PyRuntimeError::new_err(msg),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        _ => PyValueError::new_err(msg),
    }
}

/// `?` for library results inside Python methods.
pub trait IntoPy<T> {
    fn py_err(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPy<T> for chorus_core::Result<T> {
    fn py_err(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
