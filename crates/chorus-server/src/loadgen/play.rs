//! One stream of the load: a sender on its schedule and a reader timing every PCM frame.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chorus_core::{FRAME_MS, FRAME_SAMPLES};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{Notify, Semaphore};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::{frame_hash, LoadInput, LoadgenConfig, Rate, Rng, LOADGEN_OPUS_BITRATE};
use crate::protocol::{
    decode_pcm, encode_codes, PcmFormat, ServerMessage, PCM_HEADER_BYTES, PROTOCOL_VERSION,
};

/// What one stream's sender puts on the wire each frame.
struct Source {
    input: LoadInput,
    pcm: PcmFormat,
    rng: Rng,
    codes: Vec<u32>,
    audio: Vec<f32>,
    opus: Option<chorus_audio::OpusFrameEncoder>,
    stream: usize,
}

impl Source {
    fn new(cfg: &LoadgenConfig, s: usize) -> Self {
        let opus = (cfg.input == LoadInput::Pcm && cfg.pcm == PcmFormat::Opus)
            .then(|| chorus_audio::OpusFrameEncoder::new(LOADGEN_OPUS_BITRATE).ok())
            .flatten();
        Self {
            input: cfg.input,
            pcm: cfg.pcm,
            rng: Rng::for_stream(cfg.seed, s),
            codes: Vec::with_capacity(cfg.n_q),
            audio: vec![0.0; FRAME_SAMPLES],
            opus,
            stream: s,
        }
    }

    /// Frame `t`'s message: codes, or a tone with seeded noise as s16, f32 or one Opus packet.
    fn message(&mut self, t: u64, n_q: usize, card: usize) -> Vec<u8> {
        if self.input == LoadInput::Codes {
            self.rng.frame(n_q, card, &mut self.codes);
            return encode_codes(&self.codes);
        }
        tone_frame(self.stream, t, &mut self.rng, &mut self.audio);
        match (self.pcm, self.opus.as_mut()) {
            (PcmFormat::Opus, Some(enc)) => {
                let mut packet = Vec::new();
                // A failed packet is sent empty: the server then reports the stream's error.
                let _ = enc.encode(&self.audio, &mut packet);
                packet
            }
            // No encoder could be made: an empty message, which the server refuses by name.
            (PcmFormat::Opus, None) => Vec::new(),
            (PcmFormat::F32, _) => self.audio.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => self
                .audio
                .iter()
                .flat_map(|v| ((v * 32768.0).round() as i16).to_le_bytes())
                .collect(),
        }
    }
}

/// Frame `t` of stream `stream`'s test audio: a tone of the stream's own pitch with seeded noise.
pub(crate) fn tone_frame(stream: usize, t: u64, rng: &mut Rng, out: &mut [f32]) {
    let f = 150.0 + 37.0 * (stream % 16) as f64;
    for (i, x) in out.iter_mut().enumerate() {
        // The phase in f64, wrapped: an f32 sample clock loses the tone after minutes.
        let n = (t as usize * FRAME_SAMPLES + i) as f64 / 24_000.0;
        let phase = (n * f).fract() * std::f64::consts::TAU;
        let noise = (rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        *x = 0.3 * phase.sin() as f32 + 0.02 * noise;
    }
}

/// Bytes a client connection reads at once: two f32 PCM frames. tungstenite zeroes this much
/// before every read (see `crate::ws::WS_READ_BUFFER_BYTES`), so its 128 KiB default spent the
/// client's time clearing memory.
const CLIENT_READ_BUFFER_BYTES: usize = 16 << 10;
/// How long a stream waits for its next message before it gives up.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a waiting sender re-checks its window (in case a wake-up was missed).
const WINDOW_RECHECK: Duration = Duration::from_millis(50);
/// Codebook size assumed until the server says otherwise.
const DEFAULT_CODEBOOK_SIZE: usize = 2048;

/// What one stream saw.
#[derive(Default)]
pub(crate) struct StreamResult {
    pub opened: bool,
    pub completed: bool,
    pub sent: u64,
    pub latencies_ms: Vec<f64>,
    /// When each frame of `latencies_ms` was sent, seconds after the load generator started.
    pub sent_s: Vec<f32>,
    pub hashes: Vec<u64>,
    /// The PCM itself, for the first `keep_pcm_streams` streams.
    pub pcm: Vec<f32>,
    pub errors: Vec<String>,
    pub codebook_size: usize,
    /// Payload bytes of the binary messages sent and received.
    pub bytes_sent: u64,
    pub bytes_received: u64,
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

/// An open WebSocket of the client.
pub(crate) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects a WebSocket to `path` on `addr`, presenting `key` (the gate's `kyutai-api-key`
/// header) when given; the error code to report on failure (`unauthorized` for a 401).
pub(crate) async fn connect(addr: &str, path: &str, key: Option<&str>) -> Result<Ws, String> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Error as WsError;
    let mut req = format!("ws://{addr}{path}")
        .into_client_request()
        .map_err(|_| "connect".to_string())?;
    if let Some(k) = key {
        let value = k.parse().map_err(|_| "bad_api_key".to_string())?;
        req.headers_mut()
            .insert(crate::gate::request::KYUTAI_KEY_HEADER, value);
    }
    let config = WebSocketConfig::default().read_buffer_size(CLIENT_READ_BUFFER_BYTES);
    // Nagle off (`disable_nagle`), as on the server: see `crate::tcp::real_time`.
    match tokio_tungstenite::connect_async_with_config(req, Some(config), true).await {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(res)) if res.status().as_u16() == 401 => Err("unauthorized".into()),
        Err(_) => Err("connect".into()),
    }
}

/// Connects and opens a codes stream; returns the socket, the server's queue bound and codebook
/// size, or the error code to report.
async fn handshake(cfg: &LoadgenConfig, addr: &str) -> Result<(Ws, usize, usize), String> {
    let mut ws = connect(addr, "/v1/stream", cfg.api_key.as_deref()).await?;
    let input = match cfg.input {
        LoadInput::Codes => "codes",
        LoadInput::Pcm => "pcm",
    };
    let open = serde_json::json!({
        "type": "open", "version": PROTOCOL_VERSION, "input": input,
        "n_q": cfg.n_q, "pcm": cfg.pcm,
    });
    ws.send(Message::Text(open.to_string().into()))
        .await
        .map_err(|_| "send".to_string())?;
    match tokio::time::timeout(READ_TIMEOUT, ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => match serde_json::from_str::<ServerMessage>(&t) {
            Ok(ServerMessage::Opened {
                max_pending_frames,
                codebook_size,
                ..
            }) => Ok((ws, max_pending_frames, codebook_size)),
            Ok(ServerMessage::Error { code, .. }) => Err(code.as_str().into()),
            _ => Err("protocol".into()),
        },
        _ => Err("open_failed".into()),
    }
}

/// Plays stream `s`; `gate` bounds how many streams connect at once.
pub(crate) async fn play(
    s: usize,
    cfg: &LoadgenConfig,
    addr: &str,
    gate: Arc<Semaphore>,
    run_start: Instant,
) -> StreamResult {
    let mut r = StreamResult {
        codebook_size: DEFAULT_CODEBOOK_SIZE,
        ..StreamResult::default()
    };
    let opened = {
        let _permit = gate.acquire_owned().await;
        handshake(cfg, addr).await
    };
    let (ws, max_pending, card) = match opened {
        Ok(o) => o,
        Err(code) => {
            r.errors.push(code);
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
        let (rate, duration, n_q) = (cfg.rate, cfg.duration, cfg.n_q);
        let mut source = Source::new(cfg, s);
        tokio::spawn(async move {
            let mut bytes_sent = 0u64;
            let start = tokio::time::Instant::now() + offset;
            let period = Duration::from_millis(FRAME_MS);
            let total = (duration.as_millis() / FRAME_MS as u128).max(1) as u64;
            let mut t = 0u64;
            loop {
                if progress.stop.load(Ordering::Acquire) {
                    return (t, bytes_sent, sink);
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
                let msg = source.message(t, n_q, card);
                bytes_sent += msg.len() as u64;
                lock(&progress.sent_at).push(Instant::now());
                if sink.send(Message::Binary(msg.into())).await.is_err() {
                    return (t, bytes_sent, sink);
                }
                t += 1;
            }
            let close = serde_json::json!({"type": "close"}).to_string();
            // Set first: the server's `closed` answer may arrive before this task runs again.
            progress.closed.store(true, Ordering::Release);
            let _ = sink.send(Message::Text(close.into())).await;
            (t, bytes_sent, sink)
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
                r.bytes_received += b.len() as u64;
                let expected = r.hashes.len();
                let keep = s < cfg.keep_pcm_streams;
                let Some((index, hash)) = read_frame(cfg, &b, keep.then_some(&mut r.pcm)) else {
                    r.errors.push("bad_frame".into());
                    break;
                };
                if index as usize != expected {
                    r.errors.push("out_of_order".into());
                    break;
                }
                let sent = lock(&progress.sent_at).get(expected).copied();
                if let Some(sent) = sent {
                    r.latencies_ms
                        .push(now.duration_since(sent).as_secs_f64() * 1e3);
                    r.sent_s.push(sent.duration_since(run_start).as_secs_f32());
                }
                r.hashes.push(hash);
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
    if let Ok((sent, bytes, mut sink)) = sender.await {
        r.sent = sent;
        r.bytes_sent = bytes;
        let _ = sink.close().await;
    }
    if r.completed && (r.hashes.len() as u64) < r.sent {
        r.errors.push("missing_frames".into());
        r.completed = false;
    }
    r
}

/// A received frame's index and a hash of its content; its f32 samples are appended to `keep`
/// when given. Only f32 PCM of code streams has an exact reference, so only that is hashed; the
/// bytes are hashed as they came, without decoding them.
fn read_frame(cfg: &LoadgenConfig, b: &[u8], keep: Option<&mut Vec<f32>>) -> Option<(u32, u64)> {
    let index = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
    match (cfg.input, cfg.pcm) {
        (LoadInput::Codes, PcmFormat::F32) => {
            let body = &b[PCM_HEADER_BYTES..];
            if body.len() != FRAME_SAMPLES * std::mem::size_of::<f32>() {
                return None;
            }
            if let Some(keep) = keep {
                keep.extend(
                    body.chunks_exact(4)
                        .map(|s| f32::from_le_bytes([s[0], s[1], s[2], s[3]])),
                );
            }
            Some((index, frame_hash(body)))
        }
        (LoadInput::Codes, PcmFormat::S16) => {
            let pcm = decode_pcm(b, cfg.pcm)?;
            if let Some(keep) = keep {
                keep.extend_from_slice(&pcm.samples);
            }
            Some((pcm.index, 0))
        }
        // An Opus packet is not decoded here: its size is what is measured.
        (LoadInput::Codes, PcmFormat::Opus) => (b.len() > 4).then_some((index, 0)),
        (LoadInput::Pcm, _) => (b.len() >= 4 + 2 * cfg.n_q).then_some((index, 0)),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Only pushes and reads happen under this lock, so a poisoned value is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
