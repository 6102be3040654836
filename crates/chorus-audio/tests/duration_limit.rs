//! `DecodeOptions::max_seconds`: a source longer than the limit stops decoding there with
//! `Error::TooLong` (hostile files that expand to hours fail fast), and one within it decodes
//! exactly as without a limit.

mod common;

use std::io::Cursor;
use std::time::{Duration, Instant};

use chorus_audio::{
    read_audio_bytes, read_audio_bytes_with, read_audio_file, read_audio_file_with, DecodeOptions,
    Error, OggOpusWriter, SAMPLE_RATE,
};
use common::{fixture, silent_flac, sine, speech_like, FLAC_BLOCK};
use hound::{SampleFormat, WavSpec, WavWriter};

/// Source rate of the silent FLACs.
const FLAC_RATE: u32 = 48_000;
/// Hours of silence in the hostile FLAC: 3.3 GB of 24 kHz f32 samples if decoded whole.
const HOSTILE_HOURS: u32 = 10;
/// The hostile FLAC must be refused well within this (it stops after one minute of audio).
const FAST: Duration = Duration::from_secs(3);

fn limit(max_seconds: f64) -> DecodeOptions {
    DecodeOptions::max_seconds(max_seconds)
}

/// `(max_seconds, decoded_seconds, message)` of a `TooLong` error (panics on anything else).
fn too_long(result: chorus_audio::Result<chorus_audio::DecodedAudio>) -> (f64, f64, String) {
    match result {
        Err(e @ Error::TooLong { .. }) => {
            let msg = e.to_string();
            let Error::TooLong {
                max_seconds,
                decoded_seconds,
                ..
            } = e
            else {
                unreachable!()
            };
            (max_seconds, decoded_seconds, msg)
        }
        Err(e) => panic!("expected TooLong, got {e}"),
        Ok(d) => panic!("expected TooLong, decoded {:.2} s", d.duration_secs()),
    }
}

/// A 16-bit WAV of `samples` (interleaved, `channels` per frame) at `rate`.
fn wav(rate: u32, channels: u16, samples: &[f32]) -> Vec<u8> {
    let spec = WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: SampleFormat::Int,
    };
    let mut bytes = Cursor::new(Vec::new());
    let mut w = WavWriter::new(&mut bytes, spec).unwrap();
    for &v in samples {
        w.write_sample((v * 32_767.0) as i16).unwrap();
    }
    w.finalize().unwrap();
    bytes.into_inner()
}

#[test]
fn ten_hours_of_silent_flac_stop_at_the_limit_at_once() {
    let blocks = (u64::from(HOSTILE_HOURS) * 3600 * u64::from(FLAC_RATE))
        .div_ceil(u64::from(FLAC_BLOCK)) as u32;
    let flac = silent_flac(FLAC_RATE, blocks);
    assert!(flac.len() < 400_000, "{} bytes", flac.len());
    let started = Instant::now();
    let (max, decoded, msg) = too_long(read_audio_bytes_with(flac, Some("flac"), &limit(60.0)));
    let took = started.elapsed();
    assert!(took < FAST, "refused after {took:?}");
    assert_eq!(max, 60.0);
    assert!(decoded <= 60.0 && decoded > 58.0, "{decoded}");
    assert!(
        msg.contains("(flac) is longer than the 60 s limit") && msg.contains("in-memory audio"),
        "{msg}"
    );
}

#[test]
fn a_silent_flac_within_the_limit_decodes_as_without_one() {
    let flac = silent_flac(FLAC_RATE, 10);
    let frames = 10 * u64::from(FLAC_BLOCK);
    let exact = frames as f64 / f64::from(FLAC_RATE);
    let whole = read_audio_bytes(flac.clone(), None).unwrap();
    assert_eq!(
        (whole.source_frames, whole.incomplete.as_deref()),
        (frames, None)
    );
    assert!(whole.samples.iter().all(|&v| v == 0.0));
    // Exactly at the limit passes; one block less does not.
    let capped = read_audio_bytes_with(flac.clone(), None, &limit(exact)).unwrap();
    assert_eq!(capped, whole);
    let under = (frames - u64::from(FLAC_BLOCK)) as f64 / f64::from(FLAC_RATE);
    let (_, decoded, msg) = too_long(read_audio_bytes_with(flac, None, &limit(under)));
    assert!((decoded - under).abs() < 1e-9, "{decoded} {msg}");
}

#[test]
fn the_limit_counts_source_frames_not_samples_or_channels() {
    // 2 s of stereo at 8 kHz: 16 000 frames, 32 000 samples, 48 000 samples at 24 kHz.
    let tone = sine(440.0, 8_000, 16_000, 0.5);
    let stereo: Vec<f32> = tone.iter().flat_map(|&v| [v, -v * 0.5]).collect();
    let bytes = wav(8_000, 2, &stereo);
    let whole = read_audio_bytes(bytes.clone(), Some("wav")).unwrap();
    assert_eq!(whole.source_frames, 16_000);
    let capped = read_audio_bytes_with(bytes.clone(), Some("wav"), &limit(2.0)).unwrap();
    assert_eq!(capped, whole);
    let (max, decoded, msg) = too_long(read_audio_bytes_with(bytes, Some("wav"), &limit(1.9)));
    assert!(max == 1.9 && decoded <= 1.9, "{msg}");
    assert!(
        msg.contains("(wav) is longer than the 1.9 s limit"),
        "{msg}"
    );
}

#[test]
fn a_wav_whose_header_claims_4_gb_is_limited_by_what_decodes() {
    let mut bytes = wav(8_000, 1, &sine(300.0, 8_000, 80_000, 0.5));
    // RIFF and data chunk sizes that claim ~4 GB (the data chunk starts at byte 36 here).
    assert_eq!(&bytes[36..40], b"data");
    bytes[4..8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    bytes[40..44].copy_from_slice(&0xffff_ffc0u32.to_le_bytes());
    let whole = read_audio_bytes(bytes.clone(), Some("wav")).unwrap();
    assert_eq!(whole.source_frames, 80_000);
    let capped = read_audio_bytes_with(bytes.clone(), Some("wav"), &limit(11.0)).unwrap();
    assert_eq!(capped, whole);
    let (_, decoded, msg) = too_long(read_audio_bytes_with(bytes, Some("wav"), &limit(5.0)));
    assert!(decoded <= 5.0, "{msg}");
}

#[test]
fn ogg_opus_is_limited_after_pre_skip_and_end_trimming() {
    // Not a whole number of 80 ms packets: the last packet's padding is trimmed by its granule.
    let n = 10_000;
    let mut w = OggOpusWriter::new(32_000, 7).unwrap();
    w.push(&speech_like(SAMPLE_RATE, n)).unwrap();
    let ogg = w.finish().unwrap();
    let whole = read_audio_bytes(ogg.clone(), None).unwrap();
    assert_eq!(whole.samples.len(), n);
    let exact = n as f64 / f64::from(SAMPLE_RATE);
    let capped = read_audio_bytes_with(ogg.clone(), None, &limit(exact)).unwrap();
    assert_eq!(capped, whole);
    let (_, _, msg) = too_long(read_audio_bytes_with(
        ogg.clone(),
        None,
        &limit(exact - 1e-3),
    ));
    assert!(msg.contains("(ogg-opus) is longer than the"), "{msg}");
    // A limit well inside the stream stops there, at most one packet past it.
    let (_, decoded, msg) = too_long(read_audio_bytes_with(ogg, None, &limit(0.1)));
    assert!(decoded > 0.1 && decoded <= 0.1 + 0.12, "{msg}");
}

#[test]
fn every_fixture_obeys_the_limit_from_files_and_bytes() {
    for name in [
        "speech_44k1_stereo_s16.wav",
        "speech_48k_mono.flac",
        "speech_44k1_mono.mp3",
        "speech_22k05_mono_vorbis.ogg",
        "speech_48k_stereo.opus",
    ] {
        let whole = read_audio_file(fixture(name), None).unwrap();
        let capped = read_audio_file_with(fixture(name), None, &limit(2.0)).unwrap();
        assert_eq!(capped, whole, "{name}");
        let (max, _, msg) = too_long(read_audio_file_with(fixture(name), None, &limit(0.2)));
        assert!(
            max == 0.2 && msg.contains("longer than the 0.2 s limit"),
            "{name}: {msg}"
        );
        assert!(msg.contains(name), "{name}: {msg}");
        let bytes = std::fs::read(fixture(name)).unwrap();
        too_long(read_audio_bytes_with(bytes, None, &limit(0.2)));
    }
}
