//! Counters of the encode engine, rendered into `/metrics` beside the decoder's.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::engine::EncodeError;

/// Upper bounds (seconds) of the step-time histogram.
const STEP_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
];

#[derive(Default)]
pub struct EncodeMetrics {
    pub frames_encoded: AtomicU64,
    pub streams_opened: AtomicU64,
    pub wire_bytes_in: AtomicU64,
    pub wire_bytes_out: AtomicU64,
    steps: Mutex<StepStats>,
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

#[derive(Default)]
struct StepStats {
    count: u64,
    seconds: f64,
    frames: u64,
    buckets: [u64; 11],
}

impl EncodeMetrics {
    pub(crate) fn record_step(&self, frames: usize, took: Duration) {
        let secs = took.as_secs_f64();
        let mut s = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        s.count += 1;
        s.seconds += secs;
        s.frames += frames as u64;
        for (b, &le) in s.buckets.iter_mut().zip(STEP_BUCKETS) {
            if secs <= le {
                *b += 1;
            }
        }
    }

    /// Counts an ended or refused stream under its protocol code.
    pub fn count(&self, code: &'static str) {
        *self
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(code)
            .or_default() += 1;
    }

    pub(crate) fn count_error(&self, e: &EncodeError) {
        self.count(error_code(e));
    }

    /// Prometheus text for the encode engine.
    pub fn render(&self, live: usize, max: usize) -> String {
        let mut o = String::new();
        let r = Ordering::Relaxed;
        let gauge = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        let counter = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        gauge(
            &mut o,
            "chorus_encode_live_streams",
            "Encode streams holding a slot.",
            live as u64,
        );
        gauge(
            &mut o,
            "chorus_encode_free_slots",
            "Encode slots free.",
            (max - live.min(max)) as u64,
        );
        counter(
            &mut o,
            "chorus_encode_frames_total",
            "Frames encoded.",
            self.frames_encoded.load(r),
        );
        counter(
            &mut o,
            "chorus_encode_streams_opened_total",
            "Encode streams opened.",
            self.streams_opened.load(r),
        );
        self.render_wire(&mut o);
        let s = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            o,
            "# HELP chorus_encode_step_seconds Time of one encode step.\n# TYPE chorus_encode_step_seconds histogram"
        );
        for (b, le) in s.buckets.iter().zip(STEP_BUCKETS) {
            let _ = writeln!(o, "chorus_encode_step_seconds_bucket{{le=\"{le}\"}} {b}");
        }
        let _ = writeln!(
            o,
            "chorus_encode_step_seconds_bucket{{le=\"+Inf\"}} {}",
            s.count
        );
        let _ = writeln!(o, "chorus_encode_step_seconds_sum {}", s.seconds);
        let _ = writeln!(o, "chorus_encode_step_seconds_count {}", s.count);
        counter(
            &mut o,
            "chorus_encode_batch_frames_total",
            "Frames over all encode steps (divide by the step count for the mean batch).",
            s.frames,
        );
        drop(s);
        self.render_errors(&mut o);
        o
    }

    /// The wire-byte counters and the error counter alone: what a pool counts at its front, on
    /// connections, before or beside any device.
    pub fn render_front(&self) -> String {
        let mut o = String::new();
        self.render_wire(&mut o);
        self.render_errors(&mut o);
        o
    }

    fn render_wire(&self, o: &mut String) {
        let r = Ordering::Relaxed;
        let counter = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter(
            o,
            "chorus_encode_wire_bytes_in_total",
            "Audio bytes received by encode streams.",
            self.wire_bytes_in.load(r),
        );
        counter(
            o,
            "chorus_encode_wire_bytes_out_total",
            "Code bytes sent by encode streams.",
            self.wire_bytes_out.load(r),
        );
    }

    fn render_errors(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "# HELP chorus_encode_errors_total Encode streams ended or refused, by error code.\n# TYPE chorus_encode_errors_total counter"
        );
        for (kind, n) in self.errors.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(o, "chorus_encode_errors_total{{kind=\"{kind}\"}} {n}");
        }
    }
}

/// The protocol code of an engine error.
pub fn error_code(e: &EncodeError) -> &'static str {
    match e {
        EncodeError::Busy(_) => "busy",
        EncodeError::Draining => "draining",
        EncodeError::QueueFull(..) => "queue_full",
        EncodeError::SlowConsumer(_) => "slow_consumer",
        EncodeError::Failed(_) => "encode_failed",
        EncodeError::Finished | EncodeError::Invalid(_) => "internal",
    }
}
