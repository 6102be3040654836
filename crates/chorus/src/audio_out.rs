//! Writing decoded PCM: WAV (16-bit or float) or `.npy` float32 `[B, samples]`.

use anyhow::{bail, Context, Result};
use chorus_core::SAMPLE_RATE;
use std::path::{Path, PathBuf};

/// Sample format of WAV output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WavFormat {
    Pcm16,
    Float32,
}

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
                write_wav(p, s, format)?;
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

/// Writes a mono 24 kHz WAV file.
pub fn write_wav(path: &Path, pcm: &[f32], format: WavFormat) -> Result<()> {
    let bytes = wav_bytes(pcm, format)?;
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// A mono 24 kHz WAV file in memory.
pub fn wav_bytes(pcm: &[f32], format: WavFormat) -> Result<Vec<u8>> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SAMPLE_RATE,
        bits_per_sample: if format == WavFormat::Pcm16 { 16 } else { 32 },
        sample_format: if format == WavFormat::Pcm16 {
            hound::SampleFormat::Int
        } else {
            hound::SampleFormat::Float
        },
    };
    let mut cursor = std::io::Cursor::new(Vec::new());
    {
        let mut w = hound::WavWriter::new(&mut cursor, spec)?;
        for &s in pcm {
            match format {
                WavFormat::Pcm16 => w.write_sample(to_i16(s))?,
                WavFormat::Float32 => w.write_sample(s)?,
            }
        }
        w.finalize()?;
    }
    Ok(cursor.into_inner())
}

/// Clamps to [-1, 1] and scales to 16 bits.
pub fn to_i16(s: f32) -> i16 {
    (s.clamp(-1.0, 1.0) * i16::MAX as f32).round() as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wav_round_trips_through_hound() {
        let pcm = vec![0.0, 0.5, -1.5, 1.0];
        let bytes = wav_bytes(&pcm, WavFormat::Pcm16).unwrap();
        let r = hound::WavReader::new(std::io::Cursor::new(bytes)).unwrap();
        assert_eq!(r.spec().sample_rate, 24_000);
        let s: Vec<i16> = r.into_samples().map(|s| s.unwrap()).collect();
        assert_eq!(s, vec![0, 16384, -32767, 32767]);
        let f = wav_bytes(&pcm, WavFormat::Float32).unwrap();
        let r = hound::WavReader::new(std::io::Cursor::new(f)).unwrap();
        let s: Vec<f32> = r.into_samples().map(|s| s.unwrap()).collect();
        assert_eq!(s, pcm);
    }
}
