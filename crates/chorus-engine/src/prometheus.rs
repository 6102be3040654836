//! Prometheus text (format 0.0.4) for the engines of a pool: every series names its device.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics::{ErrorCounts, Histogram, Metrics};

/// One engine's metrics and live gauges.
pub struct DeviceSeries<'a> {
    pub device: usize,
    pub metrics: &'a Metrics,
    pub live_streams: usize,
    pub free_slots: usize,
}

type CounterOf = fn(&Metrics) -> &AtomicU64;
type HistogramOf = fn(&Metrics) -> &Histogram;
type GaugeOf = fn(&DeviceSeries<'_>) -> usize;

/// Gauge families: name, help, the gauge.
const GAUGES: &[(&str, &str, GaugeOf)] = &[
    ("chorus_live_streams", "Open streams.", |d| d.live_streams),
    ("chorus_free_slots", "Stream slots free.", |d| d.free_slots),
];

/// Counter families: name, help, the counter.
const COUNTERS: &[(&str, &str, CounterOf)] = &[
    ("chorus_frames_decoded_total", "Frames decoded.", |m| {
        &m.frames_decoded
    }),
    ("chorus_streams_opened_total", "Streams opened.", |m| {
        &m.streams_opened
    }),
    (
        "chorus_deadline_misses_total",
        "Frames whose PCM was ready more than 80 ms after the frame fell due (its arrival, paced at one frame per 80 ms per stream).",
        |m| &m.deadline_misses,
    ),
    (
        "chorus_pcm_copied_frames_total",
        "Frames handed to their stream as a copy because readers held every pooled PCM block.",
        |m| &m.pcm_copied_frames,
    ),
];

/// Histogram families: name, help, the histogram.
const HISTOGRAMS: &[(&str, &str, HistogramOf)] = &[
    (
        "chorus_step_seconds",
        "Decode step time, launch to PCM ready.",
        |m| &m.step_seconds,
    ),
    (
        "chorus_step_device_seconds",
        "Device time per decode step; its rate is the share of time the device is busy.",
        |m| &m.device_seconds,
    ),
    (
        "chorus_step_host_seconds",
        "Engine-thread host work per decode step (picking, staging, launching, handing out PCM).",
        |m| &m.host_seconds,
    ),
    ("chorus_batch_size", "Frames per decode step.", |m| {
        &m.batch_size
    }),
    (
        "chorus_queue_delay_seconds",
        "Frame arrival to the start of its decode step.",
        |m| &m.queue_delay_seconds,
    ),
    (
        "chorus_frame_latency_seconds",
        "Frame arrival to its PCM being ready.",
        |m| &m.frame_latency_seconds,
    ),
];

const ERRORS: &str = "chorus_errors_total";

/// Renders each metric family once, with one series per device (`device="N"`); `unplaced` holds
/// errors counted outside any device (refusals and protocol errors the server itself counts),
/// rendered in the errors family without a `device` label.
pub fn render(devices: &[DeviceSeries<'_>], unplaced: &ErrorCounts) -> String {
    let mut out = String::new();
    for &(name, help, value) in GAUGES {
        family(&mut out, name, help, "gauge");
        for d in devices {
            let _ = writeln!(out, "{name}{{device=\"{}\"}} {}", d.device, value(d));
        }
    }
    for &(name, help, counter) in COUNTERS {
        family(&mut out, name, help, "counter");
        for d in devices {
            let v = counter(d.metrics).load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{device=\"{}\"}} {v}", d.device);
        }
    }
    for &(name, help, histogram) in HISTOGRAMS {
        family(&mut out, name, help, "histogram");
        for d in devices {
            histogram_series(&mut out, name, d.device, histogram(d.metrics));
        }
    }
    family(
        &mut out,
        ERRORS,
        "Streams ended or refused by error, by kind.",
        "counter",
    );
    for d in devices {
        for (kind, n) in d.metrics.errors.snapshot() {
            let _ = writeln!(
                out,
                "{ERRORS}{{device=\"{}\",kind=\"{kind}\"}} {n}",
                d.device
            );
        }
    }
    for (kind, n) in unplaced.snapshot() {
        let _ = writeln!(out, "{ERRORS}{{kind=\"{kind}\"}} {n}");
    }
    out
}

fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn histogram_series(out: &mut String, name: &str, device: usize, h: &Histogram) {
    let mut total = 0;
    for (bound, count) in h.cumulative() {
        total = count;
        match bound {
            Some(b) => {
                let _ = writeln!(
                    out,
                    "{name}_bucket{{device=\"{device}\",le=\"{b}\"}} {count}"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "{name}_bucket{{device=\"{device}\",le=\"+Inf\"}} {count}"
                );
            }
        }
    }
    let _ = writeln!(out, "{name}_sum{{device=\"{device}\"}} {}", h.sum());
    let _ = writeln!(out, "{name}_count{{device=\"{device}\"}} {total}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_once_with_a_series_per_device() {
        let (a, b) = (Metrics::default(), Metrics::default());
        a.frames_decoded.store(5, Ordering::Relaxed);
        b.frames_decoded.store(7, Ordering::Relaxed);
        a.step_seconds.observe(0.002);
        b.errors.inc("decode_failed");
        let unplaced = ErrorCounts::default();
        unplaced.inc("busy");
        let series = |device, metrics, live| DeviceSeries {
            device,
            metrics,
            live_streams: live,
            free_slots: 4 - live,
        };
        let text = render(&[series(0, &a, 1), series(3, &b, 2)], &unplaced);
        assert_eq!(
            text.matches("# TYPE chorus_step_seconds histogram").count(),
            1
        );
        for line in [
            "chorus_live_streams{device=\"0\"} 1",
            "chorus_free_slots{device=\"3\"} 2",
            "chorus_frames_decoded_total{device=\"0\"} 5",
            "chorus_frames_decoded_total{device=\"3\"} 7",
            "chorus_step_seconds_bucket{device=\"0\",le=\"0.0025\"} 1",
            "chorus_step_seconds_bucket{device=\"0\",le=\"+Inf\"} 1",
            "chorus_step_seconds_count{device=\"0\"} 1",
            "chorus_step_seconds_count{device=\"3\"} 0",
            "chorus_errors_total{device=\"3\",kind=\"decode_failed\"} 1",
            "chorus_errors_total{kind=\"busy\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
        // A family's series follow its HELP and TYPE lines without a break.
        let at = |s: &str| text.find(s).unwrap();
        assert!(at("# TYPE chorus_batch_size") < at("chorus_batch_size_count{device=\"3\"}"));
        assert!(at("chorus_batch_size_count{device=\"3\"}") < at("# TYPE chorus_queue_delay"));
    }
}
