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

/// Kernels launch with programmatic dependent launch, which is only correct when each kernel
/// waits for its predecessor before touching activations: `pdl_enter()` must be every kernel's
/// first statement (a weight prefetch, which reads no activation, may come before it; the skinny
/// products' body, `SK_DISPATCH`, loads its first weights and then waits, see lm_skinny.cu; so
/// does the bulk-copy GEMV's, `gemv_tma_body`, see lm_gemv.cu; the L2 prefetch, which reads only
/// weights, releases its successor first and waits before it exits, see lm_prefetch.cu).
#[test]
fn every_kernel_waits_for_its_predecessor_first() {
    let src = chorus_cuda::kernel_source();
    let mut kernels = 0;
    for (at, _) in src.match_indices("extern \"C\" __global__") {
        let body = &src[at..];
        let open = body.find('{').expect("kernel body");
        let first: Vec<&str> = body[open + 1..]
            .lines()
            // Lines of a macro-defined entry point end in a continuation.
            .map(|l| l.trim().trim_end_matches('\\').trim_end())
            .filter(|l| !l.is_empty())
            .take(2)
            .collect();
        let name = body[..open].split('(').next().unwrap_or("?");
        // The kernel's own text, up to the next kernel.
        let own = body[open..]
            .find("extern \"C\" __global__")
            .map_or(&body[open..], |end| &body[open..open + end]);
        let ok = first[0] == "pdl_enter();"
            // A weights-only kernel releases its successor first and waits before it exits.
            || (first[0] == "pdl_launch_dependents();" && own.contains("pdl_wait();"))
            || first[0].starts_with("SK_DISPATCH(")
            || first[0].starts_with("gemv_tma_body(")
            || (first[0].starts_with("prefetch_first_row(") && first[1] == "pdl_enter();");
        assert!(
            ok,
            "{name}: first statements {first:?}, expected pdl_enter();"
        );
        kernels += 1;
    }
    assert!(kernels >= 33, "found only {kernels} kernels");
}
