//! The `chorus` Python package's extension module, `chorus._chorus`.
//!
//! It exposes five objects, each owning a device-side model on its own thread ([`actor`]): the
//! Mimi slot decoder ([`mimi`]) and encoder ([`encoder`]), the music semantic stage
//! ([`music`]), the CSM speech stage ([`tts`]) and the Kyutai STT stage ([`stt`]). They take and
//! give numpy arrays only; the Python layer (`chorus/*.py`) adds torch
//! in and out, streams, and the friendly signatures. Every library error becomes a Python
//! exception ([`errors`]).

mod actor;
mod encode_files;
mod encoder;
mod errors;
mod frames;
mod mimi;
mod music;
mod slots;
mod stt;
mod tts;

use pyo3::prelude::*;

#[pymodule]
fn _chorus(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<mimi::PyDecoder>()?;
    m.add_class::<encoder::PyEncoder>()?;
    m.add_class::<music::PyMusicStage>()?;
    m.add_class::<tts::PyTtsStage>()?;
    m.add_class::<stt::PySttStage>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FRAME_SAMPLES", chorus_core::FRAME_SAMPLES)?;
    m.add("SAMPLE_RATE", mimi::SAMPLE_RATE)?;
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    Ok(())
}

/// Whether a usable CUDA device is present. The driver is loaded (and initialised) on the first
/// call, not at import, so a process can import chorus and fork before touching CUDA.
#[pyfunction]
fn cuda_available(py: Python<'_>) -> bool {
    py.detach(|| {
        chorus_runtime::resolve(chorus_runtime::DeviceKind::Auto)
            == chorus_runtime::DeviceKind::Cuda
    })
}
