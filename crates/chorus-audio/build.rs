//! Builds the vendored libopus (see `libopus/README.chorus.md`) into a static library with the
//! `cc` crate alone: no cmake, no autotools, no pkg-config, no system libopus. The binary that
//! links this crate therefore carries libopus and runs on machines that have none.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Version string reported by `opus_get_version_string` (the vendored upstream tag).
const LIBOPUS_VERSION: &str = "1.6.1";

/// Folders (relative to `libopus/`) whose every `.c` file is compiled: only the floating-point
/// encoder and decoder sources were vendored, so no per-file list is needed here.
const SOURCE_DIRS: [&str; 4] = ["celt", "silk", "silk/float", "src"];

/// Include folders, in the order upstream's `Makefile.unix` gives for a float build.
const INCLUDE_DIRS: [&str; 5] = ["include", "silk", "celt", "silk/float", "src"];

fn main() -> io::Result<()> {
    let root = PathBuf::from(env_var("CARGO_MANIFEST_DIR")?).join("libopus");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libopus");

    let mut sources = Vec::new();
    for dir in SOURCE_DIRS {
        sources.extend(c_files(&root.join(dir))?);
    }
    if sources.is_empty() {
        return Err(io::Error::other(format!(
            "no libopus sources under {}",
            root.display()
        )));
    }

    let mut build = cc::Build::new();
    build
        .files(&sources)
        .includes(INCLUDE_DIRS.iter().map(|d| root.join(d)))
        // Upstream's own define for building the library (enables internal headers).
        .define("OPUS_BUILD", None)
        // alloca is what upstream uses where C99 VLAs are missing (MSVC); both gcc and clang have it.
        .define("USE_ALLOCA", None)
        .define("HAVE_LRINTF", None)
        .define("HAVE_LRINT", None)
        // Upstream's configure enables hardening by default: internal invariants are checked.
        .define("ENABLE_HARDENING", None)
        .define(
            "PACKAGE_VERSION",
            Some(format!("\"{LIBOPUS_VERSION}\"").as_str()),
        )
        // libopus is third-party code we never step through: always optimise it, even in debug.
        .opt_level(2)
        // Upstream's code triggers harmless warnings with modern compilers; they are not ours to fix.
        .warnings(false)
        .flag_if_supported("-w");
    build.compile("opus");

    println!("cargo:include={}", root.join("include").to_string_lossy());
    Ok(())
}

/// Reads a build-script environment variable that Cargo always sets.
fn env_var(name: &str) -> io::Result<String> {
    std::env::var(name).map_err(|e| io::Error::other(format!("build.rs: ${name}: {e}")))
}

/// The `.c` files directly inside `dir`, sorted so that builds are reproducible.
fn c_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)
        .map_err(|e| io::Error::other(format!("build.rs: reading {}: {e}", dir.display())))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "c") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
