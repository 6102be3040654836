//! Signal helpers shared by the integration tests.
#![allow(dead_code)]

use std::f32::consts::PI;
use std::path::PathBuf;

/// Path of a committed fixture under `tests/data/`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// `n` samples of `amp * sin(2π f t)` at `rate`.
/// Computed in f64: f32 phase of a long tone is only accurate to about -60 dB.
pub fn sine(freq: f32, rate: u32, n: usize, amp: f32) -> Vec<f32> {
    let w = 2.0 * std::f64::consts::PI * f64::from(freq) / f64::from(rate);
    (0..n)
        .map(|i| (f64::from(amp) * (w * i as f64).sin()) as f32)
        .collect()
}

/// A speech-like test signal at `rate`: a 120 Hz pulse train (glottal source) through two
/// formant resonators, with a slow amplitude envelope (syllables).
pub fn speech_like(rate: u32, n: usize) -> Vec<f32> {
    let fs = rate as f32;
    let resonator = |f: f32, bw: f32| {
        let r = (-PI * bw / fs).exp();
        (2.0 * r * (2.0 * PI * f / fs).cos(), -r * r)
    };
    let (a1, b1) = resonator(700.0, 130.0);
    let (a2, b2) = resonator(1_200.0, 70.0);
    let period = (fs / 120.0) as usize;
    let (mut y1, mut y1p, mut y2, mut y2p) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let x = if i % period == 0 { 1.0 } else { 0.0 };
        let v1 = x + a1 * y1 + b1 * y1p;
        y1p = y1;
        y1 = v1;
        let v2 = v1 + a2 * y2 + b2 * y2p;
        y2p = y2;
        y2 = v2;
        let env = 0.5 - 0.5 * (2.0 * PI * 3.0 * i as f32 / fs).cos();
        out.push(v2 * env);
    }
    let peak = out.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-9);
    out.iter().map(|v| 0.5 * v / peak).collect()
}

pub fn rms(x: &[f32]) -> f32 {
    (x.iter().map(|v| v * v).sum::<f32>() / x.len().max(1) as f32).sqrt()
}

/// Amplitude of the `freq` component of `x` (single-bin DFT, exact for whole periods).
pub fn tone_amplitude(x: &[f32], freq: f32, rate: u32) -> f32 {
    let (mut re, mut im) = (0.0f64, 0.0f64);
    for (i, v) in x.iter().enumerate() {
        let ph = 2.0 * std::f64::consts::PI * f64::from(freq) * i as f64 / f64::from(rate);
        re += f64::from(*v) * ph.cos();
        im += f64::from(*v) * ph.sin();
    }
    (2.0 * (re * re + im * im).sqrt() / x.len() as f64) as f32
}

/// The frequency among `candidates` (Hz) with the strongest component in `x`.
pub fn dominant_freq(x: &[f32], rate: u32, candidates: impl Iterator<Item = f32>) -> f32 {
    candidates
        .map(|f| (f, tone_amplitude(x, f, rate)))
        .fold((0.0, -1.0), |best, c| if c.1 > best.1 { c } else { best })
        .0
}

/// Normalised correlation of `a` and `b` over their common length.
pub fn correlation(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let ea: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    let eb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum();
    (dot / (ea * eb).sqrt().max(1e-30)) as f32
}

/// The lag in `[-max_lag, max_lag]` that best aligns `b` to `a` (b[i + lag] ≈ a[i]) and the
/// correlation there.
pub fn best_lag(a: &[f32], b: &[f32], max_lag: isize) -> (isize, f32) {
    let mut best = (0, f32::MIN);
    for lag in -max_lag..=max_lag {
        let c = if lag >= 0 {
            correlation(a, &b[lag as usize..])
        } else {
            correlation(&a[(-lag) as usize..], b)
        };
        if c > best.1 {
            best = (lag, c);
        }
    }
    best
}

/// Signal-to-noise ratio in dB of `decoded` against `reference` over their common length.
pub fn snr_db(reference: &[f32], decoded: &[f32]) -> f32 {
    let n = reference.len().min(decoded.len());
    let sig: f64 = reference[..n].iter().map(|x| f64::from(*x).powi(2)).sum();
    let noise: f64 = reference[..n]
        .iter()
        .zip(&decoded[..n])
        .map(|(x, y)| f64::from(x - y).powi(2))
        .sum();
    (10.0 * (sig / noise.max(1e-30)).log10()) as f32
}

mod flac;
#[allow(unused_imports)] // not every test file writes FLACs
pub use flac::{silent_flac, FLAC_BLOCK};
