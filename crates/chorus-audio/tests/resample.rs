//! `resample`: frequency, amplitude, anti-aliasing, exact length and zero delay.

mod common;

use chorus_audio::{resample, Error, SAMPLE_RATE};
use common::{best_lag, dominant_freq, rms, sine, tone_amplitude};

/// Amplitude error allowed for an in-band tone (measured: under 1e-6 of 0.5).
const AMPLITUDE_TOLERANCE: f32 = 1e-3;
/// Largest rms allowed for what is left after subtracting the ideal 24 kHz tone (measured: ~5e-7).
const RESIDUAL_TOLERANCE: f32 = 1e-4;
/// Level a tone above the 12 kHz Nyquist may keep after resampling (measured: below -140 dB).
const STOPBAND_DB: f32 = -100.0;

#[test]
fn one_khz_sine_keeps_frequency_and_amplitude_from_common_rates() {
    for rate in [44_100u32, 48_000, 16_000, 8_000, 22_050, 32_000, 96_000] {
        let n = rate as usize; // one second
        let out = resample(&sine(1_000.0, rate, n, 0.5), rate, SAMPLE_RATE).unwrap();
        assert_eq!(out.len(), SAMPLE_RATE as usize, "{rate} Hz: length");
        // Skip the edges (the clip starts and stops abruptly) and measure whole periods.
        let mid = &out[1_200..1_200 + 21_600];
        let f = dominant_freq(
            mid,
            SAMPLE_RATE,
            (900..=1_100).step_by(10).map(|f| f as f32),
        );
        assert_eq!(f, 1_000.0, "{rate} Hz: dominant frequency");
        let amp = tone_amplitude(mid, 1_000.0, SAMPLE_RATE);
        assert!(
            (amp - 0.5).abs() < AMPLITUDE_TOLERANCE,
            "{rate} Hz: amplitude {amp}"
        );
        // Nothing else: the residual after removing the tone is tiny.
        let reference = sine(1_000.0, SAMPLE_RATE, out.len(), 0.5);
        let residual: Vec<f32> = mid
            .iter()
            .zip(&reference[1_200..1_200 + 21_600])
            .map(|(a, b)| a - b)
            .collect();
        assert!(
            rms(&residual) < RESIDUAL_TOLERANCE,
            "{rate} Hz: residual rms {}",
            rms(&residual)
        );
    }
}

#[test]
fn content_above_the_new_nyquist_is_removed() {
    // 15 kHz and 20 kHz are representable at 48/44.1 kHz but above 12 kHz, the 24 kHz Nyquist.
    for (rate, freq) in [
        (48_000u32, 15_000.0f32),
        (44_100, 20_000.0),
        (48_000, 13_000.0),
    ] {
        let out = resample(&sine(freq, rate, rate as usize, 0.5), rate, SAMPLE_RATE).unwrap();
        let mid = &out[2_400..out.len() - 2_400];
        let level_db = 20.0 * (rms(mid) / (0.5 / 2f32.sqrt())).log10();
        assert!(
            level_db < STOPBAND_DB,
            "{freq} Hz from {rate} Hz: {level_db:.1} dB"
        );
    }
}

#[test]
fn passband_is_flat_up_to_eleven_khz() {
    for freq in [5_000.0f32, 8_000.0, 10_000.0, 11_000.0] {
        let out = resample(&sine(freq, 48_000, 48_000, 0.5), 48_000, SAMPLE_RATE).unwrap();
        let amp = tone_amplitude(&out[1_200..22_800], freq, SAMPLE_RATE);
        assert!(
            (amp - 0.5).abs() < AMPLITUDE_TOLERANCE,
            "{freq} Hz: amplitude {amp}"
        );
    }
}

#[test]
fn output_length_is_rounded_ratio_for_any_input_length() {
    for (rate, n) in [
        (44_100u32, 1usize),
        (44_100, 147),
        (44_100, 1_000),
        (48_000, 3),
        (16_000, 12_345),
        (8_000, 1),
        (22_051, 5_000),
    ] {
        let out = resample(&vec![0.1; n], rate, SAMPLE_RATE).unwrap();
        let expected = ((n as u64 * 24_000 + rate as u64 / 2) / rate as u64) as usize;
        assert_eq!(out.len(), expected, "{n} samples at {rate} Hz");
    }
    assert!(resample(&[], 44_100, SAMPLE_RATE).unwrap().is_empty());
}

#[test]
fn no_leading_delay_and_no_lost_tail() {
    // A burst of 1 kHz in the middle of silence must come out at the same time position.
    for rate in [44_100u32, 48_000, 16_000, 8_000] {
        let n = rate as usize / 2;
        let mut input = vec![0.0f32; n];
        let start = n / 4;
        let burst = sine(1_000.0, rate, n / 4, 0.5);
        input[start..start + burst.len()].copy_from_slice(&burst);
        let out = resample(&input, rate, SAMPLE_RATE).unwrap();
        let mut reference = vec![0.0f32; out.len()];
        let ref_start = start * SAMPLE_RATE as usize / rate as usize;
        let ref_burst = sine(
            1_000.0,
            SAMPLE_RATE,
            burst.len() * 24_000 / rate as usize,
            0.5,
        );
        reference[ref_start..ref_start + ref_burst.len()].copy_from_slice(&ref_burst);
        let (lag, corr) = best_lag(&reference, &out, 30);
        assert!(lag.abs() <= 1, "{rate} Hz: output lags by {lag} samples");
        assert!(corr > 0.99, "{rate} Hz: correlation {corr}");

        // A signal that runs to the very end keeps its last samples.
        let tone = sine(1_000.0, rate, n, 0.5);
        let out = resample(&tone, rate, SAMPLE_RATE).unwrap();
        let tail = &out[out.len() - 240..];
        assert!(rms(tail) > 0.3, "{rate} Hz: tail rms {}", rms(tail));
    }
}

#[test]
fn equal_rates_pass_through_untouched() {
    let x = sine(440.0, SAMPLE_RATE, 5_000, 0.7);
    assert_eq!(resample(&x, SAMPLE_RATE, SAMPLE_RATE).unwrap(), x);
}

#[test]
fn downsampling_to_other_rates_works_too() {
    let out = resample(&sine(1_000.0, 24_000, 24_000, 0.5), 24_000, 16_000).unwrap();
    assert_eq!(out.len(), 16_000);
    let amp = tone_amplitude(&out[800..15_200], 1_000.0, 16_000);
    assert!((amp - 0.5).abs() < AMPLITUDE_TOLERANCE, "amplitude {amp}");
}

#[test]
fn invalid_rates_are_errors_naming_the_rate() {
    let err = resample(&[0.0; 4], 0, SAMPLE_RATE).unwrap_err();
    assert!(matches!(err, Error::Resample { from: 0, .. }));
    assert!(err.to_string().contains("0 Hz"), "{err}");
}
