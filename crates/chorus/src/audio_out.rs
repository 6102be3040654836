//! Writing decoded PCM: WAV (16-bit or float) or `.npy` float32 `[B, samples]`.

use anyhow::{bail, Context, Result};
pub use chorus_server::wav::WavFormat;
use std::path::{Path, PathBuf};

/// Writes one stream per WAV file (`out` for one stream, `out-<i>.wav` for a batch), or one
/// `.npy` for all. Returns the paths written.
pub fn write_streams(out: &Path, streams: &[Vec<f32>], format: WavFormat) -> Result<Vec<PathBuf>> {
    match out.extension().and_then(|e| e.to_str()) {
        Some("wav") => {
            let paths: Vec<PathBuf> = if streams.len() == 1 {
                vec![out.to_path_buf()]
            } else {
                let stem = out.file_stem().and_then(|s| s.to_str()).unwrap_or("out");
                (0..streams.len())
                    .map(|i| out.with_file_name(format!("{stem}-{i}.wav")))
                    .collect()
            };
            for (p, s) in paths.iter().zip(streams) {
                let bytes = chorus_server::wav::encode_wav(s, format)?;
                std::fs::write(p, bytes).with_context(|| format!("writing {}", p.display()))?;
            }
            Ok(paths)
        }
        Some("npy") => {
            let samples = streams.first().map_or(0, Vec::len);
            let flat: Vec<f32> = streams.iter().flatten().copied().collect();
            let bytes = chorus_core::npy::write_npy_f32(&[streams.len(), samples], &flat);
            std::fs::write(out, bytes).with_context(|| format!("writing {}", out.display()))?;
            Ok(vec![out.to_path_buf()])
        }
        _ => bail!("{}: output must end in .wav or .npy", out.display()),
    }
}
