//! Load generator: plays N code streams against a server and checks every frame.
//!
//! Each stream sends seeded random codes, one frame per message, either on the real-time clock
//! (one frame every 80 ms from a staggered start) or as fast as a window of frames in flight
//! allows, and asks for f32 PCM. Latency is from a frame's send to its PCM's arrival. After the
//! load phase, each checked stream's codes are decoded again as a whole file by the same server
//! (`POST /v1/decode?format=f32`: same weights, backend and precision, but a different batch
//! composition), and every streamed frame must equal that decode bit for bit (compared through a
//! 64-bit hash of the frame's bytes).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chorus_core::{Error, Result, FRAME_MS};
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::sync::{Notify, Semaphore};
use tokio_tungstenite::tungstenite::Message;

use crate::npy::write_codes;
use crate::protocol::{decode_pcm, encode_codes, PcmFormat, ServerMessage, PROTOCOL_VERSION};

/// How long a stream waits for its next message before it gives up.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting sender re-checks its window (in case a wake-up was missed).
const WINDOW_RECHECK: Duration = Duration::from_millis(50);
/// Whole-file decodes running at once in the verify phase.
const VERIFY_CONCURRENCY: usize = 16;
/// Retries of a verify request refused as busy.
const VERIFY_BUSY_RETRIES: usize = 100;
/// Pause between those retries.
const VERIFY_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Pause between health checks while waiting for the server.
const READY_POLL: Duration = Duration::from_millis(100);
/// Golden-ratio increment that separates the per-stream seeds.
const SEED_STRIDE: u64 = 0x9E37_79B9_7F4A_7C15;
/// Codebook size assumed until the server says otherwise.
const DEFAULT_CODEBOOK_SIZE: usize = 2048;

/// How fast each stream sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rate {
    /// One frame every 80 ms.
    Realtime,
    /// As fast as the window of frames in flight allows.
    Max,
}

/// What to play.
#[derive(Clone, Debug)]
pub struct LoadgenConfig {
    /// `ws://host:port`, `http://host:port` or `host:port`.
    pub url: String,
    pub streams: usize,
    pub duration: Duration,
    pub rate: Rate,
    pub n_q: usize,
    pub seed: u64,
    /// Streams checked against a whole-file decode: `None` all, `Some(0)` none.
    pub verify_streams: Option<usize>,
    /// Frames in flight per stream at [`Rate::Max`] (capped by the server's queue bound).
    pub window: usize,
    /// Streams (the first ones) whose PCM is kept to measure how far a mismatch is; every
    /// other stream keeps only a hash per frame.
    pub keep_pcm_streams: usize,
    /// How long to wait for `/healthz` to answer before starting.
    pub wait_ready: Duration,
}

/// Frame latency percentiles, milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// The bit-exactness check.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verify {
    pub method: &'static str,
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
    pub verify: Verify,
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
        format!(
            "streams: {} opened, {} completed of {} ({:?}, n_q {})\n\
             frames: {} sent, {} received in {:.2} s = {:.1} frames/s\n\
             latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}  mean {:.2}\n\
             deadline misses (> {} ms): {}\n\
             errors: {}\n\
             bit-exact vs whole-file decode: {} ({} streams, {} frames, {} mismatched; \
             max abs diff {:.3e}, rel L2 {:.3e} over {} streams)",
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
            if self.verify.bit_exact { "yes" } else { "NO" },
            self.verify.streams_checked,
            self.verify.frames_checked,
            self.verify.frames_mismatched,
            self.verify.max_abs_diff,
            self.verify.rel_l2,
            self.verify.pcm_streams_compared,
        )
    }
}

/// splitmix64: a small seeded generator, identical on every machine.
struct Rng(u64);

impl Rng {
    fn for_stream(seed: u64, stream: usize) -> Self {
        Self(seed ^ (stream as u64 + 1).wrapping_mul(SEED_STRIDE))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(SEED_STRIDE);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn frame(&mut self, n_q: usize, card: usize, out: &mut Vec<u32>) {
        out.clear();
        out.extend((0..n_q).map(|_| (self.next() % card as u64) as u32));
    }
}

/// 64-bit FNV-1a over a frame's f32 bytes.
fn frame_hash(samples: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for s in samples {
        for b in s.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// `host:port` of a URL.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

fn net_err(op: &'static str, addr: &str, e: impl std::fmt::Display) -> Error {
    Error::io(op, addr, std::io::Error::other(e.to_string()))
}

/// One HTTP/1.1 request; returns the status and body.
pub async fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>)> {
    let op = "loadgen::http_request";
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| Error::io(op, addr, e))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| net_err(op, addr, e))?;
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| net_err(op, addr, e))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| net_err(op, addr, e))?;
    let status = res.status().as_u16();
    let bytes = res
        .into_body()
        .collect()
        .await
        .map_err(|e| net_err(op, addr, e))?
        .to_bytes();
    Ok((status, bytes.to_vec()))
}

/// What one stream saw.
#[derive(Default)]
struct StreamResult {
    opened: bool,
    completed: bool,
    sent: u64,
    latencies_ms: Vec<f64>,
    hashes: Vec<u64>,
    /// The PCM itself, for the first `keep_pcm_streams` streams.
    pcm: Vec<f32>,
    errors: Vec<String>,
    codebook_size: usize,
}

/// Plays the configured load and checks the output.
pub async fn run(config: LoadgenConfig) -> Result<LoadgenReport> {
    let addr = host_port(&config.url);
    wait_ready(&addr, config.wait_ready).await?;
    let started = Instant::now();
    let config = Arc::new(config);
    let mut tasks = Vec::with_capacity(config.streams);
    for s in 0..config.streams {
        let (cfg, addr) = (config.clone(), addr.clone());
        tasks.push(tokio::spawn(async move { play(s, &cfg, &addr).await }));
    }
    let mut results = Vec::with_capacity(tasks.len());
    for t in tasks {
        results.push(t.await.unwrap_or_else(|e| StreamResult {
            errors: vec![format!("task: {e}")],
            ..StreamResult::default()
        }));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let verify = verify(&config, &addr, &mut results).await;
    Ok(report(&config, &results, elapsed, verify))
}

async fn wait_ready(addr: &str, wait: Duration) -> Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        match http_request(addr, "GET", "/healthz", Vec::new()).await {
            Ok((200, _)) => return Ok(()),
            Ok((status, body)) if Instant::now() >= deadline => {
                return Err(net_err(
                    "loadgen::wait_ready",
                    addr,
                    format!(
                        "healthz answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    ),
                ))
            }
            Err(e) if Instant::now() >= deadline => return Err(e),
            _ => tokio::time::sleep(READY_POLL).await,
        }
    }
}

fn report(
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
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        // Nearest rank.
        let rank = ((p / 100.0) * lat.len() as f64).ceil() as usize;
        lat[rank.clamp(1, lat.len()) - 1]
    };
    let latency_ms = Latency {
        p50: pct(50.0),
        p90: pct(90.0),
        p99: pct(99.0),
        max: lat.last().copied().unwrap_or(0.0),
        mean: if lat.is_empty() {
            0.0
        } else {
            lat.iter().sum::<f64>() / lat.len() as f64
        },
    };
    let mut errors = BTreeMap::new();
    for e in results.iter().flat_map(|r| &r.errors) {
        *errors.entry(e.clone()).or_insert(0) += 1;
    }
    let received = lat.len() as u64;
    LoadgenReport {
        url: config.url.clone(),
        streams: config.streams,
        n_q: config.n_q,
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
        verify,
    }
}

/// Frame send times and the receive count, shared by a stream's sender and reader.
struct Progress {
    sent_at: Mutex<Vec<Instant>>,
    received: AtomicU64,
    wake: Notify,
    /// The reader has stopped: the sender stops too.
    stop: AtomicBool,
    /// The sender has sent `close` after its last frame.
    closed: AtomicBool,
}

async fn play(s: usize, cfg: &LoadgenConfig, addr: &str) -> StreamResult {
    let mut r = StreamResult {
        codebook_size: DEFAULT_CODEBOOK_SIZE,
        ..StreamResult::default()
    };
    let url = format!("ws://{addr}/v1/stream");
    let mut ws = match tokio_tungstenite::connect_async(url.as_str()).await {
        Ok((ws, _)) => ws,
        Err(_) => {
            r.errors.push("connect".into());
            return r;
        }
    };
    let open = serde_json::json!({
        "type": "open", "version": PROTOCOL_VERSION, "input": "codes",
        "n_q": cfg.n_q, "pcm": "f32",
    });
    if ws
        .send(Message::Text(open.to_string().into()))
        .await
        .is_err()
    {
        r.errors.push("send".into());
        return r;
    }
    let (max_pending, card) = match tokio::time::timeout(READ_TIMEOUT, ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => match serde_json::from_str::<ServerMessage>(&t) {
            Ok(ServerMessage::Opened {
                max_pending_frames,
                codebook_size,
                ..
            }) => (max_pending_frames, codebook_size),
            Ok(ServerMessage::Error { code, .. }) => {
                r.errors.push(code.as_str().into());
                return r;
            }
            _ => {
                r.errors.push("protocol".into());
                return r;
            }
        },
        _ => {
            r.errors.push("open_failed".into());
            return r;
        }
    };
    r.opened = true;
    r.codebook_size = card;
    let (mut sink, mut source) = ws.split();
    let progress = Arc::new(Progress {
        sent_at: Mutex::new(Vec::new()),
        received: AtomicU64::new(0),
        wake: Notify::new(),
        stop: AtomicBool::new(false),
        closed: AtomicBool::new(false),
    });
    let window = cfg.window.clamp(1, max_pending.max(1)) as u64;
    // Stagger real-time streams across one frame period so that they do not all send at once.
    let offset = Duration::from_millis(FRAME_MS) * s as u32 / cfg.streams.max(1) as u32;
    let sender = {
        let progress = progress.clone();
        let (rate, duration, n_q, seed) = (cfg.rate, cfg.duration, cfg.n_q, cfg.seed);
        tokio::spawn(async move {
            let mut rng = Rng::for_stream(seed, s);
            let mut codes = Vec::with_capacity(n_q);
            let start = tokio::time::Instant::now() + offset;
            let period = Duration::from_millis(FRAME_MS);
            let total = (duration.as_millis() / FRAME_MS as u128).max(1) as u64;
            let mut t = 0u64;
            loop {
                if progress.stop.load(Ordering::Acquire) {
                    return (t, sink);
                }
                match rate {
                    Rate::Realtime => {
                        if t >= total {
                            break;
                        }
                        let due = start + period * t as u32;
                        let _ = tokio::time::timeout_at(due, progress.wake.notified()).await;
                        if tokio::time::Instant::now() < due {
                            continue;
                        }
                    }
                    Rate::Max => {
                        if start.elapsed() >= duration {
                            break;
                        }
                        while t.saturating_sub(progress.received.load(Ordering::Acquire)) >= window
                            && !progress.stop.load(Ordering::Acquire)
                        {
                            let _ = tokio::time::timeout(WINDOW_RECHECK, progress.wake.notified())
                                .await;
                        }
                    }
                }
                rng.frame(n_q, card, &mut codes);
                lock(&progress.sent_at).push(Instant::now());
                if sink
                    .send(Message::Binary(encode_codes(&codes).into()))
                    .await
                    .is_err()
                {
                    return (t, sink);
                }
                t += 1;
            }
            let close = serde_json::json!({"type": "close"}).to_string();
            // Set first: the server's `closed` answer may arrive before this task runs again.
            progress.closed.store(true, Ordering::Release);
            let _ = sink.send(Message::Text(close.into())).await;
            (t, sink)
        })
    };
    loop {
        let msg = match tokio::time::timeout(READ_TIMEOUT, source.next()).await {
            Ok(Some(Ok(m))) => m,
            Ok(_) => {
                r.errors.push("disconnected".into());
                break;
            }
            Err(_) => {
                r.errors.push("timeout".into());
                break;
            }
        };
        match msg {
            Message::Binary(b) => {
                let now = Instant::now();
                let Some(pcm) = decode_pcm(&b, PcmFormat::F32) else {
                    r.errors.push("bad_pcm".into());
                    break;
                };
                let expected = r.hashes.len();
                if pcm.index as usize != expected {
                    r.errors.push("out_of_order".into());
                    break;
                }
                let sent = lock(&progress.sent_at).get(expected).copied();
                if let Some(sent) = sent {
                    r.latencies_ms
                        .push(now.duration_since(sent).as_secs_f64() * 1e3);
                }
                r.hashes.push(frame_hash(&pcm.samples));
                if s < cfg.keep_pcm_streams {
                    r.pcm.extend_from_slice(&pcm.samples);
                }
                progress.received.fetch_add(1, Ordering::Release);
                progress.wake.notify_one();
            }
            Message::Text(t) => match serde_json::from_str::<ServerMessage>(&t) {
                Ok(ServerMessage::Closed { .. }) => {
                    if progress.closed.load(Ordering::Acquire) {
                        r.completed = true;
                    } else {
                        // The server ended the stream first: it is draining.
                        r.errors.push("closed_by_server".into());
                    }
                    break;
                }
                Ok(ServerMessage::Error { code, .. }) => {
                    r.errors.push(code.as_str().into());
                    break;
                }
                _ => {}
            },
            Message::Close(_) => {
                r.errors.push("closed_early".into());
                break;
            }
            _ => {}
        }
    }
    // Unblock a sender still waiting on its window, then collect it.
    progress.stop.store(true, Ordering::Release);
    progress.wake.notify_one();
    if let Ok((sent, mut sink)) = sender.await {
        r.sent = sent;
        let _ = sink.close().await;
    }
    if r.completed && (r.hashes.len() as u64) < r.sent {
        r.errors.push("missing_frames".into());
        r.completed = false;
    }
    r
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only pushes and reads happen under this lock, so a poisoned value is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn verify(config: &LoadgenConfig, addr: &str, results: &mut [StreamResult]) -> Verify {
    let limit = config.verify_streams.unwrap_or(usize::MAX);
    let chosen: Vec<usize> = (0..results.len())
        .filter(|&s| results[s].completed && !results[s].hashes.is_empty())
        .take(limit)
        .collect();
    let gate = Arc::new(Semaphore::new(VERIFY_CONCURRENCY));
    let mut tasks = Vec::with_capacity(chosen.len());
    for &s in &chosen {
        let r = &results[s];
        let mut rng = Rng::for_stream(config.seed, s);
        let mut codes = Vec::with_capacity(r.hashes.len() * config.n_q);
        let mut frame = Vec::with_capacity(config.n_q);
        for _ in 0..r.hashes.len() {
            rng.frame(config.n_q, r.codebook_size, &mut frame);
            codes.extend_from_slice(&frame);
        }
        let body = write_codes(config.n_q, &codes);
        let (addr, gate) = (addr.to_string(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            for _ in 0..VERIFY_BUSY_RETRIES {
                match http_request(&addr, "POST", "/v1/decode?format=f32", body.clone()).await {
                    Ok((200, pcm)) => return Ok(pcm),
                    Ok((503, _)) => tokio::time::sleep(VERIFY_RETRY_PAUSE).await,
                    Ok((status, _)) => return Err(format!("verify_http_{status}")),
                    Err(_) => return Err("verify_connect".to_string()),
                }
            }
            Err("verify_busy".to_string())
        }));
    }
    let mut v = Verify {
        method: "server whole-file decode (POST /v1/decode?format=f32), 64-bit hash per frame",
        ..Verify::default()
    };
    let (mut diff_sq, mut ref_sq) = (0f64, 0f64);
    for (&s, task) in chosen.iter().zip(tasks) {
        let r = &mut results[s];
        let pcm = match task.await {
            Ok(Ok(pcm)) => pcm,
            Ok(Err(e)) => {
                r.errors.push(e);
                continue;
            }
            Err(_) => {
                r.errors.push("verify_task".into());
                continue;
            }
        };
        let samples: Vec<f32> = pcm
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        v.streams_checked += 1;
        let frames = samples.chunks(chorus_core::FRAME_SAMPLES);
        let mut checked = 0u64;
        for (got, offline) in r.hashes.iter().zip(frames) {
            checked += 1;
            if *got != frame_hash(offline) {
                v.frames_mismatched += 1;
            }
        }
        if !r.pcm.is_empty() {
            v.pcm_streams_compared += 1;
            for (a, b) in r.pcm.iter().zip(&samples) {
                let d = (*a as f64 - *b as f64).abs();
                v.max_abs_diff = v.max_abs_diff.max(d);
                diff_sq += d * d;
                ref_sq += (*b as f64) * (*b as f64);
            }
        }
        // Frames the offline decode lacks count as mismatches too.
        v.frames_mismatched += r.hashes.len() as u64 - checked;
        v.frames_checked += r.hashes.len() as u64;
    }
    v.bit_exact = v.frames_checked > 0 && v.frames_mismatched == 0;
    if ref_sq > 0.0 {
        v.rel_l2 = (diff_sq / ref_sq).sqrt();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_codes_repeat_and_differ_between_streams() {
        let (mut a, mut b, mut c) = (
            Rng::for_stream(1, 0),
            Rng::for_stream(1, 0),
            Rng::for_stream(1, 1),
        );
        let (mut x, mut y, mut z) = (Vec::new(), Vec::new(), Vec::new());
        a.frame(8, 2048, &mut x);
        b.frame(8, 2048, &mut y);
        c.frame(8, 2048, &mut z);
        assert_eq!(x, y);
        assert_ne!(x, z);
        assert!(x.iter().all(|&v| v < 2048));
    }

    #[test]
    fn urls_reduce_to_host_and_port() {
        assert_eq!(host_port("ws://127.0.0.1:80/v1/stream"), "127.0.0.1:80");
        assert_eq!(host_port("http://localhost:9"), "localhost:9");
        assert_eq!(host_port("127.0.0.1:7"), "127.0.0.1:7");
    }
}
