//! The `chorus` Python package's extension module, `chorus._chorus`.
//!
//! It exposes two objects, each owning a device-side model on its own thread ([`actor`]): the
//! Mimi slot decoder ([`mimi`]) and the music semantic stage ([`music`]). They take and give
//! numpy arrays only; the Python layer (`chorus/*.py`) adds torch in and out, streams, and the
//! friendly signatures. Every library error becomes a Python exception ([`errors`]).

mod actor;
mod errors;
mod mimi;
mod music;

use pyo3::prelude::*;

#[pymodule]
fn _chorus(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<mimi::PyDecoder>()?;
    m.add_class::<music::PyMusicStage>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FRAME_SAMPLES", chorus_core::FRAME_SAMPLES)?;
    m.add("SAMPLE_RATE", mimi::SAMPLE_RATE)?;
    m.add("cuda_available", chorus_cuda_available())?;
    Ok(())
}

/// Whether a usable CUDA device is present (the driver is loaded at run time).
fn chorus_cuda_available() -> bool {
    chorus_runtime::resolve(chorus_runtime::DeviceKind::Auto) == chorus_runtime::DeviceKind::Cuda
}
