//! The speech engine's counters, gauges and histograms, rendered in the Prometheus text format
//! beside the decoder's (`chorus_tts_*`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use super::TtsErrorCode;
use crate::stage::counts::{Cancels, Refusals};
use crate::stage::histogram::Histogram;
use crate::stage::job::CancelKind;

/// Upper bounds (seconds) of the step-time histogram: 1 ms to 10 s (a step that admits a long
/// prompt on the CPU takes seconds).
static STEP_BOUNDS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upper bounds (seconds) of the time-to-first-audio histogram: 10 ms to 10 s around the 80 ms
/// of one frame.
static FIRST_AUDIO_BOUNDS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Live values the owner thread publishes after every step and admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TtsGauges {
    pub active_utterances: usize,
    pub step_utterances: usize,
    pub kv_in_use: usize,
    pub kv_available: usize,
}

const REFUSED: &str = "chorus_tts_utterances_refused_total";
const REFUSED_HELP: &str = "Speech requests that never started, by error code.";

/// Everything `/metrics` reports about speech.
pub struct TtsMetrics {
    slots: AtomicU64,
    started: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    cancelled: Cancels,
    refused: Refusals,
    frames: AtomicU64,
    steps: Histogram,
    first_audio: Histogram,
    active: AtomicU64,
    step_utterances: AtomicU64,
    kv_in_use: AtomicU64,
    kv_available: AtomicU64,
}

impl Default for TtsMetrics {
    fn default() -> Self {
        Self {
            slots: AtomicU64::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: Cancels::default(),
            refused: Refusals::default(),
            frames: AtomicU64::new(0),
            steps: Histogram::new(&STEP_BOUNDS),
            first_audio: Histogram::new(&FIRST_AUDIO_BOUNDS),
            active: AtomicU64::new(0),
            step_utterances: AtomicU64::new(0),
            kv_in_use: AtomicU64::new(0),
            kv_available: AtomicU64::new(0),
        }
    }
}

// SeqCst throughout: a scrape that sees a counter move also sees the gauges the owner thread
// published before it (an utterance counted as started is already counted as active).
fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::SeqCst)
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::SeqCst);
}

impl TtsMetrics {
    pub(crate) fn set_slots(&self, n: usize) {
        self.slots.store(n as u64, Ordering::SeqCst);
    }

    pub(crate) fn started(&self) {
        add(&self.started, 1);
    }

    pub(crate) fn finished(&self) {
        add(&self.finished, 1);
    }

    pub(crate) fn failed(&self) {
        add(&self.failed, 1);
    }

    pub(crate) fn cancelled(&self, kind: CancelKind) {
        self.cancelled.inc(kind);
    }

    pub(crate) fn frames(&self, n: usize) {
        add(&self.frames, n as u64);
    }

    /// Counts a request that never became a running utterance, by the error it got.
    pub fn refused(&self, code: TtsErrorCode) {
        self.refused.inc(code);
    }

    /// Requests refused with `code` so far.
    pub fn refused_count(&self, code: TtsErrorCode) -> u64 {
        self.refused.get(code)
    }

    pub(crate) fn observe_step(&self, seconds: f64) {
        self.steps.observe(seconds);
    }

    pub(crate) fn observe_first_audio(&self, seconds: f64) {
        self.first_audio.observe(seconds);
    }

    pub(crate) fn set_gauges(&self, g: TtsGauges) {
        let set = |a: &AtomicU64, v: usize| a.store(v as u64, Ordering::SeqCst);
        set(&self.active, g.active_utterances);
        set(&self.step_utterances, g.step_utterances);
        set(&self.kv_in_use, g.kv_in_use);
        set(&self.kv_available, g.kv_available);
    }

    /// The gauges as last published.
    pub fn gauges(&self) -> TtsGauges {
        let get = |a: &AtomicU64| load(a) as usize;
        TtsGauges {
            active_utterances: get(&self.active),
            step_utterances: get(&self.step_utterances),
            kv_in_use: get(&self.kv_in_use),
            kv_available: get(&self.kv_available),
        }
    }

    /// Appends the refusal counter alone (a pool's refusals before any device).
    pub(crate) fn render_refused(&self, out: &mut String) {
        self.refused.render(out, REFUSED, REFUSED_HELP);
    }

    /// Appends every speech metric to `out` in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let rows: [(&str, &str, &str, &AtomicU64); 9] = [
            (
                "chorus_tts_utterance_slots",
                "gauge",
                "Utterances the speech stage runs at once.",
                &self.slots,
            ),
            (
                "chorus_tts_active_utterances",
                "gauge",
                "Utterances running now.",
                &self.active,
            ),
            (
                "chorus_tts_step_utterances",
                "gauge",
                "Utterances in the last speech step.",
                &self.step_utterances,
            ),
            (
                "chorus_tts_kv_blocks_in_use",
                "gauge",
                "KV blocks holding utterance positions.",
                &self.kv_in_use,
            ),
            (
                "chorus_tts_kv_blocks_available",
                "gauge",
                "KV blocks neither in use nor reserved by running utterances.",
                &self.kv_available,
            ),
            (
                "chorus_tts_utterances_started_total",
                "counter",
                "Utterances admitted.",
                &self.started,
            ),
            (
                "chorus_tts_utterances_finished_total",
                "counter",
                "Utterances ended by their end frame or the length cap.",
                &self.finished,
            ),
            (
                "chorus_tts_utterances_failed_total",
                "counter",
                "Utterances ended by a failed step or a shutdown.",
                &self.failed,
            ),
            (
                "chorus_tts_frames_total",
                "counter",
                "Speech frames generated (80 ms of audio each).",
                &self.frames,
            ),
        ];
        for (name, kind, help, v) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                load(v)
            );
        }
        self.cancelled.render(
            out,
            "chorus_tts_utterances_cancelled_total",
            "Running utterances cancelled, by reason.",
        );
        self.refused.render(out, REFUSED, REFUSED_HELP);
        self.first_audio.render(
            out,
            "chorus_tts_first_audio_seconds",
            "Time from an accepted request to its first frame of audio handed to its connection.",
        );
        self.steps.render(
            out,
            "chorus_tts_step_seconds",
            "Speech step time (admissions and whole prefills excluded; a joining utterance's prompt chunks ride in steps).",
        );
    }
}
