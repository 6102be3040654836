//! What the server's own metrics say about the load phase (deltas of `/metrics` counters).

use serde::Serialize;

use super::http::http_request;

/// Server-side view of the load phase; absent when `/metrics` could not be read.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ServerStats {
    /// `host:port` of the server.
    pub addr: String,
    pub decoder: String,
    pub steps: u64,
    pub frames_decoded: u64,
    pub mean_batch: f64,
    pub mean_step_ms: f64,
    pub mean_queue_delay_ms: f64,
    /// Frames whose PCM was ready more than 80 ms after the server received them.
    pub deadline_misses: u64,
    /// Device time per step, and its sum over the phase's wall time: the share of time the
    /// device was busy (near 1: device-bound; well below 1 with a full queue: host-bound).
    pub mean_device_ms: f64,
    pub device_busy_share: f64,
    /// Engine-thread host work per step (picking, staging, launching, handing out PCM).
    pub mean_host_ms: f64,
}

/// The counters read from one scrape.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counters {
    steps: f64,
    step_seconds: f64,
    batch_sum: f64,
    frames: f64,
    queue_count: f64,
    queue_seconds: f64,
    misses: f64,
    device_seconds: f64,
    host_count: f64,
    host_seconds: f64,
}

/// Reads the counters from Prometheus text; a missing series reads as zero.
pub(crate) fn parse(text: &str) -> Counters {
    let get = |name: &str| -> f64 {
        text.lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter_map(|rest| rest.strip_prefix(' '))
            .find_map(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    Counters {
        steps: get("chorus_step_seconds_count"),
        step_seconds: get("chorus_step_seconds_sum"),
        batch_sum: get("chorus_batch_size_sum"),
        frames: get("chorus_frames_decoded_total"),
        queue_count: get("chorus_queue_delay_seconds_count"),
        queue_seconds: get("chorus_queue_delay_seconds_sum"),
        misses: get("chorus_deadline_misses_total"),
        device_seconds: get("chorus_step_device_seconds_sum"),
        host_count: get("chorus_step_host_seconds_count"),
        host_seconds: get("chorus_step_host_seconds_sum"),
    }
}

/// Scrapes `/metrics`.
pub(crate) async fn scrape(addr: &str) -> Option<Counters> {
    match http_request(addr, "GET", "/metrics", Vec::new()).await {
        Ok((200, body)) => Some(parse(&String::from_utf8_lossy(&body))),
        _ => None,
    }
}

/// The decoder description from `/healthz`.
pub(crate) async fn decoder(addr: &str) -> String {
    match http_request(addr, "GET", "/healthz", Vec::new()).await {
        Ok((_, body)) => serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["decoder"].as_str().map(str::to_owned))
            .unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// The load phase's stats from scrapes before and after it, `seconds` apart.
pub(crate) fn delta(
    before: Counters,
    after: Counters,
    decoder: String,
    seconds: f64,
) -> ServerStats {
    let steps = after.steps - before.steps;
    let device = after.device_seconds - before.device_seconds;
    let host_steps = after.host_count - before.host_count;
    let per_step = |v: f64| if steps > 0.0 { v / steps } else { 0.0 };
    let queued = after.queue_count - before.queue_count;
    ServerStats {
        addr: String::new(),
        decoder,
        steps: steps as u64,
        frames_decoded: (after.frames - before.frames) as u64,
        mean_batch: per_step(after.batch_sum - before.batch_sum),
        mean_step_ms: per_step(after.step_seconds - before.step_seconds) * 1e3,
        mean_queue_delay_ms: if queued > 0.0 {
            (after.queue_seconds - before.queue_seconds) / queued * 1e3
        } else {
            0.0
        },
        deadline_misses: (after.misses - before.misses) as u64,
        mean_device_ms: per_step(device) * 1e3,
        device_busy_share: if seconds > 0.0 { device / seconds } else { 0.0 },
        mean_host_ms: if host_steps > 0.0 {
            (after.host_seconds - before.host_seconds) / host_steps * 1e3
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_of_scraped_counters() {
        let before = parse("chorus_step_seconds_count 10\nchorus_step_seconds_sum 0.5\n");
        let after = parse(
            "# HELP x\nchorus_step_seconds_count 14\nchorus_step_seconds_sum 0.9\n\
             chorus_batch_size_sum 12\nchorus_frames_decoded_total 12\n\
             chorus_queue_delay_seconds_count 12\nchorus_queue_delay_seconds_sum 0.024\n\
             chorus_deadline_misses_total 1\n\
             chorus_step_device_seconds_sum 0.3\nchorus_step_host_seconds_count 4\n\
             chorus_step_host_seconds_sum 0.02\n",
        );
        let s = delta(before, after, "fake".into(), 2.0);
        assert_eq!((s.steps, s.frames_decoded, s.deadline_misses), (4, 12, 1));
        assert!((s.mean_batch - 3.0).abs() < 1e-9);
        assert!((s.mean_step_ms - 100.0).abs() < 1e-6);
        assert!((s.mean_queue_delay_ms - 2.0).abs() < 1e-9);
        assert!((s.mean_device_ms - 75.0).abs() < 1e-9);
        assert!((s.device_busy_share - 0.15).abs() < 1e-9);
        assert!((s.mean_host_ms - 5.0).abs() < 1e-9);
    }
}
