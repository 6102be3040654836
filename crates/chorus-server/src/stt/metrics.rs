//! The transcription engine's counters, gauges and histograms, rendered in the Prometheus text
//! format beside the decoder's (`chorus_stt_*`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stage::counts::{Cancels, Refusals};
use crate::stage::error::StageErrorCode;
use crate::stage::histogram::Histogram;
use crate::stage::job::CancelKind;

/// Upper bounds (seconds) of the step-time histogram: 1 ms to 1 s around the 80 ms a step has.
static STEP_BOUNDS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0,
];
/// Upper bounds (seconds) of the word-latency histogram: from the end of the frame a word was
/// decided in to the word on the socket, 5 ms to 5 s.
static WORD_LATENCY_BOUNDS: [f64; 12] = [
    0.005, 0.01, 0.02, 0.04, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0,
];

const REFUSED: &str = "chorus_stt_streams_refused_total";
const REFUSED_HELP: &str = "Transcription requests that never started, by error code.";

/// Everything `/metrics` reports about transcription.
pub struct SttMetrics {
    slots: AtomicU64,
    active: AtomicU64,
    step_streams: AtomicU64,
    started: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    cancelled: Cancels,
    refused: Refusals,
    frames: AtomicU64,
    words: AtomicU64,
    steps: Histogram,
    word_latency: Histogram,
}

impl Default for SttMetrics {
    fn default() -> Self {
        Self {
            slots: AtomicU64::new(0),
            active: AtomicU64::new(0),
            step_streams: AtomicU64::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: Cancels::default(),
            refused: Refusals::default(),
            frames: AtomicU64::new(0),
            words: AtomicU64::new(0),
            steps: Histogram::new(&STEP_BOUNDS),
            word_latency: Histogram::new(&WORD_LATENCY_BOUNDS),
        }
    }
}

// SeqCst throughout: a scrape that sees a counter move also sees the gauges published before it.
fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::SeqCst)
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::SeqCst);
}

impl SttMetrics {
    pub(crate) fn set_slots(&self, n: usize) {
        self.slots.store(n as u64, Ordering::SeqCst);
    }

    pub(crate) fn set_active(&self, streams: usize, in_step: usize) {
        self.active.store(streams as u64, Ordering::SeqCst);
        self.step_streams.store(in_step as u64, Ordering::SeqCst);
    }

    /// Streams running now, as last published.
    pub fn active(&self) -> usize {
        load(&self.active) as usize
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

    /// Counts a word sent to a client, `seconds` after the end of the frame it was decided in.
    pub(crate) fn word_sent(&self, seconds: Option<f64>) {
        add(&self.words, 1);
        if let Some(s) = seconds {
            self.word_latency.observe(s);
        }
    }

    /// Counts a request that never became a running stream, by the error it got.
    pub fn refused(&self, code: StageErrorCode) {
        self.refused.inc(code);
    }

    /// Requests refused with `code` so far.
    pub fn refused_count(&self, code: StageErrorCode) -> u64 {
        self.refused.get(code)
    }

    pub(crate) fn observe_step(&self, seconds: f64) {
        self.steps.observe(seconds);
    }

    /// Appends the refusal counter alone (a pool's refusals before any device).
    pub(crate) fn render_refused(&self, out: &mut String) {
        self.refused.render(out, REFUSED, REFUSED_HELP);
    }

    /// Appends every transcription metric to `out` in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let rows: [(&str, &str, &str, &AtomicU64); 8] = [
            (
                "chorus_stt_stream_slots",
                "gauge",
                "Streams the transcription stage runs at once.",
                &self.slots,
            ),
            (
                "chorus_stt_active_streams",
                "gauge",
                "Transcription streams running now.",
                &self.active,
            ),
            (
                "chorus_stt_step_streams",
                "gauge",
                "Streams in the last transcription step.",
                &self.step_streams,
            ),
            (
                "chorus_stt_streams_started_total",
                "counter",
                "Transcription streams admitted.",
                &self.started,
            ),
            (
                "chorus_stt_streams_finished_total",
                "counter",
                "Transcription streams ended by their client's `end` (or the shutdown's flush).",
                &self.finished,
            ),
            (
                "chorus_stt_streams_failed_total",
                "counter",
                "Transcription streams ended by bad input past admission, a failed step or a shutdown.",
                &self.failed,
            ),
            (
                "chorus_stt_frames_total",
                "counter",
                "Audio frames transcribed (80 ms each).",
                &self.frames,
            ),
            (
                "chorus_stt_words_total",
                "counter",
                "Words sent to clients; rate() of it is the words per second.",
                &self.words,
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
            "chorus_stt_streams_cancelled_total",
            "Running transcription streams cancelled, by reason.",
        );
        self.refused.render(out, REFUSED, REFUSED_HELP);
        self.steps.render(
            out,
            "chorus_stt_step_seconds",
            "Transcription step time (Mimi encode and LM step of every stream with a frame).",
        );
        self.word_latency.render(
            out,
            "chorus_stt_word_latency_seconds",
            "From the end of the audio frame a word was decided in (its arrival) to the word written to the socket.",
        );
    }
}
