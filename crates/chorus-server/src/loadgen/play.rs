//! One stream of the load: a sender on its schedule and a reader timing every PCM frame.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chorus_core::FRAME_MS;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{Notify, Semaphore};
use tokio_tungstenite::tungstenite::Message;

use super::{frame_hash, LoadgenConfig, Rate, Rng};
use crate::protocol::{decode_pcm, encode_codes, PcmFormat, ServerMessage, PROTOCOL_VERSION};

/// How long a stream waits for its next message before it gives up.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
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
    pub hashes: Vec<u64>,
    /// The PCM itself, for the first `keep_pcm_streams` streams.
    pub pcm: Vec<f32>,
    pub errors: Vec<String>,
    pub codebook_size: usize,
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
type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects and opens a codes stream; returns the socket, the server's queue bound and codebook
/// size, or the error code to report.
async fn handshake(cfg: &LoadgenConfig, addr: &str) -> Result<(Ws, usize, usize), String> {
    let url = format!("ws://{addr}/v1/stream");
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .map_err(|_| "connect".to_string())?;
    let open = serde_json::json!({
        "type": "open", "version": PROTOCOL_VERSION, "input": "codes",
        "n_q": cfg.n_q, "pcm": "f32",
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
