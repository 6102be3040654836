//! The music engine's counters and gauges, rendered in the Prometheus text format beside the
//! decoder's (`chorus_music_*`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::MusicErrorCode;
use crate::stage::counts::{Cancels, Refusals};
use crate::stage::histogram::Histogram;
use crate::stage::job::CancelKind;

/// Upper bounds (seconds) of the step-time histogram: 1 ms to 10 s (a prefill-heavy step of the
/// real model on the CPU takes seconds).
static STEP_BOUNDS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const REFUSED: &str = "chorus_music_songs_refused_total";
const REFUSED_HELP: &str = "Music requests that never started, by error code.";

/// Live values the engine thread publishes after every step and admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MusicGauges {
    pub active_songs: usize,
    pub step_songs: usize,
    pub kv_in_use: usize,
    pub kv_available: usize,
    pub kv_usable: usize,
}

/// Everything `/metrics` reports about music.
pub struct MusicMetrics {
    song_slots: AtomicU64,
    started: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    cancelled: Cancels,
    refused: Refusals,
    frames: AtomicU64,
    steps: Histogram,
    active_songs: AtomicU64,
    step_songs: AtomicU64,
    kv_in_use: AtomicU64,
    kv_available: AtomicU64,
    kv_usable: AtomicU64,
}

impl Default for MusicMetrics {
    fn default() -> Self {
        Self {
            song_slots: AtomicU64::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            cancelled: Default::default(),
            refused: Default::default(),
            frames: AtomicU64::new(0),
            steps: Histogram::new(&STEP_BOUNDS),
            active_songs: AtomicU64::new(0),
            step_songs: AtomicU64::new(0),
            kv_in_use: AtomicU64::new(0),
            kv_available: AtomicU64::new(0),
            kv_usable: AtomicU64::new(0),
        }
    }
}

// SeqCst throughout: a scrape that sees a counter move also sees the gauges the engine published
// before it (a song counted as started is already counted as active).
fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::SeqCst)
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::SeqCst);
}

impl MusicMetrics {
    pub(crate) fn set_song_slots(&self, n: usize) {
        self.song_slots.store(n as u64, Ordering::SeqCst);
    }

    pub(crate) fn song_started(&self) {
        add(&self.started, 1);
    }

    pub(crate) fn song_finished(&self) {
        add(&self.finished, 1);
    }

    pub(crate) fn song_failed(&self) {
        add(&self.failed, 1);
    }

    pub(crate) fn song_cancelled(&self, kind: CancelKind) {
        self.cancelled.inc(kind);
    }

    pub(crate) fn frames(&self, n: usize) {
        add(&self.frames, n as u64);
    }

    /// Counts a request that never became a running song, by the error it got.
    pub fn refused(&self, code: MusicErrorCode) {
        self.refused.inc(code);
    }

    /// Requests refused with `code` so far.
    pub fn refused_count(&self, code: MusicErrorCode) -> u64 {
        self.refused.get(code)
    }

    /// Records one step's time (engine thread only).
    pub(crate) fn observe_step(&self, seconds: f64) {
        self.steps.observe(seconds);
    }

    pub(crate) fn set_gauges(&self, g: MusicGauges) {
        let set = |a: &AtomicU64, v: usize| a.store(v as u64, Ordering::SeqCst);
        set(&self.active_songs, g.active_songs);
        set(&self.step_songs, g.step_songs);
        set(&self.kv_in_use, g.kv_in_use);
        set(&self.kv_available, g.kv_available);
        set(&self.kv_usable, g.kv_usable);
    }

    /// The gauges as last published.
    pub fn gauges(&self) -> MusicGauges {
        let get = |a: &AtomicU64| load(a) as usize;
        MusicGauges {
            active_songs: get(&self.active_songs),
            step_songs: get(&self.step_songs),
            kv_in_use: get(&self.kv_in_use),
            kv_available: get(&self.kv_available),
            kv_usable: get(&self.kv_usable),
        }
    }

    /// Appends the refusal counter alone (a pool's refusals before any device).
    pub(crate) fn render_refused(&self, out: &mut String) {
        self.refused.render(out, REFUSED, REFUSED_HELP);
    }

    /// Appends every music metric to `out` in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let mut one = |name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        one(
            "chorus_music_song_slots",
            "gauge",
            "Songs the music stage runs at once.",
            load(&self.song_slots),
        );
        one(
            "chorus_music_active_songs",
            "gauge",
            "Songs running now.",
            load(&self.active_songs),
        );
        one(
            "chorus_music_step_songs",
            "gauge",
            "Songs in the last music step.",
            load(&self.step_songs),
        );
        one(
            "chorus_music_kv_blocks_in_use",
            "gauge",
            "KV blocks holding song positions.",
            load(&self.kv_in_use),
        );
        one(
            "chorus_music_kv_blocks_available",
            "gauge",
            "KV blocks neither in use nor reserved by running songs.",
            load(&self.kv_available),
        );
        one(
            "chorus_music_kv_blocks_usable",
            "gauge",
            "KV blocks in the pool (the null block excluded).",
            load(&self.kv_usable),
        );
        one(
            "chorus_music_songs_started_total",
            "counter",
            "Songs admitted.",
            load(&self.started),
        );
        one(
            "chorus_music_songs_finished_total",
            "counter",
            "Songs ended by END or max_frames.",
            load(&self.finished),
        );
        one(
            "chorus_music_songs_failed_total",
            "counter",
            "Songs ended by a failed step.",
            load(&self.failed),
        );
        one(
            "chorus_music_frames_total",
            "counter",
            "Music frames generated.",
            load(&self.frames),
        );
        self.cancelled.render(
            out,
            "chorus_music_songs_cancelled_total",
            "Running songs cancelled, by reason.",
        );
        self.refused.render(out, REFUSED, REFUSED_HELP);
        self.steps.render(
            out,
            "chorus_music_step_seconds",
            "Music step time (admissions excluded).",
        );
    }
}
