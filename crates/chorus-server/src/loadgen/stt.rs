//! Load on `/v1/stt` (or `/api/asr-streaming`): N real-time audio streams, each sending one
//! 80 ms frame when its audio would be complete (every 80 ms from a staggered start), and timing
//! each step's output (position `p` reads frame `p - 1`) from the send of its frame. A stream
//! keeps up with real time when that delay stays under one frame: the report gives its
//! percentiles, the steps past the deadline (`--deadline-ms`, default 80 ms), words and errors
//! by code. `/api/asr-streaming` sends `Step` only for models with VAD heads (the 1B), so only
//! those can be timed there.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chorus_core::{Result, FRAME_MS, FRAME_SAMPLES};
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio_tungstenite::tungstenite::Message;

use super::play::{connect, tone_frame, Ws, READ_TIMEOUT};
use super::report::Latency;
use super::{host_ports, process_cpu_seconds, wait_ready, Rng, CONNECT_CONCURRENCY};
use crate::protocol::PcmFormat;

/// Silence frames sent after a marker on `/api/asr-streaming` beyond the model's delay, so that
/// the marker comes back (the stream only steps while it has audio).
const MARKER_SILENCE_FRAMES: usize = 2;
/// The marker id that ends an `/api/asr-streaming` stream.
const END_MARKER: i64 = 1;
/// moshi-server's text delay of the 2.6B (the longest); the 1B's is 6.
const MAX_TEXT_DELAY_FRAMES: usize = 32;
/// A stream's first positions counted apart in `missed_by_position`.
pub const MISS_POSITIONS: usize = 8;

/// Which protocol the streams speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SttEndpoint {
    /// `/v1/stt`, JSON.
    #[serde(rename = "/v1/stt")]
    V1,
    /// `/api/asr-streaming`, MessagePack.
    #[serde(rename = "/api/asr-streaming")]
    Asr,
}

/// What to play.
#[derive(Clone, Debug)]
pub struct SttLoadConfig {
    /// `ws://host:port` or `host:port`; several, comma-separated, spread the streams round-robin.
    pub url: String,
    pub streams: usize,
    /// Seconds of audio each stream sends.
    pub duration: Duration,
    pub endpoint: SttEndpoint,
    /// `/v1/stt`'s audio format (`/api/asr-streaming` sends floats).
    pub format: PcmFormat,
    pub seed: u64,
    /// A step's output later than this past its frame misses its deadline.
    pub deadline: Duration,
    pub wait_ready: Duration,
    /// The key every connection presents (the gate's `kyutai-api-key` header).
    pub api_key: Option<String>,
    /// Stream `s` connects `ramp * s / streams` after the start (zero: all at once).
    pub ramp: Duration,
}

/// What one stream saw.
#[derive(Default)]
struct Listener {
    frames: u64,
    delays_ms: Vec<f64>,
    /// When each step output past the deadline arrived, and its position.
    missed_at: Vec<Instant>,
    missed_positions: Vec<usize>,
    /// From `started` (or `Ready`) to the output of position 0, the stream's first step.
    first_step_ms: Option<f64>,
    words: u64,
    completed: bool,
    errors: Vec<String>,
}

/// Results, printed as text or JSON.
#[derive(Clone, Debug, Serialize)]
pub struct SttLoadReport {
    pub url: String,
    pub endpoint: SttEndpoint,
    pub streams: usize,
    pub streams_completed: usize,
    pub elapsed_s: f64,
    pub frames_sent: u64,
    /// Steps whose output arrived and was timed (one per frame sent, when all is well).
    pub steps_timed: u64,
    /// From a frame's send to the output of the step that read it.
    pub delay_ms: Latency,
    pub deadline_ms: f64,
    pub missed_deadlines: u64,
    /// Missed deadlines in each whole second since the load started (a burst at the start, a
    /// steady rate, or a stall tell different stories).
    pub missed_by_second: Vec<u64>,
    /// Missed deadlines at each stream's positions 1 to [`MISS_POSITIONS`] (its first frames),
    /// then at every later position together: a stream's start tells from a steady load.
    pub missed_by_position: Vec<u64>,
    /// From a stream's admission (`started` / `Ready`) to the output of its position 0.
    pub first_step_ms: Latency,
    pub words: u64,
    pub words_per_second: f64,
    /// Refusals and failures by error code (`busy`, `unauthorized`, `connect`, ...).
    pub errors: BTreeMap<String, u64>,
    /// CPU cores the load generator itself kept busy on average.
    pub client_cpu_cores: f64,
}

impl SttLoadReport {
    /// Every stream ran to its end, every frame's step was timed, none missed its deadline,
    /// and nothing failed.
    pub fn real_time(&self) -> bool {
        self.errors.is_empty()
            && self.streams_completed == self.streams
            && self.frames_sent > 0
            && self.steps_timed == self.frames_sent
            && self.missed_deadlines == 0
    }

    /// Human-readable summary.
    pub fn summary(&self) -> String {
        let d = &self.delay_ms;
        let errors = if self.errors.is_empty() {
            "none".to_string()
        } else {
            self.errors
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let endpoint = match self.endpoint {
            SttEndpoint::V1 => "/v1/stt",
            SttEndpoint::Asr => "/api/asr-streaming",
        };
        format!(
            "{} streams on {}{endpoint}: {} completed, {} frames sent, {} steps timed in {:.1} s\n\
             step output past its audio ms: p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}  ({} past the {:.0} ms deadline)\n\
             words: {} ({:.1}/s); errors: {errors}; real time: {}; load generator CPU: {:.2} cores",
            self.streams,
            self.url,
            self.streams_completed,
            self.frames_sent,
            self.steps_timed,
            self.elapsed_s,
            d.p50,
            d.p90,
            d.p99,
            d.max,
            self.missed_deadlines,
            self.deadline_ms,
            self.words,
            self.words_per_second,
            if self.real_time() { "yes" } else { "no" },
            self.client_cpu_cores,
        ) + &self.misses_line()
    }

    /// `second:count` for each second with a missed deadline, or nothing when none missed.
    fn misses_line(&self) -> String {
        let seconds: Vec<String> = self
            .missed_by_second
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(s, n)| format!("{s}:{n}"))
            .collect();
        if seconds.is_empty() {
            String::new()
        } else {
            format!(
                "\nmissed deadlines by second since the start: {}",
                seconds.join(" ")
            )
        }
    }
}

/// Plays the configured transcription load.
pub async fn run_stt(config: SttLoadConfig) -> Result<SttLoadReport> {
    let addrs = host_ports(&config.url);
    let frames = (config.duration.as_millis() / u128::from(FRAME_MS)) as usize;
    if addrs.is_empty() || config.streams == 0 || frames == 0 {
        return Err(chorus_core::Error::input(
            "loadgen::run_stt",
            format!(
                "need a server, streams and at least one frame: url `{}`, {} streams, {:?}",
                config.url, config.streams, config.duration
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
            tokio::spawn(async move { listen(s, &cfg, &addr, &gate, frames).await })
        })
        .collect();
    let mut listeners = Vec::with_capacity(tasks.len());
    for t in tasks {
        listeners.push(t.await.unwrap_or_else(|e| Listener {
            errors: vec![format!("task: {e}")],
            ..Listener::default()
        }));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu_before;
    Ok(report(&config, &listeners, (started, elapsed), cpu))
}

fn report(
    cfg: &SttLoadConfig,
    ls: &[Listener],
    (started, elapsed): (Instant, f64),
    cpu: f64,
) -> SttLoadReport {
    let mut delays: Vec<f64> = ls
        .iter()
        .flat_map(|l| l.delays_ms.iter().copied())
        .collect();
    delays.sort_by(f64::total_cmp);
    let deadline_ms = cfg.deadline.as_secs_f64() * 1e3;
    let mut errors = BTreeMap::new();
    for e in ls.iter().flat_map(|l| &l.errors) {
        *errors.entry(e.clone()).or_insert(0) += 1;
    }
    let mut missed_by_second = vec![0u64; elapsed.ceil() as usize];
    for at in ls.iter().flat_map(|l| &l.missed_at) {
        let second = at.saturating_duration_since(started).as_secs() as usize;
        if second >= missed_by_second.len() {
            missed_by_second.resize(second + 1, 0);
        }
        missed_by_second[second] += 1;
    }
    let mut missed_by_position = vec![0u64; MISS_POSITIONS + 1];
    for &p in ls.iter().flat_map(|l| &l.missed_positions) {
        missed_by_position[p.clamp(1, MISS_POSITIONS + 1) - 1] += 1;
    }
    let words = ls.iter().map(|l| l.words).sum();
    let per_second = |n: u64| {
        if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        }
    };
    SttLoadReport {
        url: cfg.url.clone(),
        endpoint: cfg.endpoint,
        streams: cfg.streams,
        streams_completed: ls.iter().filter(|l| l.completed).count(),
        elapsed_s: elapsed,
        frames_sent: ls.iter().map(|l| l.frames).sum(),
        steps_timed: delays.len() as u64,
        missed_deadlines: delays.iter().filter(|&&d| d > deadline_ms).count() as u64,
        missed_by_second,
        missed_by_position,
        first_step_ms: {
            let mut f: Vec<f64> = ls.iter().filter_map(|l| l.first_step_ms).collect();
            f.sort_by(f64::total_cmp);
            Latency::of_sorted(&f)
        },
        delay_ms: Latency::of_sorted(&delays),
        deadline_ms,
        words,
        words_per_second: per_second(words),
        errors,
        client_cpu_cores: if elapsed > 0.0 { cpu / elapsed } else { 0.0 },
    }
}

/// Client messages of `/api/asr-streaming` (written from its message table).
#[derive(Serialize)]
#[serde(tag = "type")]
enum AsrSend<'a> {
    Audio { pcm: &'a [f32] },
    Marker { id: i64 },
}

/// The fields of a server message of `/api/asr-streaming` this client reads.
#[derive(Deserialize)]
struct AsrHeard {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    step_idx: Option<usize>,
    #[serde(default)]
    message: Option<String>,
}

type Sink = SplitSink<Ws, Message>;

/// Stream `s`: connect, open, send `frames` frames in real time while timing every step.
async fn listen(
    s: usize,
    cfg: &SttLoadConfig,
    addr: &str,
    gate: &tokio::sync::Semaphore,
    frames: usize,
) -> Listener {
    let mut l = Listener::default();
    if !cfg.ramp.is_zero() {
        tokio::time::sleep(cfg.ramp.mul_f64(s as f64 / cfg.streams.max(1) as f64)).await;
    }
    let opened = {
        let _permit = gate.acquire().await;
        open(cfg, addr).await
    };
    let ws = match opened {
        Ok(ws) => ws,
        Err(code) => {
            l.errors.push(code);
            return l;
        }
    };
    let admitted = Instant::now();
    let (sink, mut source) = ws.split();
    let sent_at = Arc::new(Mutex::new(Vec::with_capacity(frames)));
    let sender = {
        let (cfg, sent_at) = (cfg.clone(), sent_at.clone());
        tokio::spawn(async move { send_audio(s, &cfg, sink, &sent_at, frames).await })
    };
    loop {
        let msg = match tokio::time::timeout(READ_TIMEOUT, source.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(_) => {
                l.errors.push("closed".into());
                break;
            }
            Err(_) => {
                l.errors.push("read_timeout".into());
                break;
            }
        };
        let now = Instant::now();
        let heard = match (&msg, cfg.endpoint) {
            (Message::Text(t), SttEndpoint::V1) => heard_v1(t),
            (Message::Binary(b), SttEndpoint::Asr) => heard_asr(b),
            (Message::Close(_), _) => Heard::Error("closed".into()),
            (Message::Ping(_) | Message::Pong(_), _) => Heard::Other,
            _ => Heard::Error("protocol".into()),
        };
        match heard {
            Heard::Step(p) if (1..=frames).contains(&p) => {
                let sent = lock(&sent_at).get(p - 1).copied();
                if let Some(t) = sent {
                    let delay = now - t;
                    if delay > cfg.deadline {
                        l.missed_at.push(now);
                        l.missed_positions.push(p);
                    }
                    l.delays_ms.push(delay.as_secs_f64() * 1e3);
                }
            }
            Heard::Step(0) if l.first_step_ms.is_none() => {
                l.first_step_ms = Some((now - admitted).as_secs_f64() * 1e3);
            }
            Heard::Word => l.words += 1,
            Heard::Done => {
                l.completed = true;
                break;
            }
            Heard::Error(code) => {
                l.errors.push(code);
                break;
            }
            Heard::Step(_) | Heard::Other => {}
        }
    }
    sender.abort();
    l.frames = lock(&sent_at).len() as u64;
    l
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a server message means to the timing.
enum Heard {
    Step(usize),
    Word,
    /// The stream's end (`end`, or the end marker).
    Done,
    Error(String),
    Other,
}

fn heard_v1(text: &str) -> Heard {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return Heard::Error("protocol".into());
    };
    match v["type"].as_str() {
        Some("step") => Heard::Step(v["position"].as_u64().unwrap_or(0) as usize),
        Some("word") => Heard::Word,
        Some("end") => Heard::Done,
        Some("error") => Heard::Error(v["code"].as_str().unwrap_or("error").into()),
        _ => Heard::Other,
    }
}

fn heard_asr(bytes: &[u8]) -> Heard {
    let Ok(m) = rmp_serde::from_slice::<AsrHeard>(bytes) else {
        return Heard::Error("protocol".into());
    };
    match m.kind.as_str() {
        "Step" => Heard::Step(m.step_idx.unwrap_or(0)),
        "Word" => Heard::Word,
        "Marker" => Heard::Done,
        "Error" => Heard::Error(error_code(m.message.as_deref().unwrap_or("error"))),
        _ => Heard::Other,
    }
}

/// The code an `/api/asr-streaming` error message starts with (`busy: ...`).
fn error_code(message: &str) -> String {
    message
        .split(':')
        .next()
        .unwrap_or(message)
        .trim()
        .to_string()
}

/// Connects and opens a stream: `start` and `started` on `/v1/stt`, `Ready` on
/// `/api/asr-streaming`; the error code to report on failure.
async fn open(cfg: &SttLoadConfig, addr: &str) -> std::result::Result<Ws, String> {
    let key = cfg.api_key.as_deref();
    let path = match cfg.endpoint {
        SttEndpoint::V1 => "/v1/stt",
        SttEndpoint::Asr => "/api/asr-streaming",
    };
    let mut ws = connect(addr, path, key).await?;
    if cfg.endpoint == SttEndpoint::V1 {
        let start = serde_json::json!({"type": "start", "format": cfg.format});
        ws.send(Message::Text(start.to_string().into()))
            .await
            .map_err(|_| "send".to_string())?;
    }
    loop {
        let msg = match tokio::time::timeout(READ_TIMEOUT, ws.next()).await {
            Ok(Some(Ok(m))) => m,
            _ => return Err("open_failed".into()),
        };
        let heard = match (&msg, cfg.endpoint) {
            (Message::Text(t), SttEndpoint::V1) => {
                let v: serde_json::Value =
                    serde_json::from_str(t).map_err(|_| "protocol".to_string())?;
                match v["type"].as_str() {
                    Some("started") => return Ok(ws),
                    Some("error") => Heard::Error(v["code"].as_str().unwrap_or("error").into()),
                    _ => Heard::Error("protocol".into()),
                }
            }
            (Message::Binary(b), SttEndpoint::Asr) => match heard_asr(b) {
                Heard::Other => return Ok(ws),
                h => h,
            },
            (Message::Ping(_) | Message::Pong(_), _) => continue,
            _ => Heard::Error("open_failed".into()),
        };
        return Err(match heard {
            Heard::Error(code) => code,
            _ => "protocol".into(),
        });
    }
}

/// Sends `frames` frames on the real-time clock from a start staggered across one frame, each
/// when its audio would be complete, recording each send; then ends the stream.
async fn send_audio(
    s: usize,
    cfg: &SttLoadConfig,
    mut sink: Sink,
    sent_at: &Mutex<Vec<Instant>>,
    frames: usize,
) {
    let period = Duration::from_millis(FRAME_MS);
    let offset = period * s as u32 / cfg.streams.max(1) as u32;
    let t0 = tokio::time::Instant::now() + offset;
    let mut rng = Rng::for_stream(cfg.seed, s);
    let mut pcm = vec![0.0f32; FRAME_SAMPLES];
    let mut opus = (cfg.format == PcmFormat::Opus)
        .then(|| chorus_audio::OpusFrameEncoder::new(super::LOADGEN_OPUS_BITRATE).ok())
        .flatten();
    for t in 0..frames {
        tokio::time::sleep_until(t0 + period * (t as u32 + 1)).await;
        tone_frame(s, t as u64, &mut rng, &mut pcm);
        let bytes = frame_message(cfg, &pcm, opus.as_mut());
        lock(sent_at).push(Instant::now());
        if sink.send(Message::Binary(bytes.into())).await.is_err() {
            return;
        }
    }
    match cfg.endpoint {
        SttEndpoint::V1 => {
            let _ = sink.send(Message::Text(r#"{"type":"end"}"#.into())).await;
        }
        SttEndpoint::Asr => {
            let marker = rmp_serde::to_vec_named(&AsrSend::Marker { id: END_MARKER });
            if let Ok(m) = marker {
                let _ = sink.send(Message::Binary(m.into())).await;
            }
            // The marker returns once the stream has stepped past the delay: keep the clock.
            pcm.fill(0.0);
            for t in frames..frames + MAX_TEXT_DELAY_FRAMES + MARKER_SILENCE_FRAMES {
                tokio::time::sleep_until(t0 + period * (t as u32 + 1)).await;
                let bytes = frame_message(cfg, &pcm, None);
                if sink.send(Message::Binary(bytes.into())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// One frame on the wire: `/v1/stt` in its format, `/api/asr-streaming` as `Audio{pcm}`.
fn frame_message(
    cfg: &SttLoadConfig,
    pcm: &[f32],
    opus: Option<&mut chorus_audio::OpusFrameEncoder>,
) -> Vec<u8> {
    match (cfg.endpoint, cfg.format, opus) {
        (SttEndpoint::Asr, _, _) => {
            rmp_serde::to_vec_named(&AsrSend::Audio { pcm }).unwrap_or_default()
        }
        (SttEndpoint::V1, PcmFormat::Opus, Some(enc)) => {
            let mut packet = Vec::new();
            // A failed packet is sent empty: the server then names the stream's error.
            let _ = enc.encode(pcm, &mut packet);
            packet
        }
        (SttEndpoint::V1, PcmFormat::F32, _) => pcm.iter().flat_map(|v| v.to_le_bytes()).collect(),
        (SttEndpoint::V1, _, _) => pcm
            .iter()
            .flat_map(|v| crate::protocol::to_s16(*v).to_le_bytes())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_deadlines_are_counted_by_the_second_they_came() {
        let started = Instant::now();
        let at = |ms: u64| started + Duration::from_millis(ms);
        let cfg = SttLoadConfig {
            url: "127.0.0.1:1".into(),
            streams: 2,
            duration: Duration::from_secs(3),
            endpoint: SttEndpoint::V1,
            format: PcmFormat::F32,
            seed: 0,
            deadline: Duration::from_millis(80),
            wait_ready: Duration::from_secs(1),
            api_key: None,
            ramp: Duration::ZERO,
        };
        let ls = [
            Listener {
                delays_ms: vec![10.0, 90.0, 95.0],
                missed_at: vec![at(100), at(2_500)],
                missed_positions: vec![1, 30],
                ..Listener::default()
            },
            Listener {
                delays_ms: vec![120.0],
                missed_at: vec![at(2_900)],
                missed_positions: vec![8],
                ..Listener::default()
            },
        ];
        let r = report(&cfg, &ls, (started, 3.2), 0.0);
        assert_eq!(r.missed_deadlines, 3);
        assert_eq!(r.missed_by_second, vec![1, 0, 2, 0]);
        assert_eq!(r.missed_by_position, vec![1, 0, 0, 0, 0, 0, 0, 1, 1]);
        assert!(r
            .summary()
            .ends_with("missed deadlines by second since the start: 0:1 2:2"));
    }

    #[test]
    fn error_messages_reduce_to_their_code() {
        assert_eq!(error_code("busy: all 2 streams are in use"), "busy");
        assert_eq!(error_code("oops"), "oops");
        match heard_v1(r#"{"type":"step","position":3,"token":1,"buffered_samples":0}"#) {
            Heard::Step(3) => {}
            _ => panic!("a step names its position"),
        }
        let marker = rmp_serde::to_vec_named(&AsrSend::Marker { id: 1 }).unwrap();
        assert!(matches!(heard_asr(&marker), Heard::Done));
    }
}
