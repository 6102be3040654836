//! Outputs of a bulk run: written whole or not at all, and recognised as done on the next run.

use anyhow::{Context, Result};
use chorus_core::npy::{read_npy, NpyData};
use chorus_core::{FRAME_SAMPLES, SAMPLE_RATE};
use chorus_server::wav::WavFormat;
use std::path::{Path, PathBuf};

/// Suffix of an output being written; renamed to the output once complete.
const PARTIAL_SUFFIX: &str = ".partial";
/// Bytes of a canonical WAV header (RIFF, fmt and data chunk headers).
const WAV_HEADER_BYTES: u64 = 44;

/// Writes `bytes` to `path` through a temporary file in the same folder, renamed when complete:
/// an interrupted run leaves no half-written output under the output's name. (The data is not
/// flushed to disk before the rename: after a power cut a short output reads as not done.)
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = partial_name(path);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// `dir/.name.partial`: hidden, with an extension no bulk run reads, rewritten by the next run.
fn partial_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}{PARTIAL_SUFFIX}"))
}

/// True when `path` holds codes `[n_q, T]` (T >= 1, `T == frames` when known) of integers below
/// `cardinality`: what a finished encode of the input wrote.
pub fn codes_done(path: &Path, n_q: usize, cardinality: usize, frames: Option<usize>) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let Ok(a) = read_npy(&bytes, &path.display().to_string()) else {
        return false;
    };
    let NpyData::Int(values) = a.data else {
        return false;
    };
    matches!(a.shape[..], [q, t] if q == n_q && t > 0 && frames.is_none_or(|f| f == t))
        && values.iter().all(|&c| (0..cardinality as i64).contains(&c))
}

/// Frames the encoder will make of `input`, when its header tells cheaply (WAV; `None` for
/// other formats or a header that does not parse).
pub fn expected_frames(input: &Path) -> Option<usize> {
    let is_wav = input
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("wav"));
    if !is_wav {
        return None;
    }
    let r = hound::WavReader::open(input).ok()?;
    let rate = r.spec().sample_rate;
    let samples = chorus_audio::resampled_len(u64::from(r.duration()), rate, SAMPLE_RATE);
    usize::try_from(samples)
        .ok()
        .map(|s| s.div_ceil(FRAME_SAMPLES))
}

/// True when `path` is a 24 kHz mono WAV of `format` holding `frames` whole frames and the
/// bytes its header declares: what a finished decode of those codes wrote.
pub fn wav_done(path: &Path, frames: usize, format: WavFormat) -> bool {
    let Ok(len) = std::fs::metadata(path).map(|m| m.len()) else {
        return false;
    };
    let Ok(r) = hound::WavReader::open(path) else {
        return false;
    };
    let s = r.spec();
    let bits = match format {
        WavFormat::Pcm16 => (16, hound::SampleFormat::Int),
        WavFormat::Float32 => (32, hound::SampleFormat::Float),
    };
    let samples = frames * FRAME_SAMPLES;
    s.channels == 1
        && s.sample_rate == SAMPLE_RATE
        && (s.bits_per_sample, s.sample_format) == bits
        && r.duration() as usize == samples
        && len >= WAV_HEADER_BYTES + (samples * usize::from(bits.0 / 8)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("chorus-files-")
            .tempdir()
            .unwrap()
    }

    #[test]
    fn codes_are_done_only_when_whole_and_of_the_right_shape() {
        let d_tmp = dir();
        let d = d_tmp.path();
        let p = d.join("sub/c.npy");
        write_atomic(
            &p,
            &chorus_core::npy::write_npy_i64(&[2, 3], &[0, 1, 2, 3, 4, 5]),
        )
        .unwrap();
        assert!(!partial_name(&p).exists());
        assert!(codes_done(&p, 2, 2048, None) && codes_done(&p, 2, 2048, Some(3)));
        assert!(!codes_done(&p, 4, 2048, None), "another n_q");
        assert!(!codes_done(&p, 2, 2048, Some(4)), "another length");
        assert!(!codes_done(&p, 2, 5, None), "codes out of range");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        assert!(!codes_done(&p, 2, 2048, None), "cut short");
        assert!(!codes_done(&d.join("none.npy"), 2, 2048, None));
    }

    #[test]
    fn a_wav_is_done_only_with_every_frame() {
        let d_tmp = dir();
        let d = d_tmp.path();
        let p = d.join("w.wav");
        let pcm = vec![0.25f32; 2 * FRAME_SAMPLES];
        let bytes = chorus_server::wav::encode_wav(&pcm, WavFormat::Pcm16).unwrap();
        write_atomic(&p, &bytes).unwrap();
        assert!(wav_done(&p, 2, WavFormat::Pcm16));
        assert!(!wav_done(&p, 3, WavFormat::Pcm16));
        assert!(!wav_done(&p, 2, WavFormat::Float32));
        std::fs::write(&p, &bytes[..bytes.len() - 100]).unwrap();
        assert!(!wav_done(&p, 2, WavFormat::Pcm16), "cut short");
    }

    #[test]
    fn a_wav_header_gives_the_frames_to_expect() {
        let d_tmp = dir();
        let d = d_tmp.path();
        let p = d.join("in44.wav");
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: 44_100,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&p, spec).unwrap();
        // 1 s at 44.1 kHz is 24 000 samples at 24 kHz: 12.5 frames, so 13.
        for _ in 0..2 * 44_100 {
            w.write_sample(0i16).unwrap();
        }
        w.finalize().unwrap();
        assert_eq!(expected_frames(&p), Some(13));
        assert_eq!(expected_frames(&d.join("x.flac")), None);
    }
}
