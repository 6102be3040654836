//! Counters and histograms the engine and the server update (rendered by [`crate::prometheus`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds (seconds) of the step-time and delay histograms: 0.1 ms to 2.5 s.
const SECONDS_BOUNDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.08, 0.1, 0.25, 0.5, 1.0,
    2.5,
];
/// Upper bounds of the batch-size histogram.
const BATCH_BOUNDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A cumulative Prometheus histogram with fixed bounds.
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound plus the `+Inf` bucket (non-cumulative; summed when rendered).
    counts: Vec<AtomicU64>,
    /// Sum of observations, as f64 bits.
    sum: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Records one observation.
    pub fn observe(&self, value: f64) {
        let i = self
            .bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let mut cur = self.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(cur) + value).to_bits();
            match self
                .sum
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Sum of observations.
    pub fn sum(&self) -> f64 {
        f64::from_bits(self.sum.load(Ordering::Relaxed))
    }

    /// `(upper bound, cumulative count)` per bucket, the `+Inf` bucket last with bound `None`.
    pub(crate) fn cumulative(&self) -> impl Iterator<Item = (Option<f64>, u64)> + '_ {
        let bounds = self
            .bounds
            .iter()
            .map(|&b| Some(b))
            .chain(std::iter::once(None));
        bounds.zip(&self.counts).scan(0, |acc, (bound, c)| {
            *acc += c.load(Ordering::Relaxed);
            Some((bound, *acc))
        })
    }
}

/// Error counts by machine-readable kind.
#[derive(Default)]
pub struct ErrorCounts(Mutex<BTreeMap<&'static str, u64>>);

impl ErrorCounts {
    /// Counts one error of `kind`.
    pub fn inc(&self, kind: &'static str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(kind).or_insert(0) += 1;
    }

    /// The count of `kind` so far.
    pub fn get(&self, kind: &str) -> u64 {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(kind).copied().unwrap_or(0)
    }

    /// Every kind counted so far, in name order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().map(|(k, v)| (*k, *v)).collect()
    }
}

/// Everything `/metrics` reports besides the live gauges.
pub struct Metrics {
    pub frames_decoded: AtomicU64,
    pub streams_opened: AtomicU64,
    /// Frames whose PCM was ready more than one frame period (80 ms) after the frame fell due:
    /// its arrival, or one period after its stream's previous frame fell due if sent ahead.
    pub deadline_misses: AtomicU64,
    /// Frames handed out as copies because readers still held every pooled PCM block.
    pub pcm_copied_frames: AtomicU64,
    /// From a step's launch to its PCM being ready (queued behind the previous step included).
    pub step_seconds: Histogram,
    /// Device time of each step (CUDA events; the program's run time on the CPU). Its sum over
    /// the wall time is the share of time the device is busy.
    pub device_seconds: Histogram,
    /// Engine-thread time of each step spent on host work: picking frames, staging, launching and
    /// handing PCM out (not waiting for the device or for frames).
    pub host_seconds: Histogram,
    pub batch_size: Histogram,
    /// From a frame's arrival to the start of the step that decodes it.
    pub queue_delay_seconds: Histogram,
    /// From a frame's arrival to its PCM being handed to the stream.
    pub frame_latency_seconds: Histogram,
    pub errors: ErrorCounts,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            frames_decoded: AtomicU64::new(0),
            streams_opened: AtomicU64::new(0),
            deadline_misses: AtomicU64::new(0),
            pcm_copied_frames: AtomicU64::new(0),
            step_seconds: Histogram::new(SECONDS_BOUNDS),
            device_seconds: Histogram::new(SECONDS_BOUNDS),
            host_seconds: Histogram::new(SECONDS_BOUNDS),
            batch_size: Histogram::new(BATCH_BOUNDS),
            queue_delay_seconds: Histogram::new(SECONDS_BOUNDS),
            frame_latency_seconds: Histogram::new(SECONDS_BOUNDS),
            errors: ErrorCounts::default(),
        }
    }
}
