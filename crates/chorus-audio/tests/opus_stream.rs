//! Opus streaming: frame-by-frame encode/decode quality, delay, packet size, errors, loss.

mod common;

use chorus_audio::{
    libopus_version, read_audio_file, Error, OpusApplication, OpusFrameDecoder, OpusFrameEncoder,
    FRAME_SAMPLES, OPUS_MAX_BITRATE_BPS, OPUS_MAX_COMPLEXITY, OPUS_MIN_BITRATE_BPS, SAMPLE_RATE,
};
use common::{best_lag, fixture, sine, snr_db, speech_like};

/// Opus's lookahead at 24 kHz: 2.5 ms of analysis plus 4 ms of delay compensation.
const EXPECTED_LOOKAHEAD: usize = 156;
/// SILK's pitch-synchronous coding can shift the best-correlation lag of speech by a sample.
const MAX_LAG_SLACK: usize = 2;

/// Encodes `signal` frame by frame (zero-padding the last frame) and decodes every packet.
/// Returns (decoded, packet sizes, lookahead).
fn roundtrip(signal: &[f32], bitrate: u32, app: OpusApplication) -> (Vec<f32>, Vec<usize>, usize) {
    let mut enc = OpusFrameEncoder::with_application(bitrate, app).unwrap();
    let mut dec = OpusFrameDecoder::new().unwrap();
    let mut packet = Vec::new();
    let mut decoded = Vec::new();
    let mut sizes = Vec::new();
    let mut frame = vec![0.0f32; FRAME_SAMPLES];
    // One extra frame of silence flushes the lookahead.
    for chunk in signal.chunks(FRAME_SAMPLES).chain([[0.0f32; 0].as_slice()]) {
        frame.fill(0.0);
        frame[..chunk.len()].copy_from_slice(chunk);
        packet.clear();
        let n = enc.encode(&frame, &mut packet).unwrap();
        assert_eq!(n, packet.len());
        sizes.push(n);
        assert_eq!(
            OpusFrameDecoder::packet_samples(&packet).unwrap(),
            FRAME_SAMPLES
        );
        let got = dec.decode(&packet, &mut decoded).unwrap();
        assert_eq!(got, FRAME_SAMPLES, "one packet decodes to one 80 ms frame");
    }
    (decoded, sizes, enc.lookahead())
}

/// Aligns `decoded` by the codec delay and returns (measured delay, correlation, SNR in dB).
fn quality(signal: &[f32], decoded: &[f32]) -> (isize, f32, f32) {
    let (lag, corr) = best_lag(signal, decoded, 400);
    let aligned = &decoded[lag.max(0) as usize..];
    (lag, corr, snr_db(signal, aligned))
}

#[test]
fn library_is_the_vendored_libopus() {
    assert_eq!(libopus_version(), "libopus 1.6.1");
}

#[test]
fn sine_440_survives_at_stated_quality() {
    let signal = sine(440.0, SAMPLE_RATE, SAMPLE_RATE as usize * 2, 0.5);
    let (decoded, sizes, lookahead) = roundtrip(&signal, 32_000, OpusApplication::Audio);
    assert_eq!(lookahead, EXPECTED_LOOKAHEAD);
    assert_eq!(decoded.len(), (sizes.len()) * FRAME_SAMPLES);
    let (lag, corr, snr) = quality(&signal, &decoded);
    // Measured: correlation 0.9998, SNR 34.6 dB.
    assert_eq!(lag, EXPECTED_LOOKAHEAD as isize, "measured codec delay");
    assert!(corr > 0.999, "correlation {corr}");
    assert!(snr > 25.0, "SNR {snr} dB");
}

#[test]
fn speech_like_signal_survives_at_stated_quality() {
    let signal = speech_like(SAMPLE_RATE, SAMPLE_RATE as usize * 2);
    // Measured: 24 kb/s 0.971 / 12.3 dB, 64 kb/s 0.998 / 24.8 dB.
    for (bitrate, min_corr, min_snr) in [(24_000u32, 0.95f32, 9.0f32), (64_000, 0.995, 20.0)] {
        let (decoded, _, _) = roundtrip(&signal, bitrate, OpusApplication::Audio);
        let (lag, corr, snr) = quality(&signal, &decoded);
        eprintln!("speech-like {bitrate}: lag {lag} corr {corr} snr {snr}");
        assert!(
            lag.abs_diff(EXPECTED_LOOKAHEAD as isize) <= MAX_LAG_SLACK,
            "lag {lag}"
        );
        assert!(corr > min_corr, "{bitrate} bps: correlation {corr}");
        assert!(snr > min_snr, "{bitrate} bps: SNR {snr} dB");
    }
}

#[test]
fn real_speech_survives_at_stated_quality() {
    let speech = read_audio_file(fixture("speech_48k_mono.flac"), None)
        .unwrap()
        .samples;
    // Measured at 32 kb/s: Voip 0.964 / 11.5 dB, Audio 0.992 / 18.0 dB, LowDelay 0.991 / 17.3 dB
    // (lookahead 60: no SILK delay compensation).
    for (app, min_corr, min_snr) in [
        (OpusApplication::Voip, 0.95f32, 8.0f32),
        (OpusApplication::Audio, 0.98, 14.0),
        (OpusApplication::LowDelay, 0.98, 14.0),
    ] {
        let (decoded, _, lookahead) = roundtrip(&speech, 32_000, app);
        let (lag, corr, snr) = quality(&speech, &decoded);
        eprintln!("speech {app:?}: lookahead {lookahead} lag {lag} corr {corr} snr {snr}");
        assert!(
            lag.abs_diff(lookahead as isize) <= MAX_LAG_SLACK,
            "{app:?}: lag {lag}"
        );
        assert!(corr > min_corr, "{app:?}: correlation {corr}");
        assert!(snr > min_snr, "{app:?}: SNR {snr} dB");
    }
}

#[test]
fn packet_size_follows_the_bitrate() {
    let signal = speech_like(SAMPLE_RATE, SAMPLE_RATE as usize * 4);
    for bitrate in [16_000u32, 32_000, 64_000, 128_000] {
        let (_, sizes, _) = roundtrip(&signal, bitrate, OpusApplication::Audio);
        let target = bitrate as f32 * 0.08 / 8.0;
        // Skip the first packet (encoder warm-up) and the flush packet. Measured: within 4%.
        let body = &sizes[1..sizes.len() - 1];
        let mean = body.iter().sum::<usize>() as f32 / body.len() as f32;
        assert!(
            (mean - target).abs() < 0.25 * target,
            "{bitrate} bps: mean packet {mean} bytes, target {target}"
        );
    }
}

#[test]
fn bitrate_is_validated() {
    for bad in [0, OPUS_MIN_BITRATE_BPS - 1, OPUS_MAX_BITRATE_BPS + 1] {
        let err = OpusFrameEncoder::new(bad).err().unwrap();
        assert!(
            matches!(err, Error::Bitrate { bitrate_bps, .. } if bitrate_bps == bad),
            "{err}"
        );
        assert!(err.to_string().contains(&bad.to_string()), "{err}");
    }
    for good in [OPUS_MIN_BITRATE_BPS, 24_000, OPUS_MAX_BITRATE_BPS] {
        assert_eq!(OpusFrameEncoder::new(good).unwrap().bitrate_bps(), good);
    }
}

#[test]
fn wrong_frame_length_and_non_finite_samples_are_errors() {
    let mut enc = OpusFrameEncoder::new(32_000).unwrap();
    let mut out = Vec::new();
    let err = enc.encode(&[0.0; 960], &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            Error::FrameLength {
                expected: FRAME_SAMPLES,
                found: 960,
                ..
            }
        ),
        "{err}"
    );
    let mut frame = vec![0.0f32; FRAME_SAMPLES];
    frame[7] = f32::NAN;
    let err = enc.encode(&frame, &mut out).unwrap_err();
    assert!(err.to_string().contains("sample 7"), "{err}");
    assert!(out.is_empty(), "nothing is written on error");
}

#[test]
fn garbage_and_empty_packets_are_errors_not_panics() {
    let mut dec = OpusFrameDecoder::new().unwrap();
    let mut out = vec![1.0f32];
    assert!(matches!(
        dec.decode(&[], &mut out),
        Err(Error::Input { .. })
    ));
    // TOC byte for a code-3 packet with a frame count of 0 is invalid.
    let err = dec.decode(&[0x03, 0x00], &mut out).unwrap_err();
    assert!(matches!(err, Error::Opus { code: -4, .. }), "{err}");
    assert_eq!(out, vec![1.0], "output untouched on error");
}

#[test]
fn complexity_changes_the_encoding_and_is_range_checked() {
    let signal = speech_like(SAMPLE_RATE, FRAME_SAMPLES * 25);
    let mut streams = Vec::new();
    for complexity in [0u8, OPUS_MAX_COMPLEXITY] {
        let mut enc = OpusFrameEncoder::new(24_000).unwrap();
        enc.set_complexity(complexity).unwrap();
        let mut dec = OpusFrameDecoder::new().unwrap();
        let (mut packets, mut decoded) = (Vec::new(), Vec::new());
        for frame in signal.chunks(FRAME_SAMPLES) {
            let start = packets.len();
            enc.encode(frame, &mut packets).unwrap();
            dec.decode(&packets[start..], &mut decoded).unwrap();
        }
        // Both settings are usable: measured correlation 0.96-0.97.
        let (_, corr, _) = quality(&signal[..signal.len() - FRAME_SAMPLES], &decoded);
        assert!(corr > 0.9, "complexity {complexity}: correlation {corr}");
        streams.push(packets);
    }
    assert_ne!(
        streams[0], streams[1],
        "complexity 0 and 10 encode differently"
    );
    let mut enc = OpusFrameEncoder::new(24_000).unwrap();
    assert!(matches!(
        enc.set_complexity(OPUS_MAX_COMPLEXITY + 1),
        Err(Error::Input { .. })
    ));
}

#[test]
fn encoder_reset_forgets_history() {
    let signal = speech_like(SAMPLE_RATE, FRAME_SAMPLES * 3);
    let mut enc = OpusFrameEncoder::new(32_000).unwrap();
    let mut first = Vec::new();
    enc.encode(&signal[..FRAME_SAMPLES], &mut first).unwrap();
    let mut later = Vec::new();
    enc.encode(&signal[FRAME_SAMPLES..2 * FRAME_SAMPLES], &mut later)
        .unwrap();
    enc.reset().unwrap();
    let mut again = Vec::new();
    enc.encode(&signal[..FRAME_SAMPLES], &mut again).unwrap();
    assert_eq!(first, again, "after reset the encoder behaves as new");
}

#[test]
fn lost_packets_are_concealed() {
    let signal = sine(440.0, SAMPLE_RATE, FRAME_SAMPLES * 8, 0.5);
    let mut enc = OpusFrameEncoder::new(32_000).unwrap();
    let mut dec = OpusFrameDecoder::new().unwrap();
    let mut out = Vec::new();
    let mut packet = Vec::new();
    for (i, frame) in signal.chunks(FRAME_SAMPLES).enumerate() {
        packet.clear();
        enc.encode(frame, &mut packet).unwrap();
        if i == 5 {
            assert_eq!(
                dec.decode_lost(FRAME_SAMPLES, &mut out).unwrap(),
                FRAME_SAMPLES
            );
        } else {
            dec.decode(&packet, &mut out).unwrap();
        }
    }
    assert_eq!(out.len(), signal.len());
    // Concealment continues the tone instead of leaving a hole.
    let hole = &out[5 * FRAME_SAMPLES..5 * FRAME_SAMPLES + 480];
    assert!(
        common::rms(hole) > 0.1,
        "concealed rms {}",
        common::rms(hole)
    );
    assert!(matches!(
        dec.decode_lost(100, &mut out),
        Err(Error::Input { .. })
    ));
    dec.reset().unwrap();
}
