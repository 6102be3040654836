//! Decoding the committed fixtures (one speech clip in every format; see tests/data/README.md),
//! their cut and corrupted variants, and bad inputs.

mod common;

use std::path::PathBuf;

use chorus_audio::{read_audio_bytes, read_audio_file, DecodedAudio, Error, Progress};
use common::{best_lag, correlation, fixture};

const WAV: &str = "speech_44k1_stereo_s16.wav";
const FLAC: &str = "speech_48k_mono.flac";
const MP3: &str = "speech_44k1_mono.mp3";
const VORBIS: &str = "speech_22k05_mono_vorbis.ogg";
const OPUS: &str = "speech_48k_stereo.opus";

/// The 0.35 s master clip: 16 799 samples at 48 kHz.
const CLIP_24K: usize = 8_400;

fn decode(name: &str) -> DecodedAudio {
    read_audio_file(fixture(name), None).unwrap()
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

/// The lossless WAV decode that every other format is compared with.
fn reference() -> Vec<f32> {
    decode(WAV).samples
}

#[test]
fn every_fixture_decodes_with_its_source_description() {
    // (file, format, rate, channels, source frames, samples at 24 kHz)
    let expected = [
        (WAV, "wav", 44_100, 2, 15_434, 8_399),
        (FLAC, "flac", 48_000, 1, 16_799, 8_400),
        // The LAME header's delay and padding are trimmed (gapless).
        (MP3, "mp3", 44_100, 1, 15_434, 8_399),
        // Four copies of the clip, to have several Ogg pages.
        (VORBIS, "ogg-vorbis", 22_050, 1, 30_868, 33_598),
        (OPUS, "ogg-opus", 48_000, 2, 16_799, 8_400),
    ];
    for (name, format, rate, channels, frames, len) in expected {
        let d = decode(name);
        assert_eq!(d.format, format, "{name}");
        assert_eq!(d.source_rate, rate, "{name}");
        assert_eq!(d.source_channels, channels, "{name}");
        assert_eq!(d.source_frames, frames, "{name}");
        assert_eq!(d.samples.len(), len, "{name}");
        assert!(d.incomplete.is_none(), "{name}: {:?}", d.incomplete);
        assert!((d.duration_secs() - len as f64 / 24_000.0).abs() < 1e-9);
    }
}

#[test]
fn every_format_matches_the_wav_reference() {
    let reference = reference();
    assert_eq!(reference.len().abs_diff(CLIP_24K), 1);
    // (file, lowest correlation): FLAC is lossless (measured 1.0000, sox resampled both from one
    // master); measured MP3 0.9992, Vorbis 0.9980, Opus 0.9943 (lag -1: SILK at 24 kHz).
    for (name, min_corr) in [
        (FLAC, 0.9999f32),
        (MP3, 0.995),
        (VORBIS, 0.99),
        (OPUS, 0.98),
    ] {
        let d = decode(name);
        let (lag, corr) = best_lag(&reference, &d.samples[..CLIP_24K - 1], 50);
        assert!(
            lag.abs() <= 1,
            "{name}: decoded audio is shifted by {lag} samples"
        );
        assert!(corr > min_corr, "{name}: correlation {corr}");
    }
    // The Vorbis file holds the clip four times: the last copy decodes as well as the first.
    let vorbis = decode(VORBIS).samples;
    let last = &vorbis[vorbis.len() - reference.len()..];
    let (lag, corr) = best_lag(&reference, last, 50);
    // Measured 0.9888.
    assert!(
        lag.abs() <= 1 && corr > 0.98,
        "last copy: lag {lag} corr {corr}"
    );
}

#[test]
fn bytes_and_files_decode_alike_with_extension_or_mime_hints() {
    for (name, hint) in [
        (WAV, Some("wav")),
        (FLAC, Some("audio/flac")),
        (MP3, Some(".MP3")),
        (MP3, Some("audio/mpeg")),
        (VORBIS, None),
        (OPUS, Some("audio/ogg")),
    ] {
        let from_bytes = read_audio_bytes(bytes(name), hint).unwrap();
        let from_file = decode(name);
        assert_eq!(from_bytes, from_file, "{name} with hint {hint:?}");
    }
}

#[test]
fn progress_reports_bytes_and_packets_up_to_the_total() {
    for name in [WAV, FLAC, MP3, VORBIS, OPUS] {
        let mut seen: Vec<Progress> = Vec::new();
        let mut cb = |p: Progress| seen.push(p);
        read_audio_file(fixture(name), Some(&mut cb)).unwrap();
        let total = bytes(name).len() as u64;
        assert!(seen.len() > 2, "{name}: {} progress calls", seen.len());
        for pair in seen.windows(2) {
            assert!(
                pair[1].bytes_done >= pair[0].bytes_done,
                "{name}: bytes went back"
            );
            assert!(
                pair[1].packets_done >= pair[0].packets_done,
                "{name}: packets went back"
            );
        }
        let last = seen.last().unwrap();
        assert_eq!(last.bytes_total, Some(total), "{name}");
        assert_eq!(last.bytes_done, total, "{name}");
        assert!(seen.iter().all(|p| p.bytes_done <= total), "{name}");
        assert!(last.packets_done > 1, "{name}");
    }
}

/// Decodes the first `fraction` of the file's bytes.
fn decode_cut(name: &str, fraction: f64) -> chorus_audio::Result<DecodedAudio> {
    let b = bytes(name);
    let cut = (b.len() as f64 * fraction) as usize;
    read_audio_bytes(b[..cut].to_vec(), None)
}

/// Asserts that `cut` is a clean prefix of the full decode of `name`.
fn assert_prefix(name: &str, cut: &DecodedAudio) {
    let full = decode(name).samples;
    let n = cut.samples.len();
    assert!(
        n > 1_000 && n < full.len(),
        "{name}: {n} of {} samples",
        full.len()
    );
    // The last few samples of a cut decode may differ (resampler tail, lapped transforms).
    let body = n - 300;
    let corr = correlation(&full[..body], &cut.samples[..body]);
    assert!(corr > 0.999, "{name}: prefix correlation {corr}");
}

#[test]
fn files_cut_short_decode_their_valid_prefix_and_say_what_is_missing() {
    // (file, fraction kept, words the report must contain)
    for (name, fraction, words) in [
        (WAV, 0.6, "header declares 15434 frames"),
        (FLAC, 0.6, "header declares 16799 frames"),
        (MP3, 0.6, "header declares 15434 frames"),
        (VORBIS, 0.9, "ends (at byte 10176) inside packet"),
        (OPUS, 0.6, "inside the page after packet"),
    ] {
        let d = decode_cut(name, fraction).unwrap();
        let why = d
            .incomplete
            .as_deref()
            .unwrap_or_else(|| panic!("{name}: not reported"));
        assert!(why.contains(words), "{name}: {why}");
        assert_prefix(name, &d);
    }
}

#[test]
fn files_cut_before_any_audio_are_errors_saying_so() {
    // The Vorbis setup header and first audio page fill the first 7.7 kB; the Opus headers 0.8 kB.
    for (name, fraction, words) in [
        (VORBIS, 0.45, "ends before the first audio packet"),
        (OPUS, 0.2, "ends inside this page (cut short)"),
    ] {
        let err = decode_cut(name, fraction).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Malformed { .. }), "{name}: {msg}");
        assert!(msg.contains(words), "{name}: {msg}");
        assert!(msg.contains("in-memory audio ("), "{name}: {msg}");
    }
}

/// `name` with 4 bytes inverted in the middle.
fn corrupted(name: &str) -> Vec<u8> {
    let mut b = bytes(name);
    let at = b.len() / 2;
    b[at..at + 4].iter_mut().for_each(|x| *x ^= 0xff);
    b
}

#[test]
fn corrupt_ogg_pages_are_errors() {
    for name in [VORBIS, OPUS] {
        let err = read_audio_bytes(corrupted(name), None).unwrap_err();
        let msg = err.to_string().to_lowercase();
        assert!(matches!(err, Error::Malformed { .. }), "{name}: {msg}");
        assert!(msg.contains("crc mismatch"), "{name}: {msg}");
    }
}

#[test]
fn flac_frames_with_bad_crc_are_skipped_and_reported() {
    let d = read_audio_bytes(corrupted(FLAC), None).unwrap();
    let why = d.incomplete.as_deref().unwrap();
    assert!(why.contains("header declares 16799 frames"), "{why}");
    assert!(d.samples.len() < 8_400);
}

#[test]
fn empty_missing_and_non_audio_inputs_are_errors_naming_the_source() {
    let dir = std::env::temp_dir().join(format!("chorus-audio-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let empty: PathBuf = dir.join("empty.wav");
    std::fs::write(&empty, b"").unwrap();
    let err = read_audio_file(&empty, None).unwrap_err();
    assert!(matches!(err, Error::Empty { .. }), "{err}");
    assert!(err.to_string().contains("empty.wav"), "{err}");

    let missing = dir.join("missing.flac");
    let err = read_audio_file(&missing, None).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing.flac"), "{err}");

    let err = read_audio_file(&dir, None).unwrap_err();
    assert!(err.to_string().contains("directory"), "{err}");

    let text = dir.join("notes.mp3");
    std::fs::write(&text, "this is not audio at all\n".repeat(40)).unwrap();
    let err = read_audio_file(&text, None).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("notes.mp3"), "{err}");

    std::fs::remove_dir_all(&dir).unwrap();

    let err = read_audio_bytes(vec![0u8; 3], Some("wav")).unwrap_err();
    assert!(
        err.to_string().contains("in-memory audio (3 bytes"),
        "{err}"
    );
}

#[test]
fn id3_tagged_mp3_decodes_like_the_untagged_one() {
    let text = b"\x00chorus test";
    let mut frame = b"TIT2".to_vec();
    frame.extend_from_slice(&(text.len() as u32).to_be_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(text);
    let size = frame.len() as u32; // < 128: the syncsafe size is the plain size
    let mut tagged = b"ID3\x03\x00\x00".to_vec();
    tagged.extend_from_slice(&size.to_be_bytes());
    tagged.extend_from_slice(&frame);
    tagged.extend_from_slice(&bytes(MP3));
    let d = read_audio_bytes(tagged, None).unwrap();
    assert_eq!(d, decode(MP3));
}
