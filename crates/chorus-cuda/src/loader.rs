//! Run-time discovery of the CUDA libraries (nothing from CUDA is linked at build time).

use chorus_core::Result;

use crate::error::cuda_error;

/// A shared library the backend loads at run time.
struct Library {
    file: &'static str,
    role: &'static str,
    present: fn() -> bool,
}

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library; no symbol is called.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn nvrtc_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn cublas_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

fn cublaslt_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::cublaslt::sys::is_culib_present() }
}

const LIBRARIES: &[Library] = &[
    Library {
        file: "libcuda.so",
        role: "the NVIDIA driver",
        present: driver_present,
    },
    Library {
        file: "libnvrtc.so",
        role: "NVRTC, which compiles the kernels at start-up",
        present: nvrtc_present,
    },
    Library {
        file: "libcublas.so",
        role: "cuBLAS, which runs the matrix products",
        present: cublas_present,
    },
    Library {
        file: "libcublasLt.so",
        role: "cuBLASLt, which cuBLAS loads for its kernels",
        present: cublaslt_present,
    },
];

/// Fails with a message naming the first library that cannot be loaded.
pub(crate) fn check_libraries() -> Result<()> {
    for lib in LIBRARIES {
        if !(lib.present)() {
            return Err(cuda_error(
                "CudaBackend::new",
                format!(
                    "{} ({}) could not be loaded: install it or add its folder to LD_LIBRARY_PATH",
                    lib.file, lib.role
                ),
            ));
        }
    }
    Ok(())
}

/// True when NVRTC can be loaded (the kernels can be compiled, with or without a device).
pub fn nvrtc_available() -> bool {
    nvrtc_present()
}

/// A cheap probe for `--device auto`: the driver loads and reports at least one device.
pub fn cuda_available() -> bool {
    if !driver_present() {
        return false;
    }
    if cudarc::driver::result::init().is_err() {
        return false;
    }
    matches!(cudarc::driver::CudaContext::device_count(), Ok(n) if n > 0)
}
