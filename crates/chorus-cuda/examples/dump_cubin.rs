//! Writes the kernels' CUBIN (bf16 storage, sm_90 unless told otherwise) to a file, so that a
//! kernel's SASS can be read and its instructions counted without a GPU (`nvdisasm` or
//! `cuobjdump -sass` from the CUDA toolkit's pip wheels).
//!
//! Usage: `dump_cubin OUT.cubin [f32|bf16] [ARCH, e.g. 90]`; needs NVRTC (scripts/ci_nvrtc_env.sh).

use chorus_core::Precision;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let out = args
        .get(1)
        .ok_or("usage: dump_cubin OUT.cubin [f32|bf16] [ARCH]")?;
    let precision = match args.get(2).map(String::as_str) {
        None | Some("bf16") => Precision::Bf16,
        Some("f32") => Precision::F32,
        Some(other) => return Err(format!("precision {other:?}: expected f32 or bf16").into()),
    };
    let arch: i32 = args.get(3).map_or(Ok(90), |a| a.parse())?;
    let cubin = chorus_cuda::compile(precision, (arch / 10, arch % 10))?;
    std::fs::write(out, &cubin)?;
    eprintln!("{} bytes of CUBIN for sm_{arch} to {out}", cubin.len());
    Ok(())
}
