//! Load generator: plays N code streams against a server and checks every frame ([`tts`]: N
//! speakers on `/v1/tts`, timing the gaps between frames; [`stt`]: N real-time audio streams on
//! `/v1/stt` or `/api/asr-streaming`, timing each step's output past its audio).
//!
//! Each stream sends seeded random codes, one frame per message, either on the real-time clock
//! (one frame every 80 ms from a staggered start) or as fast as a window of frames in flight
//! allows, and asks for f32 PCM. Latency is from a frame's send to its PCM's arrival. After the
//! load phase, each checked stream's codes are decoded again as a whole file by the same server
//! (`POST /v1/decode?format=f32`: same weights, backend and precision, but a different batch
//! composition), and every streamed frame must equal that decode bit for bit (compared through a
//! 64-bit hash of the frame's bytes).

mod http;
mod play;
mod report;
mod server_stats;
pub mod stt;
pub mod tts;
mod verify;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_core::Result;
use serde::Serialize;

pub use http::{http_exchange, http_request, http_request_keyed, HttpAnswer};
use play::{play, StreamResult};
pub use report::{Latency, LoadgenReport, Verify};
pub use server_stats::{DeviceStats, Figures, ServerStats};

/// Streams connecting at once (more would overflow the server's listen backlog).
const CONNECT_CONCURRENCY: usize = 256;
/// Pause between health checks while waiting for the server.
const READY_POLL: Duration = Duration::from_millis(100);
/// Golden-ratio increment that separates the per-stream seeds.
const SEED_STRIDE: u64 = 0x9E37_79B9_7F4A_7C15;

/// How fast each stream sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rate {
    /// One frame every 80 ms.
    Realtime,
    /// As fast as the window of frames in flight allows.
    Max,
}

/// What each stream sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadInput {
    /// Seeded random codes, decoded by the server (PCM back).
    Codes,
    /// Audio, encoded by the server (codes back).
    Pcm,
}

/// Opus bitrate of the audio encode streams send with `pcm: opus` (bits per second).
pub const LOADGEN_OPUS_BITRATE: u32 = 32_000;

/// What to play.
#[derive(Clone, Debug)]
pub struct LoadgenConfig {
    /// Codes to decode or audio to encode.
    pub input: LoadInput,
    /// The wire format of audio: the PCM decode streams ask for (`f32` is checked bit for bit;
    /// `s16` and `opus` are not), or the audio encode streams send.
    pub pcm: crate::protocol::PcmFormat,
    /// `ws://host:port`, `http://host:port` or `host:port`; several, comma-separated, spread
    /// the streams over independent servers (stream `s` on server `s % n`).
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
    /// The key every connection and request presents (the gate's `kyutai-api-key` header).
    pub api_key: Option<String>,
}

/// splitmix64: a small seeded generator, identical on every machine.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn for_stream(seed: u64, stream: usize) -> Self {
        Self(seed ^ (stream as u64 + 1).wrapping_mul(SEED_STRIDE))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(SEED_STRIDE);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn frame(&mut self, n_q: usize, card: usize, out: &mut Vec<u32>) {
        out.clear();
        out.extend((0..n_q).map(|_| (self.next() % card as u64) as u32));
    }
}

/// Independent hash lanes: a frame is hashed as interleaved 64-bit words, one chain per lane, so
/// the multiplies of different lanes overlap instead of waiting on one another.
const HASH_LANES: usize = 4;
const HASH_WORD: usize = 8;

/// A 64-bit hash of a frame's f32 samples, given as the wire's little-endian bytes (so a received
/// frame is hashed without decoding it). The load generator hashes every frame it receives, at
/// up to 300,000 frames/s over a run: two samples per step and four independent multiply-xorshift
/// chains keep that to a fraction of a microsecond per frame. Any changed bit, a swap of two
/// samples or a different length changes the hash.
pub(crate) fn frame_hash(bytes: &[u8]) -> u64 {
    const MUL: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes: [u64; HASH_LANES] =
        std::array::from_fn(|i| 0xcbf2_9ce4_8422_2325 ^ (bytes.len() as u64) ^ ((i as u64) << 56));
    let step = |h: u64, w: u64| {
        let h = (h ^ w).wrapping_mul(MUL);
        h ^ (h >> 29)
    };
    let mut blocks = bytes.chunks_exact(HASH_LANES * HASH_WORD);
    for block in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(HASH_WORD)) {
            let mut word = [0u8; HASH_WORD];
            word.copy_from_slice(w);
            *lane = step(*lane, u64::from_le_bytes(word));
        }
    }
    // The tail (under one block) goes into lane 0, zero-padded; the length is in every lane.
    for w in blocks.remainder().chunks(HASH_WORD) {
        let mut word = [0u8; HASH_WORD];
        word[..w.len()].copy_from_slice(w);
        lanes[0] = step(lanes[0], u64::from_le_bytes(word));
    }
    lanes.iter().fold(0, |h, &l| step(h.rotate_left(23), l))
}

/// [`frame_hash`] of samples held as floats.
#[cfg(test)]
fn frame_hash_f32(samples: &[f32]) -> u64 {
    let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    frame_hash(&bytes)
}

/// `host:port` of a URL.
pub fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// `host:port` of each server in a comma-separated list of URLs.
pub fn host_ports(urls: &str) -> Vec<String> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(host_port)
        .collect()
}

/// Plays the configured load and checks the output.
pub async fn run(config: LoadgenConfig) -> Result<LoadgenReport> {
    let addrs = host_ports(&config.url);
    if addrs.is_empty() {
        return Err(chorus_core::Error::input(
            "loadgen::run",
            format!("no server in `{}`", config.url),
        ));
    }
    let mut before = Vec::with_capacity(addrs.len());
    for addr in &addrs {
        wait_ready(addr, config.wait_ready).await?;
    }
    for addr in &addrs {
        before.push(server_stats::scrape(addr, config.api_key.as_deref()).await);
    }
    let started = Instant::now();
    let cpu_before = process_cpu_seconds();
    let config = Arc::new(config);
    let mut tasks = Vec::with_capacity(config.streams);
    let gate = Arc::new(tokio::sync::Semaphore::new(CONNECT_CONCURRENCY));
    for s in 0..config.streams {
        let (cfg, addr) = (config.clone(), addrs[s % addrs.len()].clone());
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            play(s, &cfg, &addr, gate, started).await
        }));
    }
    let mut results = Vec::with_capacity(tasks.len());
    for t in tasks {
        results.push(t.await.unwrap_or_else(|e| StreamResult {
            errors: vec![format!("task: {e}")],
            ..StreamResult::default()
        }));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu_before;
    let mut servers = Vec::with_capacity(addrs.len());
    for (addr, before) in addrs.iter().zip(before) {
        if let (Some(b), Some(a)) = (
            before,
            server_stats::scrape(addr, config.api_key.as_deref()).await,
        ) {
            let mut stats = server_stats::delta(b, a, server_stats::decoder(addr).await, elapsed);
            stats.addr = addr.clone();
            servers.push(stats);
        }
    }
    let verify = verify::verify(&config, &addrs, &mut results).await;
    let mut report = report::report(&config, &results, elapsed, verify);
    if addrs.len() == 1 {
        report.server = servers.first().cloned();
    }
    report.servers = servers;
    report.client_cpu_cores = if elapsed > 0.0 { cpu / elapsed } else { 0.0 };
    Ok(report)
}

/// CPU time (user + system) this process has used, in seconds: a load generator that uses most
/// of the machine's cores measures itself as much as the server.
fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes one plain struct we own; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut u) != 0 {
            return 0.0;
        }
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

async fn wait_ready(addr: &str, wait: Duration) -> Result<()> {
    let deadline = Instant::now() + wait;
    loop {
        match http_request(addr, "GET", "/healthz", Vec::new()).await {
            Ok((200, _)) => return Ok(()),
            Ok((status, body)) if Instant::now() >= deadline => {
                return Err(http::net_err(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_hashes_see_every_bit() {
        let frame: Vec<f32> = (0..1920).map(|i| (i as f32 * 0.37).sin()).collect();
        let h = frame_hash_f32(&frame);
        assert_eq!(h, frame_hash_f32(&frame.clone()));
        for &at in &[0, 1, 958, 959, 1918, 1919] {
            for bit in [0, 17, 31] {
                let mut g = frame.clone();
                g[at] = f32::from_bits(g[at].to_bits() ^ (1 << bit));
                assert_ne!(frame_hash_f32(&g), h, "sample {at} bit {bit}");
            }
        }
        // Swapping two samples changes it too, and so does an odd length.
        let mut swapped = frame.clone();
        swapped.swap(10, 11);
        assert_ne!(frame_hash_f32(&swapped), h);
        // Whole words swapped between lanes (samples 0-1 with 2-3), and within one lane (words 0
        // and 4, which the same chain takes in turn).
        for (a, b) in [(0, 2), (0, 8)] {
            let mut g = frame.clone();
            g.swap(a, b);
            g.swap(a + 1, b + 1);
            assert_ne!(
                frame_hash_f32(&g),
                h,
                "words at samples {a} and {b} swapped"
            );
        }
        assert_ne!(
            frame_hash_f32(&frame[..1919]),
            frame_hash_f32(&frame[..1918])
        );
        assert_ne!(
            frame_hash_f32(&frame[..1916]),
            frame_hash_f32(&frame[..1912])
        );
    }

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
