//! Load on `/v1/tts`: N concurrent speakers, each asking for one utterance after another for the
//! run's duration, timing every frame. A stream keeps up with real time when the gap between two
//! frames of one utterance stays under 80 ms (the audio a frame holds), so the report's figure
//! of merit is the p99 of those gaps; it also gives the time to first audio, frames per second
//! and refusals by code. There is no exactness check here: the server's own tests compare its
//! streams bit for bit with direct stage runs on the CPU.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::{Result, FRAME_MS};
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use tokio_tungstenite::tungstenite::Message;

use super::play::{connect, Ws, READ_TIMEOUT};
use super::report::Latency;
use super::{host_ports, process_cpu_seconds, wait_ready, CONNECT_CONCURRENCY, SEED_STRIDE};

/// How long a stream waits after a refusal (`busy`) before it asks again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What to play.
#[derive(Clone, Debug)]
pub struct TtsLoadConfig {
    /// `ws://host:port` or `host:port`; several, comma-separated, spread the streams round-robin.
    pub url: String,
    pub streams: usize,
    /// How long each stream keeps asking for utterances (a running one is read to its end).
    pub duration: Duration,
    /// The text of every utterance.
    pub text: String,
    /// Frames per utterance (its `max_frames`).
    pub frames: usize,
    /// Utterance `u` of stream `s` is seeded from this, `s` and `u`.
    pub seed: u64,
    /// The audio format asked for (`s16`, `f32` or `opus`).
    pub format: crate::protocol::PcmFormat,
    pub wait_ready: Duration,
    /// The key every connection presents (the gate's `kyutai-api-key` header).
    pub api_key: Option<String>,
}

/// What one stream saw.
#[derive(Default)]
struct Speaker {
    utterances: u64,
    frames: u64,
    gaps_ms: Vec<f64>,
    first_audio_ms: Vec<f64>,
    errors: Vec<String>,
}

/// Results, printed as text or JSON.
#[derive(Clone, Debug, Serialize)]
pub struct TtsLoadReport {
    pub url: String,
    pub streams: usize,
    pub frames_per_utterance: usize,
    pub elapsed_s: f64,
    pub utterances: u64,
    pub frames: u64,
    pub frames_per_second: f64,
    /// Gaps between consecutive frames of one utterance (the first frame excluded).
    pub gap_ms: Latency,
    /// Gaps longer than one frame of audio (80 ms): where a real-time listener would stall.
    pub late_gaps: u64,
    /// From `start` sent to the first frame received.
    pub first_audio_ms: Latency,
    /// Refusals and failures by error code (`busy`, `connect`, ...).
    pub errors: BTreeMap<String, u64>,
    /// CPU cores the load generator itself kept busy on average.
    pub client_cpu_cores: f64,
}

impl TtsLoadReport {
    /// Whether every stream kept up with real time: p99 gap under one frame, and no errors.
    pub fn real_time(&self) -> bool {
        self.frames > 0 && self.gap_ms.p99 < FRAME_MS as f64 && self.errors.is_empty()
    }

    /// Human-readable summary.
    pub fn summary(&self) -> String {
        let (g, f) = (&self.gap_ms, &self.first_audio_ms);
        let errors = if self.errors.is_empty() {
            "none".to_string()
        } else {
            self.errors
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "{} streams on {}: {} utterances, {} frames in {:.1} s ({:.1} frames/s, {:.2}x real time per stream)\n\
             gap between frames ms: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}  ({} over {FRAME_MS} ms)\n\
             first audio ms: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}\n\
             errors: {errors}; real time: {}; load generator CPU: {:.2} cores",
            self.streams,
            self.url,
            self.utterances,
            self.frames,
            self.elapsed_s,
            self.frames_per_second,
            self.frames_per_second * FRAME_MS as f64 / 1e3 / self.streams.max(1) as f64,
            g.p50,
            g.p90,
            g.p99,
            g.max,
            self.late_gaps,
            f.p50,
            f.p90,
            f.p99,
            f.max,
            if self.real_time() { "yes" } else { "no" },
            self.client_cpu_cores,
        )
    }
}

/// Plays the configured speech load.
pub async fn run_tts(config: TtsLoadConfig) -> Result<TtsLoadReport> {
    let addrs = host_ports(&config.url);
    if addrs.is_empty() || config.streams == 0 || config.frames == 0 {
        return Err(chorus_core::Error::input(
            "loadgen::run_tts",
            format!(
                "need a server, streams and frames: url `{}`, {} streams, {} frames",
                config.url, config.streams, config.frames
            ),
        ));
    }
    for addr in &addrs {
        wait_ready(addr, config.wait_ready).await?;
    }
    let started = Instant::now();
    let cpu_before = process_cpu_seconds();
    let config = Arc::new(config);
    let gate = Arc::new(tokio::sync::Semaphore::new(CONNECT_CONCURRENCY));
    let tasks: Vec<_> = (0..config.streams)
        .map(|s| {
            let (cfg, addr, gate) = (config.clone(), addrs[s % addrs.len()].clone(), gate.clone());
            tokio::spawn(async move { speak(s, &cfg, &addr, &gate, started).await })
        })
        .collect();
    let mut speakers = Vec::with_capacity(tasks.len());
    for t in tasks {
        speakers.push(t.await.unwrap_or_else(|e| Speaker {
            errors: vec![format!("task: {e}")],
            ..Speaker::default()
        }));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu_before;
    Ok(report(&config, &speakers, elapsed, cpu))
}

fn report(cfg: &TtsLoadConfig, speakers: &[Speaker], elapsed: f64, cpu: f64) -> TtsLoadReport {
    let sorted = |f: fn(&Speaker) -> &Vec<f64>| {
        let mut v: Vec<f64> = speakers.iter().flat_map(|s| f(s).iter().copied()).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let gaps = sorted(|s| &s.gaps_ms);
    let first = sorted(|s| &s.first_audio_ms);
    let mut errors = BTreeMap::new();
    for e in speakers.iter().flat_map(|s| &s.errors) {
        *errors.entry(e.clone()).or_insert(0) += 1;
    }
    let frames = speakers.iter().map(|s| s.frames).sum();
    TtsLoadReport {
        url: cfg.url.clone(),
        streams: cfg.streams,
        frames_per_utterance: cfg.frames,
        elapsed_s: elapsed,
        utterances: speakers.iter().map(|s| s.utterances).sum(),
        frames,
        frames_per_second: if elapsed > 0.0 {
            frames as f64 / elapsed
        } else {
            0.0
        },
        late_gaps: gaps.iter().filter(|&&g| g > FRAME_MS as f64).count() as u64,
        gap_ms: Latency::of_sorted(&gaps),
        first_audio_ms: Latency::of_sorted(&first),
        errors,
        client_cpu_cores: if elapsed > 0.0 { cpu / elapsed } else { 0.0 },
    }
}

/// Stream `s`: utterances one after another until the duration is up.
async fn speak(
    s: usize,
    cfg: &TtsLoadConfig,
    addr: &str,
    gate: &tokio::sync::Semaphore,
    run_start: Instant,
) -> Speaker {
    let mut sp = Speaker::default();
    let mut u = 0u64;
    while run_start.elapsed() < cfg.duration {
        let ws = {
            let _permit = gate.acquire().await;
            connect(addr, "/v1/tts", cfg.api_key.as_deref()).await
        };
        let seed = cfg.seed ^ (s as u64 + 1).wrapping_mul(SEED_STRIDE) ^ u;
        u += 1;
        match ws {
            Ok(ws) => {
                if let Err(code) = utterance(ws, cfg, seed, &mut sp).await {
                    let busy = code == "busy";
                    sp.errors.push(code);
                    if busy {
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                }
            }
            Err(code) => {
                sp.errors.push(code);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    sp
}

/// One utterance on `ws`, timed; the error code when it did not end normally.
async fn utterance(
    mut ws: Ws,
    cfg: &TtsLoadConfig,
    seed: u64,
    sp: &mut Speaker,
) -> std::result::Result<(), String> {
    let start = serde_json::json!({
        "type": "start", "text": cfg.text, "max_frames": cfg.frames, "seed": seed,
        "sampling": "seeded", "format": cfg.format,
    });
    ws.send(Message::Text(start.to_string().into()))
        .await
        .map_err(|_| "send".to_string())?;
    let sent = Instant::now();
    let mut last: Option<Instant> = None;
    loop {
        let msg = match tokio::time::timeout(READ_TIMEOUT, ws.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(_) => return Err("closed".into()),
            Err(_) => return Err("read_timeout".into()),
        };
        match msg {
            Message::Binary(_) => {
                let now = Instant::now();
                match last {
                    None => sp.first_audio_ms.push(ms(now - sent)),
                    Some(prev) => sp.gaps_ms.push(ms(now - prev)),
                }
                last = Some(now);
                sp.frames += 1;
            }
            Message::Text(t) => {
                let v: serde_json::Value =
                    serde_json::from_str(&t).map_err(|_| "protocol".to_string())?;
                match v["type"].as_str() {
                    Some("started") => {}
                    Some("end") => {
                        sp.utterances += 1;
                        let _ = ws.close(None).await;
                        return Ok(());
                    }
                    Some("error") => {
                        return Err(v["code"].as_str().unwrap_or("error").to_string());
                    }
                    _ => return Err("protocol".into()),
                }
            }
            Message::Close(_) => return Err("closed".into()),
            _ => {}
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
