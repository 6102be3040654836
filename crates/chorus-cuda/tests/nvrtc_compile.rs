//! Compiles every kernel, in both precisions, for sm_90 with NVRTC: needs NVRTC but no GPU.
//! Without NVRTC the test prints a note and passes, unless CHORUS_REQUIRE_NVRTC=1.

/// Hopper, the architecture the speed targets are set on.
const ARCH: (i32, i32) = (9, 0);

#[test]
fn every_kernel_compiles_for_sm90() {
    let required = std::env::var("CHORUS_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    if !chorus_cuda::nvrtc_available() {
        assert!(
            !required,
            "CHORUS_REQUIRE_NVRTC=1 but libnvrtc could not be loaded"
        );
        eprintln!("skipped: libnvrtc not found (set LD_LIBRARY_PATH; see scripts/ci_nvrtc_env.sh)");
        return;
    }
    let version = chorus_cuda::nvrtc_version().expect("nvrtcVersion");
    let bytes = chorus_cuda::compile_check(ARCH).unwrap_or_else(|e| panic!("{e}"));
    assert!(bytes > 0, "NVRTC returned an empty CUBIN");
    eprintln!(
        "NVRTC {}.{}: kernels compiled for sm_90, {bytes} bytes of CUBIN",
        version.0, version.1
    );
}
