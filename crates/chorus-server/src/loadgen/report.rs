//! The load generator's report: latency percentiles, errors, the exactness check.

use std::collections::BTreeMap;

use chorus_core::FRAME_MS;
use serde::Serialize;

use super::play::StreamResult;
use super::{DeviceStats, LoadgenConfig, Rate, ServerStats};

/// Frame latency percentiles, milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Latency {
    /// The percentiles of `sorted` (ascending; all zero when empty).
    pub(crate) fn of_sorted(sorted: &[f64]) -> Self {
        let pct = |p: f64| percentile(sorted, p);
        Self {
            p50: pct(50.0),
            p90: pct(90.0),
            p99: pct(99.0),
            max: sorted.last().copied().unwrap_or(0.0),
            mean: if sorted.is_empty() {
                0.0
            } else {
                sorted.iter().sum::<f64>() / sorted.len() as f64
            },
        }
    }
}

/// The frames sent in one second of the run (counted from the load generator's start): a tail
/// made at ramp-up, in one stall or all along shows here.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TimelineSecond {
    pub second: u64,
    pub frames: u64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Frames of this second later than the deadline.
    pub misses: u64,
}

/// The bit-exactness check.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verify {
    pub method: &'static str,
    /// False when the run's outputs have no exact reference (Opus, s16, encode streams).
    pub applicable: bool,
    pub streams_checked: usize,
    pub frames_checked: u64,
    pub frames_mismatched: u64,
    /// Every checked frame matched (false when nothing was checked).
    pub bit_exact: bool,
    /// Streams whose PCM was kept and compared sample by sample.
    pub pcm_streams_compared: usize,
    /// Largest |streamed - offline| over those streams.
    pub max_abs_diff: f64,
    /// ||streamed - offline|| / ||offline|| over those streams.
    pub rel_l2: f64,
}

/// Results, printed as text or JSON.
#[derive(Clone, Debug, Serialize)]
pub struct LoadgenReport {
    pub url: String,
    pub streams: usize,
    pub n_q: usize,
    /// What the streams sent (`codes` or `pcm`) and the audio's wire format.
    pub input: super::LoadInput,
    pub pcm: crate::protocol::PcmFormat,
    /// Payload bytes per stream per second of audio (12.5 frames), client to server and back.
    pub wire_bytes_sent_per_stream_s: f64,
    pub wire_bytes_received_per_stream_s: f64,
    pub rate: Rate,
    pub duration_s: f64,
    pub elapsed_s: f64,
    pub streams_opened: usize,
    pub streams_completed: usize,
    pub frames_sent: u64,
    pub frames_received: u64,
    pub frames_per_second: f64,
    pub latency_ms: Latency,
    pub deadline_ms: u64,
    pub deadline_misses: u64,
    pub errors: BTreeMap<String, u64>,
    /// Latency by the second in which frames were sent.
    pub timeline: Vec<TimelineSecond>,
    pub verify: Verify,
    /// The server's own counters over the load phase (one server).
    pub server: Option<ServerStats>,
    /// Each server's counters, in the order of the URLs.
    pub servers: Vec<ServerStats>,
    /// CPU cores the load generator itself kept busy on average (CPU time over wall time).
    pub client_cpu_cores: f64,
}

impl LoadgenReport {
    /// Human-readable summary.
    pub fn summary(&self) -> String {
        let l = &self.latency_ms;
        let errors = if self.errors.is_empty() {
            "none".to_string()
        } else {
            self.errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let server: String = self
            .servers
            .iter()
            .map(|v| {
                let t = &v.total;
                let mut line = format!(
                    "\nserver {} ({}): {} steps, {} frames, mean batch {:.1}, mean step {:.2} ms, \
                     mean queue delay {:.2} ms, {} server-side deadline misses\n\
                     server time: device busy {:.0}% of the wall time ({:.2} ms device per step), \
                     host work {:.3} ms per step",
                    v.addr,
                    v.decoder,
                    t.steps,
                    t.frames_decoded,
                    t.mean_batch,
                    t.mean_step_ms,
                    t.mean_queue_delay_ms,
                    t.deadline_misses,
                    t.device_busy_share * 100.0,
                    t.mean_device_ms,
                    t.mean_host_ms
                );
                if v.devices.len() > 1 {
                    for d in &v.devices {
                        line.push_str(&device_line(d));
                    }
                }
                line
            })
            .collect();
        format!(
            "streams: {} opened, {} completed of {} ({:?}, n_q {})\n\
             frames: {} sent, {} received in {:.2} s = {:.1} frames/s\n\
             latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}  mean {:.2}\n\
             deadline misses (> {} ms): {}\n\
             errors: {}\n\
             wire ({:?} in, {:?}): {:.0} bytes/s sent and {:.0} bytes/s received per stream\n\
             bit-exact vs whole-file decode: {} ({} streams, {} frames, {} mismatched; \
             max abs diff {:.3e}, rel L2 {:.3e} over {} streams)\n\
             worst second of sending: {}\n\
             load generator CPU: {:.2} cores{}",
            self.streams_opened,
            self.streams_completed,
            self.streams,
            self.rate,
            self.n_q,
            self.frames_sent,
            self.frames_received,
            self.elapsed_s,
            self.frames_per_second,
            l.p50,
            l.p90,
            l.p99,
            l.max,
            l.mean,
            self.deadline_ms,
            self.deadline_misses,
            errors,
            self.input,
            self.pcm,
            self.wire_bytes_sent_per_stream_s,
            self.wire_bytes_received_per_stream_s,
            match (self.verify.applicable, self.verify.bit_exact) {
                (false, _) => "not checked",
                (true, true) => "yes",
                (true, false) => "NO",
            },
            self.verify.streams_checked,
            self.verify.frames_checked,
            self.verify.frames_mismatched,
            self.verify.max_abs_diff,
            self.verify.rel_l2,
            self.verify.pcm_streams_compared,
            worst_second(&self.timeline),
            self.client_cpu_cores,
            server,
        )
    }
}

/// The second whose p99 was highest, in words.
fn worst_second(timeline: &[TimelineSecond]) -> String {
    timeline
        .iter()
        .max_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms))
        .map_or("none".into(), |w| {
            format!(
                "{} s after the start, {} frames, p99 {:.2} ms, max {:.2} ms, {} misses",
                w.second, w.frames, w.p99_ms, w.max_ms, w.misses
            )
        })
}

/// One device's line under its server's.
fn device_line(d: &DeviceStats) -> String {
    let f = &d.figures;
    format!(
        "\n  device {}: {} steps, {} frames, mean batch {:.1}, mean step {:.2} ms, \
         {} deadline misses, device busy {:.0}% ({:.2} ms per step), host {:.3} ms per step",
        d.device,
        f.steps,
        f.frames_decoded,
        f.mean_batch,
        f.mean_step_ms,
        f.deadline_misses,
        f.device_busy_share * 100.0,
        f.mean_device_ms,
        f.mean_host_ms
    )
}

/// Nearest-rank percentile `p` of sorted `lat` (0 when empty).
fn percentile(lat: &[f64], p: f64) -> f64 {
    if lat.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * lat.len() as f64).ceil() as usize;
    lat[rank.clamp(1, lat.len()) - 1]
}

/// Latency per second of send time, from every stream's (send time, latency) pairs.
fn timeline(results: &[StreamResult]) -> Vec<TimelineSecond> {
    let mut by_second: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in results {
        for (&at, &l) in r.sent_s.iter().zip(&r.latencies_ms) {
            by_second.entry(at.max(0.0) as u64).or_default().push(l);
        }
    }
    by_second
        .into_iter()
        .map(|(second, mut lat)| {
            lat.sort_by(f64::total_cmp);
            TimelineSecond {
                second,
                frames: lat.len() as u64,
                p99_ms: percentile(&lat, 99.0),
                max_ms: lat.last().copied().unwrap_or(0.0),
                misses: lat.iter().filter(|&&l| l > FRAME_MS as f64).count() as u64,
            }
        })
        .collect()
}

/// Bytes per second of one stream's audio: `bytes` over `frames` frames of 80 ms.
fn per_audio_second(bytes: u64, frames: u64) -> f64 {
    if frames == 0 {
        return 0.0;
    }
    bytes as f64 / frames as f64 * 1000.0 / FRAME_MS as f64
}

pub(crate) fn report(
    config: &LoadgenConfig,
    results: &[StreamResult],
    elapsed: f64,
    verify: Verify,
) -> LoadgenReport {
    let mut lat: Vec<f64> = results
        .iter()
        .flat_map(|r| r.latencies_ms.iter().copied())
        .collect();
    lat.sort_by(f64::total_cmp);
    let latency_ms = Latency::of_sorted(&lat);
    let mut errors = BTreeMap::new();
    for e in results.iter().flat_map(|r| &r.errors) {
        *errors.entry(e.clone()).or_insert(0) += 1;
    }
    let received = lat.len() as u64;
    LoadgenReport {
        url: config.url.clone(),
        streams: config.streams,
        n_q: config.n_q,
        input: config.input,
        pcm: config.pcm,
        wire_bytes_sent_per_stream_s: per_audio_second(
            results.iter().map(|r| r.bytes_sent).sum(),
            results.iter().map(|r| r.sent).sum(),
        ),
        wire_bytes_received_per_stream_s: per_audio_second(
            results.iter().map(|r| r.bytes_received).sum(),
            received,
        ),
        rate: config.rate,
        duration_s: config.duration.as_secs_f64(),
        elapsed_s: elapsed,
        streams_opened: results.iter().filter(|r| r.opened).count(),
        streams_completed: results.iter().filter(|r| r.completed).count(),
        frames_sent: results.iter().map(|r| r.sent).sum(),
        frames_received: received,
        frames_per_second: if elapsed > 0.0 {
            received as f64 / elapsed
        } else {
            0.0
        },
        deadline_ms: FRAME_MS,
        deadline_misses: lat.iter().filter(|&&l| l > FRAME_MS as f64).count() as u64,
        latency_ms,
        errors,
        timeline: timeline(results),
        verify,
        server: None,
        servers: Vec::new(),
        client_cpu_cores: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(sent_s: &[f32], latencies_ms: &[f64]) -> StreamResult {
        StreamResult {
            sent_s: sent_s.to_vec(),
            latencies_ms: latencies_ms.to_vec(),
            ..StreamResult::default()
        }
    }

    #[test]
    fn the_timeline_groups_frames_by_the_second_they_were_sent() {
        let results = [
            stream(&[0.1, 0.5, 1.2], &[3.0, 5.0, 90.0]),
            stream(&[0.9, 2.99], &[4.0, 7.0]),
        ];
        let t = timeline(&results);
        let rows: Vec<(u64, u64, f64, u64)> = t
            .iter()
            .map(|s| (s.second, s.frames, s.max_ms, s.misses))
            .collect();
        assert_eq!(rows, [(0, 3, 5.0, 0), (1, 1, 90.0, 1), (2, 1, 7.0, 0)]);
        assert_eq!(t[0].p99_ms, 5.0);
        assert!(worst_second(&t).starts_with("1 s after the start, 1 frames, p99 90.00 ms"));
        assert_eq!(worst_second(&[]), "none");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let lat: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&lat, 99.0), 99.0);
        assert_eq!(percentile(&lat, 50.0), 50.0);
        assert_eq!(percentile(&[], 99.0), 0.0);
    }
}
