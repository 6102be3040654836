//! WAV sample formats, channel mixing and rates, on files generated in memory with hound.

mod common;

use std::io::Cursor;

use chorus_audio::{read_audio_bytes, Error, SAMPLE_RATE};
use common::{rms, sine, tone_amplitude};
use hound::{SampleFormat, WavSpec, WavWriter};

/// A WAV file holding `frames` (one inner Vec per frame, one value per channel, in [-1, 1]).
fn wav(rate: u32, bits: u16, float: bool, frames: &[Vec<f32>]) -> Vec<u8> {
    let spec = WavSpec {
        channels: frames[0].len() as u16,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: if float {
            SampleFormat::Float
        } else {
            SampleFormat::Int
        },
    };
    let mut bytes = Cursor::new(Vec::new());
    let mut w = WavWriter::new(&mut bytes, spec).unwrap();
    let full_scale = (1i64 << (bits - 1)) as f32;
    for frame in frames {
        for &v in frame {
            match (float, bits) {
                (true, _) => w.write_sample(v).unwrap(),
                (false, 8) => w.write_sample((v * full_scale) as i8).unwrap(),
                (false, 16) => w.write_sample((v * full_scale) as i16).unwrap(),
                (false, _) => w
                    .write_sample((v * full_scale).min(full_scale - 1.0) as i32)
                    .unwrap(),
            }
        }
    }
    w.finalize().unwrap();
    bytes.into_inner()
}

fn mono(x: &[f32]) -> Vec<Vec<f32>> {
    x.iter().map(|&v| vec![v]).collect()
}

#[test]
fn every_pcm_format_decodes_to_the_same_signal() {
    let tone = sine(1_000.0, SAMPLE_RATE, 4_800, 0.5);
    // Quantisation step of each format bounds the error.
    for (bits, float, tolerance) in [
        (8u16, false, 1.0 / 64.0),
        (16, false, 1.0 / 16_384.0),
        (24, false, 1e-6),
        (32, false, 1e-6),
        (32, true, 1e-7),
    ] {
        let decoded =
            read_audio_bytes(wav(SAMPLE_RATE, bits, float, &mono(&tone)), Some("wav")).unwrap();
        assert_eq!(decoded.format, "wav");
        assert_eq!(decoded.source_rate, SAMPLE_RATE);
        assert_eq!(decoded.source_channels, 1);
        assert_eq!(decoded.source_frames, 4_800);
        assert!(decoded.incomplete.is_none());
        assert_eq!(
            decoded.samples.len(),
            4_800,
            "{bits}-bit: 24 kHz passes through"
        );
        let max_err = tone
            .iter()
            .zip(&decoded.samples)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            max_err < tolerance,
            "{bits}-bit float={float}: max error {max_err}"
        );
    }
}

#[test]
fn channels_are_averaged() {
    let tone = sine(1_000.0, SAMPLE_RATE, 2_400, 0.5);
    // Stereo: left = tone, right = -tone / 2, so the mean is tone / 4.
    let stereo: Vec<Vec<f32>> = tone.iter().map(|&v| vec![v, -0.5 * v]).collect();
    let decoded = read_audio_bytes(wav(SAMPLE_RATE, 32, true, &stereo), None).unwrap();
    assert_eq!(decoded.source_channels, 2);
    for (got, v) in decoded.samples.iter().zip(&tone) {
        assert!((got - 0.25 * v).abs() < 1e-6);
    }
    // 5.1: six channels, only one carries the tone, so the mean is tone / 6.
    let surround: Vec<Vec<f32>> = tone
        .iter()
        .map(|&v| vec![0.0, 0.0, v, 0.0, 0.0, 0.0])
        .collect();
    let decoded = read_audio_bytes(wav(SAMPLE_RATE, 16, false, &surround), None).unwrap();
    assert_eq!(decoded.source_channels, 6);
    let amp = tone_amplitude(&decoded.samples, 1_000.0, SAMPLE_RATE);
    assert!((amp - 0.5 / 6.0).abs() < 1e-3, "amplitude {amp}");
}

#[test]
fn any_rate_is_resampled_to_24_khz() {
    for rate in [
        8_000u32, 11_025, 16_000, 22_050, 32_000, 44_100, 48_000, 96_000,
    ] {
        let n = rate as usize / 2;
        let decoded = read_audio_bytes(
            wav(rate, 16, false, &mono(&sine(1_000.0, rate, n, 0.5))),
            None,
        )
        .unwrap();
        assert_eq!(decoded.source_rate, rate);
        assert_eq!(decoded.source_frames, n as u64);
        let expected = (n as u64 * 24_000 + u64::from(rate) / 2) / u64::from(rate);
        assert_eq!(
            decoded.samples.len() as u64,
            expected,
            "{rate} Hz: half a second at 24 kHz"
        );
        let amp = tone_amplitude(&decoded.samples[600..11_400], 1_000.0, SAMPLE_RATE);
        assert!((amp - 0.5).abs() < 1e-3, "{rate} Hz: amplitude {amp}");
    }
}

#[test]
fn truncated_wav_decodes_the_valid_prefix_and_says_so() {
    let tone = sine(440.0, 44_100, 44_100, 0.5);
    let file = wav(44_100, 16, false, &mono(&tone));
    // Cut in the middle of the data chunk, on an odd byte (half a sample).
    let cut = 44 + 2 * 20_000 + 1;
    let decoded = read_audio_bytes(file[..cut].to_vec(), Some("wav")).unwrap();
    let why = decoded.incomplete.as_deref().unwrap();
    assert!(why.contains("ends (at byte 40045) inside packet"), "{why}");
    assert!(
        why.contains("declares 44100 frames, 20000 decoded"),
        "{why}"
    );
    assert_eq!(decoded.source_frames, 20_000);
    let expected = ((20_000u64 * 24_000 + 22_050) / 44_100) as usize;
    assert_eq!(decoded.samples.len(), expected);
    assert!(rms(&decoded.samples[..10_000]) > 0.3);
}

#[test]
fn header_only_wav_is_empty() {
    let file = wav(44_100, 16, false, &[vec![0.0]]);
    let header_only = file[..44].to_vec();
    let err = read_audio_bytes(header_only, Some("wav")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Empty { .. }), "{msg}");
    assert!(
        msg.contains("in-memory audio (44 bytes") && msg.contains("wav"),
        "{msg}"
    );
}

#[test]
fn unsupported_sample_rate_is_an_error_naming_the_rate() {
    let file = wav(500, 16, false, &mono(&sine(100.0, 500, 500, 0.5)));
    let err = read_audio_bytes(file, None).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Unsupported { .. }), "{msg}");
    assert!(msg.contains("500 Hz") && msg.contains("wav"), "{msg}");
}
