//! A server on a loopback port with the fake decoder, and a small WebSocket client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chorus_core::FrameInput;
use chorus_engine::fake::{FakeDecoder, FakeOptions};
use chorus_engine::{Engine, EngineConfig, EnginePool};
use chorus_server::protocol::{decode_pcm, encode_codes, PcmFormat, ServerMessage};
use chorus_server::{Server, ServerConfig, Services};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const WAIT: Duration = Duration::from_secs(10);

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub fn fake(max_slots: usize, largest_batch: usize) -> FakeOptions {
    FakeOptions {
        max_slots,
        largest_batch,
        ..FakeOptions::default()
    }
}

pub async fn start_with(
    opts: FakeOptions,
    engine_config: EngineConfig,
    config: ServerConfig,
) -> Server {
    let engine = Engine::start(
        Box::new(move || Ok(Box::new(FakeDecoder::new(opts)) as _)),
        engine_config,
    )
    .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Server::bind(Arc::new(EnginePool::from(engine)), addr, config)
        .await
        .unwrap()
}

/// A server on `engine` with the stages of `services`, default configuration.
pub async fn start_services(engine: Engine, services: Services) -> Server {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Server::bind_with(
        Arc::new(EnginePool::from(engine)),
        services,
        addr,
        ServerConfig::default(),
    )
    .await
    .unwrap()
}

/// A server on one fake engine per `(device, options)`.
pub async fn start_pool(devices: Vec<(usize, FakeOptions)>) -> Server {
    let engines = devices
        .into_iter()
        .map(|(device, opts)| {
            Engine::start_on(
                device,
                Box::new(move || Ok(Box::new(FakeDecoder::new(opts)) as _)),
                EngineConfig::default(),
            )
            .unwrap()
        })
        .collect();
    let pool = EnginePool::new(engines).unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Server::bind(Arc::new(pool), addr, ServerConfig::default())
        .await
        .unwrap()
}

pub async fn start(max_slots: usize, largest_batch: usize) -> Server {
    start_with(
        fake(max_slots, largest_batch),
        EngineConfig::default(),
        ServerConfig::default(),
    )
    .await
}

pub async fn connect(server: &Server) -> Ws {
    let url = format!("ws://{}/v1/stream", server.local_addr());
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

pub async fn send_text(ws: &mut Ws, text: &str) {
    ws.send(Message::Text(text.into())).await.unwrap();
}

pub async fn send_codes(ws: &mut Ws, codes: &[u32]) {
    ws.send(Message::Binary(encode_codes(codes).into()))
        .await
        .unwrap();
}

pub fn open_msg(n_q: usize, pcm: &str) -> String {
    format!(r#"{{"type":"open","version":1,"input":"codes","n_q":{n_q},"pcm":"{pcm}"}}"#)
}

/// The next message that is not a ping or pong.
pub async fn next(ws: &mut Ws) -> Message {
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("message in time")
            .expect("stream open")
            .expect("no socket error");
        if !matches!(msg, Message::Ping(_) | Message::Pong(_)) {
            return msg;
        }
    }
}

pub async fn next_json(ws: &mut Ws) -> ServerMessage {
    match next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

/// Opens a codes stream and checks the answer.
pub async fn open(server: &Server, n_q: usize, pcm: &str) -> Ws {
    let mut ws = connect(server).await;
    send_text(&mut ws, &open_msg(n_q, pcm)).await;
    match next_json(&mut ws).await {
        ServerMessage::Opened { n_q: Some(q), .. } => assert_eq!(q, n_q),
        other => panic!("expected opened, got {other:?}"),
    }
    ws
}

/// Reads `n` f32 PCM frames, checking indices from `first`.
pub async fn read_pcm(ws: &mut Ws, first: u32, n: u32) -> Vec<f32> {
    let mut out = Vec::new();
    for i in 0..n {
        match next(ws).await {
            Message::Binary(b) => {
                let f = decode_pcm(&b, PcmFormat::F32).expect("f32 PCM frame");
                assert_eq!(f.index, first + i);
                out.extend(f.samples);
            }
            other => panic!("expected PCM frame {}, got {other:?}", first + i),
        }
    }
    out
}

/// Expects an error message with `code`, then a close frame with `close`.
pub async fn expect_error(ws: &mut Ws, code: &str, close: u16) {
    match next_json(ws).await {
        ServerMessage::Error { code: c, message } => {
            assert_eq!(c.as_str(), code, "message: {message}");
            assert!(!message.is_empty());
        }
        other => panic!("expected error {code}, got {other:?}"),
    }
    expect_close(ws, close).await;
}

pub async fn expect_close(ws: &mut Ws, close: u16) {
    match next(ws).await {
        Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::from(close)),
        other => panic!("expected close {close}, got {other:?}"),
    }
}

pub fn codes(s: u64, t: u64, n_q: usize) -> Vec<u32> {
    (0..n_q as u64)
        .map(|q| ((s * 7919 + t * 104_729 + q * 31) % 2000) as u32)
        .collect()
}

pub fn reference(frames: &[Vec<u32>]) -> Vec<f32> {
    FakeDecoder::reference(frames.iter().map(|c| FrameInput::Codes(c)))
}

/// `/healthz` of `server` (status 200) as JSON.
pub async fn healthz(server: &Server) -> serde_json::Value {
    let addr = server.local_addr().to_string();
    let (status, body) = chorus_server::loadgen::http_request(&addr, "GET", "/healthz", vec![])
        .await
        .unwrap();
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

/// Each device of `/healthz`'s `stage` (`music`, `tts`, `stt`, `encoder`): (device, live jobs,
/// reserved KV blocks, state).
pub fn stage_devices(h: &serde_json::Value, stage: &str) -> Vec<(u64, u64, u64, String)> {
    h[stage]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["device"].as_u64().unwrap(),
                d["live"].as_u64().unwrap(),
                d["kv_reserved"].as_u64().unwrap(),
                d["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
