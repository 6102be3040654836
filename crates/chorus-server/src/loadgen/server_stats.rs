//! What the server's own metrics say about the load phase (deltas of `/metrics` counters), for
//! the whole server and for each of its devices.

use std::collections::BTreeMap;

use serde::Serialize;

use super::http::{http_request, http_request_keyed};

/// The load phase's figures over one device, or summed over a server's devices.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Figures {
    pub steps: u64,
    pub frames_decoded: u64,
    pub mean_batch: f64,
    pub mean_step_ms: f64,
    pub mean_queue_delay_ms: f64,
    /// Frames whose PCM was ready more than 80 ms after they fell due (arrival, paced per stream).
    pub deadline_misses: u64,
    /// Device time per step, and its sum over the phase's wall time (per device, averaged over
    /// a server's devices): the share of time the device was busy (near 1: device-bound; well
    /// below 1 with a full queue: host-bound).
    pub mean_device_ms: f64,
    pub device_busy_share: f64,
    /// Engine-thread host work per step (picking, staging, launching, handing out PCM).
    pub mean_host_ms: f64,
}

/// One device's figures.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DeviceStats {
    /// The `device` label of its series.
    pub device: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// Server-side view of the load phase; absent when `/metrics` could not be read.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ServerStats {
    /// `host:port` of the server.
    pub addr: String,
    pub decoder: String,
    /// Summed over the server's devices.
    #[serde(flatten)]
    pub total: Figures,
    /// Each device's own (one entry for a one-device server).
    pub devices: Vec<DeviceStats>,
}

/// The counters of one device read from one scrape.
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

impl Counters {
    fn add(mut self, o: &Counters) -> Self {
        self.steps += o.steps;
        self.step_seconds += o.step_seconds;
        self.batch_sum += o.batch_sum;
        self.frames += o.frames;
        self.queue_count += o.queue_count;
        self.queue_seconds += o.queue_seconds;
        self.misses += o.misses;
        self.device_seconds += o.device_seconds;
        self.host_count += o.host_count;
        self.host_seconds += o.host_seconds;
        self
    }

    /// The field a series feeds, if any.
    fn field(&mut self, name: &str) -> Option<&mut f64> {
        Some(match name {
            "chorus_step_seconds_count" => &mut self.steps,
            "chorus_step_seconds_sum" => &mut self.step_seconds,
            "chorus_batch_size_sum" => &mut self.batch_sum,
            "chorus_frames_decoded_total" => &mut self.frames,
            "chorus_queue_delay_seconds_count" => &mut self.queue_count,
            "chorus_queue_delay_seconds_sum" => &mut self.queue_seconds,
            "chorus_deadline_misses_total" => &mut self.misses,
            "chorus_step_device_seconds_sum" => &mut self.device_seconds,
            "chorus_step_host_seconds_count" => &mut self.host_count,
            "chorus_step_host_seconds_sum" => &mut self.host_seconds,
            _ => return None,
        })
    }
}

/// One scrape: counters by the `device` label of their series (`""` for unlabelled series, as
/// servers from before several devices wrote them).
pub(crate) type Scrape = BTreeMap<String, Counters>;

/// Reads the counters from Prometheus text; a missing series reads as zero.
pub(crate) fn parse(text: &str) -> Scrape {
    let mut out = Scrape::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let (name, labels) = series
            .split_once('{')
            .map_or((series, ""), |(n, l)| (n, l.trim_end_matches('}')));
        let device = label(labels, "device").unwrap_or_default();
        let mut counters = out.get(device).copied().unwrap_or_default();
        if let Some(field) = counters.field(name) {
            *field += value;
            out.insert(device.to_string(), counters);
        }
    }
    out
}

/// The value of label `key` in `a="x",b="y"` (values hold no quotes or commas here).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// Scrapes `/metrics`.
pub(crate) async fn scrape(addr: &str, key: Option<&str>) -> Option<Scrape> {
    match http_request_keyed(addr, "GET", "/metrics", Vec::new(), key).await {
        Ok((200, body)) => Some(parse(&String::from_utf8_lossy(&body))),
        _ => None,
    }
}

/// Open streams on the server (every device's `chorus_live_streams` added), if it answers.
pub(crate) async fn live_streams(addr: &str, key: Option<&str>) -> Option<f64> {
    match http_request_keyed(addr, "GET", "/metrics", Vec::new(), key).await {
        Ok((200, body)) => Some(sum_series(
            &String::from_utf8_lossy(&body),
            "chorus_live_streams",
        )),
        _ => None,
    }
}

/// The sum of every series of gauge `name` in Prometheus text.
fn sum_series(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| series.split('{').next() == Some(name))
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .sum()
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
pub(crate) fn delta(before: Scrape, after: Scrape, decoder: String, seconds: f64) -> ServerStats {
    let zero = Counters::default();
    let mut devices: Vec<DeviceStats> = after
        .iter()
        .map(|(device, a)| DeviceStats {
            device: device.clone(),
            figures: figures(before.get(device).unwrap_or(&zero), a, seconds, 1),
        })
        .collect();
    // Device labels are numbers: order them as numbers.
    devices.sort_by_key(|d| (d.device.parse::<usize>().ok(), d.device.clone()));
    let sum = |s: &Scrape| s.values().fold(Counters::default(), |acc, c| acc.add(c));
    ServerStats {
        addr: String::new(),
        decoder,
        total: figures(&sum(&before), &sum(&after), seconds, after.len().max(1)),
        devices,
    }
}

/// Figures from counters `seconds` apart over `devices` devices (the busy share is per device).
fn figures(before: &Counters, after: &Counters, seconds: f64, devices: usize) -> Figures {
    let steps = after.steps - before.steps;
    let device = after.device_seconds - before.device_seconds;
    let host_steps = after.host_count - before.host_count;
    let per_step = |v: f64| if steps > 0.0 { v / steps } else { 0.0 };
    let queued = after.queue_count - before.queue_count;
    Figures {
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
        device_busy_share: if seconds > 0.0 {
            device / (seconds * devices as f64)
        } else {
            0.0
        },
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
        let s = delta(before, after, "fake".into(), 2.0).total;
        assert_eq!((s.steps, s.frames_decoded, s.deadline_misses), (4, 12, 1));

        assert!((s.mean_batch - 3.0).abs() < 1e-9);
        assert!((s.mean_step_ms - 100.0).abs() < 1e-6);
        assert!((s.mean_queue_delay_ms - 2.0).abs() < 1e-9);
        assert!((s.mean_device_ms - 75.0).abs() < 1e-9);
        assert!((s.device_busy_share - 0.15).abs() < 1e-9);
        assert!((s.mean_host_ms - 5.0).abs() < 1e-9);
    }

    #[test]
    fn device_labelled_series_are_summed_and_kept_per_device() {
        let scrape = |a: u32, b: u32| {
            parse(&format!(
                "chorus_step_seconds_count{{device=\"0\"}} {a}\n\
                 chorus_step_seconds_count{{device=\"10\"}} {b}\n\
                 chorus_step_seconds_bucket{{device=\"0\",le=\"+Inf\"}} 999\n\
                 chorus_batch_size_sum{{device=\"0\"}} {}\n\
                 chorus_batch_size_sum{{device=\"10\"}} {}\n\
                 chorus_step_device_seconds_sum{{device=\"0\"}} {}\n\
                 chorus_step_device_seconds_sum{{device=\"10\"}} {}\n\
                 chorus_errors_total{{device=\"0\",kind=\"busy\"}} 3\n",
                a * 2,
                b * 4,
                a as f64 * 0.1,
                b as f64 * 0.1,
            ))
        };
        let s = delta(scrape(0, 0), scrape(10, 5), "2 x fake".into(), 2.0);
        assert_eq!(s.total.steps, 15);
        assert!((s.total.mean_batch - 40.0 / 15.0).abs() < 1e-9);
        // 1.5 s of device time over 2 s on two devices.
        assert!((s.total.device_busy_share - 0.375).abs() < 1e-9);
        let per: Vec<(&str, u64)> = s
            .devices
            .iter()
            .map(|d| (d.device.as_str(), d.figures.steps))
            .collect();
        assert_eq!(per, [("0", 10), ("10", 5)]);
        assert!((s.devices[1].figures.mean_batch - 4.0).abs() < 1e-9);
        assert!((s.devices[0].figures.device_busy_share - 0.5).abs() < 1e-9);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["steps"], 15, "the totals stay at the top level");
        assert_eq!(json["devices"][1]["device"], "10");
    }

    #[test]
    fn live_streams_add_over_devices_and_ignore_other_series() {
        let text = "# HELP chorus_live_streams Open streams.\n\
                    chorus_live_streams{device=\"0\"} 3\n\
                    chorus_live_streams{device=\"1\"} 4\n\
                    chorus_live_streams_total 100\n\
                    chorus_max_streams 9\n";
        assert_eq!(sum_series(text, "chorus_live_streams"), 7.0);
        assert_eq!(sum_series(text, "chorus_missing"), 0.0);
    }
}
