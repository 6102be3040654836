//! The music engine's counters and gauges, rendered in the Prometheus text format beside the
//! decoder's (`chorus_music_*`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::MusicErrorCode;

/// Upper bounds (seconds) of the step-time histogram: 1 ms to 10 s (a prefill-heavy step of the
/// real model on the CPU takes seconds).
const STEP_BOUNDS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Why a running song was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CancelKind {
    /// The client sent `cancel`.
    Client = 0,
    /// The client went away.
    Disconnect = 1,
    /// The client did not read in time (its channel was full, or a write timed out).
    SlowConsumer = 2,
}

const CANCEL_LABELS: [&str; 3] = ["client", "disconnect", "slow_consumer"];

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
#[derive(Default)]
pub struct MusicMetrics {
    song_slots: AtomicU64,
    started: AtomicU64,
    finished: AtomicU64,
    failed: AtomicU64,
    cancelled: [AtomicU64; 3],
    refused: [AtomicU64; MusicErrorCode::ALL.len()],
    frames: AtomicU64,
    /// Non-cumulative counts per bound plus `+Inf`.
    step_counts: [AtomicU64; STEP_BOUNDS.len() + 1],
    /// Sum of step seconds as f64 bits; only the engine thread writes it.
    step_sum: AtomicU64,
    active_songs: AtomicU64,
    step_songs: AtomicU64,
    kv_in_use: AtomicU64,
    kv_available: AtomicU64,
    kv_usable: AtomicU64,
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
        add(&self.cancelled[kind as usize], 1);
    }

    pub(crate) fn frames(&self, n: usize) {
        add(&self.frames, n as u64);
    }

    /// Counts a request that never became a running song, by the error it got.
    pub fn refused(&self, code: MusicErrorCode) {
        if let Some(i) = MusicErrorCode::ALL.iter().position(|&c| c == code) {
            add(&self.refused[i], 1);
        }
    }

    /// Requests refused with `code` so far.
    pub fn refused_count(&self, code: MusicErrorCode) -> u64 {
        MusicErrorCode::ALL
            .iter()
            .position(|&c| c == code)
            .map_or(0, |i| load(&self.refused[i]))
    }

    /// Records one step's time (engine thread only).
    pub(crate) fn observe_step(&self, seconds: f64) {
        let i = STEP_BOUNDS
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(STEP_BOUNDS.len());
        add(&self.step_counts[i], 1);
        // A single writer, so a load and a store cannot lose an update.
        let sum = f64::from_bits(load(&self.step_sum)) + seconds;
        self.step_sum.store(sum.to_bits(), Ordering::SeqCst);
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
        let name = "chorus_music_songs_cancelled_total";
        let _ = writeln!(
            out,
            "# HELP {name} Running songs cancelled, by reason.\n# TYPE {name} counter"
        );
        for (label, n) in CANCEL_LABELS.iter().zip(&self.cancelled) {
            let _ = writeln!(out, "{name}{{reason=\"{label}\"}} {}", load(n));
        }
        let name = "chorus_music_songs_refused_total";
        let _ = writeln!(
            out,
            "# HELP {name} Music requests that never started, by error code.\n# TYPE {name} counter"
        );
        for (code, n) in MusicErrorCode::ALL.iter().zip(&self.refused) {
            if load(n) > 0 {
                let _ = writeln!(out, "{name}{{code=\"{}\"}} {}", code.as_str(), load(n));
            }
        }
        self.render_steps(out);
    }

    fn render_steps(&self, out: &mut String) {
        let name = "chorus_music_step_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Music step time (admissions excluded).\n# TYPE {name} histogram"
        );
        let mut acc = 0;
        for (bound, n) in STEP_BOUNDS.iter().zip(&self.step_counts) {
            acc += load(n);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {acc}");
        }
        acc += load(&self.step_counts[STEP_BOUNDS.len()]);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {acc}");
        let _ = writeln!(out, "{name}_sum {}", f64::from_bits(load(&self.step_sum)));
        let _ = writeln!(out, "{name}_count {acc}");
    }
}
