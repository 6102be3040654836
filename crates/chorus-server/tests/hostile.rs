//! Hostile and broken clients: each gets an error naming what it did wrong, and a well-behaved
//! client on the same server gets all of its output meanwhile.

mod common;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chorus_core::{Buckets, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_engine::fake::FakeDecoder;
use chorus_engine::{Engine, EngineConfig};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::random::{random_model as random_mimi, small_config};
use chorus_mimi::{EncoderOptions, SlotEncoder};
use chorus_server::encode::{EncodeConfig, EncodeEngine, EncodePool, MAX_ENCODE_SECONDS};
use chorus_server::gate::{ApiKeys, Limits};
use chorus_server::loadgen::{http_request, http_request_keyed};
use chorus_server::stt::{SttEngine, SttServeConfig, MAX_PENDING_MARKERS};
use chorus_server::{Server, ServerConfig, Services, MAX_DECODE_FRAMES};
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{
    random_model, StreamEvent, StreamRequest, SttConfig, SttModel, SttOptions, SttStage,
    SttTokenizer,
};
use common::*;
#[path = "../../chorus-audio/tests/common/flac.rs"]
mod flac;
use flac::{silent_flac, FLAC_BLOCK};
use futures_util::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Frames the bystander decode stream sends before and after the hostile client's turn.
const BYSTANDER_FRAMES: u64 = 4;
/// Codebooks of the bystander decode stream.
const BYSTANDER_N_Q: usize = 4;

/// A decode stream that keeps going while hostile clients do their worst: every frame it sends
/// must come back exactly as the fake decoder makes it.
struct Bystander {
    ws: Ws,
    sent: Vec<Vec<u32>>,
}

impl Bystander {
    async fn open(server: &Server) -> Self {
        Self {
            ws: open(server, BYSTANDER_N_Q, "f32").await,
            sent: Vec::new(),
        }
    }

    /// Opens the stream with `key` in the `kyutai-api-key` header.
    async fn open_keyed(server: &Server, key: &str) -> Self {
        let url = format!("ws://{}/v1/stream", server.local_addr());
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("kyutai-api-key", key.parse().unwrap());
        let mut ws = tokio_tungstenite::connect_async(req).await.unwrap().0;
        send_text(&mut ws, &open_msg(BYSTANDER_N_Q, "f32")).await;
        assert!(matches!(
            next_json(&mut ws).await,
            chorus_server::protocol::ServerMessage::Opened { .. }
        ));
        Self {
            ws,
            sent: Vec::new(),
        }
    }

    /// Sends frames and checks their PCM.
    async fn step(&mut self) {
        let first = self.sent.len() as u64;
        let frames: Vec<Vec<u32>> = (first..first + BYSTANDER_FRAMES)
            .map(|t| codes(9, t, BYSTANDER_N_Q))
            .collect();
        send_codes(&mut self.ws, &frames.concat()).await;
        self.sent.extend(frames);
        let pcm = read_pcm(&mut self.ws, first as u32, BYSTANDER_FRAMES as u32).await;
        let all = reference(&self.sent);
        assert_eq!(
            pcm,
            all[first as usize * FRAME_SAMPLES..],
            "bystander frames"
        );
    }

    /// Closes the stream and checks that every frame was delivered.
    async fn close(mut self) {
        send_text(&mut self.ws, r#"{"type":"close"}"#).await;
        assert_eq!(
            next_json(&mut self.ws).await,
            chorus_server::protocol::ServerMessage::Closed {
                frames: self.sent.len() as u64
            }
        );
        expect_close(&mut self.ws, 1000).await;
    }
}

/// A `[1, frames]` `.npy` array of one-byte codes (`|u1`), all `code`.
fn npy_u1(frames: usize, code: u8) -> Vec<u8> {
    let mut header =
        format!("{{'descr': '|u1', 'fortran_order': False, 'shape': (1, {frames}), }}");
    // Magic, version, header length, then the header padded with spaces to 64 bytes and a newline.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.resize(out.len() + frames, code);
    out
}

/// `(status, code, message)` of a JSON error answer (panics on any other answer).
fn json_error(status: u16, body: &[u8]) -> (u16, String, String) {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "status {status}: the error is not JSON ({e}): {:?}",
            String::from_utf8_lossy(body)
        )
    });
    (
        status,
        v["code"].as_str().unwrap_or_default().to_string(),
        v["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_8_mib_file_of_one_byte_codes_is_refused_not_decoded_into_64_gb() {
    let server = start(2, 2).await;
    let addr = server.local_addr().to_string();
    let mut by = Bystander::open(&server).await;
    by.step().await;
    // The largest body the default limit takes, as one-byte codes of one codebook: 8 M frames,
    // whose answer would be 64 GB of samples (the allocation alone used to abort the server).
    let frames = Limits::default().max_decode_body - 128;
    let started = Instant::now();
    let (status, body) = http_request(&addr, "POST", "/v1/decode", npy_u1(frames, 7))
        .await
        .unwrap();
    let (status, code, message) = json_error(status, &body);
    assert_eq!((status, code.as_str()), (413, "too_large"), "{message}");
    assert!(
        message.contains(&format!("{frames} frames"))
            && message.contains(&format!("at most {MAX_DECODE_FRAMES} frames")),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "refused late");
    // Just past the limit is refused too; a short file still decodes.
    let (status, body) = http_request(
        &addr,
        "POST",
        "/v1/decode",
        npy_u1(MAX_DECODE_FRAMES + 1, 7),
    )
    .await
    .unwrap();
    assert_eq!(json_error(status, &body).1, "too_large");
    let (status, body) = http_request(&addr, "POST", "/v1/decode?format=f32", npy_u1(3, 7))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body.len(), 3 * FRAME_SAMPLES * 4);
    by.step().await;
    by.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_decode_query_parameters_get_a_json_error_naming_them() {
    let server = start(2, 2).await;
    let addr = server.local_addr().to_string();
    let mut by = Bystander::open(&server).await;
    by.step().await;
    let cases = [
        // An unknown format, a misspelt parameter (it used to be ignored: WAV came back), and a
        // bitrate that is not a number.
        ("/v1/decode?format=mp3", "mp3"),
        ("/v1/decode?formt=f32", "formt"),
        ("/v1/decode?format=ogg&bitrate=fast", "bitrate"),
    ];
    for (path, needle) in cases {
        let (status, body) = http_request(&addr, "POST", path, npy_u1(2, 1))
            .await
            .unwrap();
        let (status, code, message) = json_error(status, &body);
        assert_eq!(
            (status, code.as_str()),
            (400, "bad_open"),
            "{path}: {message}"
        );
        assert!(message.contains(needle), "{path}: {message}");
    }
    by.step().await;
    by.close().await;
}

/// A server whose `/v1/encode` runs a small random Mimi encoder (one slot) on the CPU.
async fn encode_server() -> Server {
    let encode = EncodeEngine::start(
        Box::new(|| {
            let m = mimi();
            let opts = EncoderOptions {
                max_slots: 1,
                buckets: Buckets::new(&[1]).unwrap(),
                chunk_frames: 1,
            };
            let be = CpuBackend::new(Some(1))?;
            Ok(Box::new(SlotEncoder::from_weights(be, &m.config, &m.weights, opts)?) as _)
        }),
        EncodeConfig {
            max_pending_frames: 32,
            max_undelivered: 64,
        },
    )
    .unwrap();
    let engine = Engine::start(
        Box::new(|| Ok(Box::new(FakeDecoder::new(fake(2, 2))) as _)),
        EngineConfig::default(),
    )
    .unwrap();
    let services = Services {
        encode: Some(Arc::new(EncodePool::from(encode))),
        ..Services::default()
    };
    start_services(engine, services).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_encode_query_parameters_get_a_json_error_naming_them() {
    let server = encode_server().await;
    let addr = server.local_addr().to_string();
    let mut by = Bystander::open(&server).await;
    by.step().await;
    let wav = chorus_server::wav::encode_wav(
        &stt_audio(2 * FRAME_SAMPLES),
        chorus_server::wav::WavFormat::Pcm16,
    )
    .unwrap();
    for (path, needle) in [
        ("/v1/encode?n_q=eight", "n_q"),
        ("/v1/encode?allow_truncate=true", "allow_truncate"),
    ] {
        let (status, body) = http_request(&addr, "POST", path, wav.clone())
            .await
            .unwrap();
        let (status, code, message) = json_error(status, &body);
        assert_eq!(
            (status, code.as_str()),
            (400, "bad_open"),
            "{path}: {message}"
        );
        assert!(message.contains(needle), "{path}: {message}");
    }
    let (status, body) = http_request(&addr, "POST", "/v1/encode?n_q=2", wav)
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    by.step().await;
    by.close().await;
}

/// Rate of the hostile FLAC: the model's own, so the server does no resampling on it.
const FLAC_RATE: u32 = 24_000;
/// Hours of silence in the hostile FLAC: 3.3 GB of f32 samples if decoded whole.
const HOSTILE_HOURS: u64 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hours_of_silent_flac_are_refused_at_the_limit_and_the_next_encode_succeeds() {
    let server = encode_server().await;
    let addr = server.local_addr().to_string();
    let mut by = Bystander::open(&server).await;
    by.step().await;
    // Ten hours in about 200 KB: decoded whole it would be 3.3 GB; decoding stops at the limit.
    let blocks = (HOSTILE_HOURS * 3600 * u64::from(FLAC_RATE)).div_ceil(u64::from(FLAC_BLOCK));
    let flac = silent_flac(FLAC_RATE, blocks as u32);
    assert!(flac.len() < 256 * 1024, "{} bytes", flac.len());
    let started = Instant::now();
    let (status, body) = http_request(&addr, "POST", "/v1/encode?n_q=2", flac)
        .await
        .unwrap();
    let took = started.elapsed();
    let (status, code, message) = json_error(status, &body);
    assert_eq!((status, code.as_str()), (413, "bad_audio"), "{message}");
    assert!(
        message.contains(&format!("longer than the {MAX_ENCODE_SECONDS} s limit"))
            && message.contains(&format!("at most {MAX_ENCODE_SECONDS} s"))
            && message.contains("(flac)"),
        "{message}"
    );
    assert!(took < WAIT, "refused after {took:?}");
    by.step().await;
    // The slot is free again and a well-behaved file encodes.
    let wav = chorus_server::wav::encode_wav(
        &stt_audio(3 * FRAME_SAMPLES),
        chorus_server::wav::WavFormat::Pcm16,
    )
    .unwrap();
    let (status, body) = http_request(&addr, "POST", "/v1/encode?n_q=2", wav)
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        body.starts_with(b"\x93NUMPY") && body.len() > 2 * 3 * 8,
        "{} bytes",
        body.len()
    );
    by.step().await;
    by.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_kyutai_key_and_a_silent_connection_are_refused_and_disturb_no_stream() {
    let config = ServerConfig {
        api_keys: Some(ApiKeys::from_keys(&["right-key"]).unwrap()),
        limits: Limits {
            header_timeout: Duration::from_secs(1),
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let server = start_with(fake(2, 2), EngineConfig::default(), config).await;
    let addr = server.local_addr().to_string();
    let mut by = Bystander::open_keyed(&server, "right-key").await;
    by.step().await;
    // A connection that sends nothing at all is closed at the header deadline.
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let opened = Instant::now();
    // A wrong key on a body endpoint and on an upgrade: 401 naming where a key goes.
    let (status, body) =
        http_request_keyed(&addr, "POST", "/v1/decode", npy_u1(2, 1), Some("wrong-key"))
            .await
            .unwrap();
    let (status, code, message) = json_error(status, &body);
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    assert!(message.contains("kyutai-api-key"), "{message}");
    let mut req = format!("ws://{addr}/v1/stream")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("kyutai-api-key", "wrong-key".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
            let body = res.body().clone().unwrap_or_default();
            let (status, code, _) = json_error(res.status().as_u16(), &body);
            assert_eq!((status, code.as_str()), (401, "unauthorized"));
        }
        other => panic!("expected 401, got {other:?}"),
    }
    by.step().await;
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(WAIT, silent.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the silent connection was not closed: {read:?}"
    );
    let at = opened.elapsed();
    assert!(
        at >= Duration::from_millis(900) && at < Duration::from_secs(4),
        "closed after {at:?}"
    );
    let _ = silent.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").await;
    by.step().await;
    by.close().await;
}

// ---- Speech to text: the `random-small` stage with a small random Mimi encoder on the CPU.

/// Frames one stream may send (audio and flush silence).
const STT_MAX_FRAMES: usize = 160;
/// Whole frames of the bystander's audio.
const STT_FRAMES: usize = 12;

fn stt_model() -> &'static SttModel {
    static M: OnceLock<SttModel> = OnceLock::new();
    M.get_or_init(|| random_model(SttConfig::random_small(), RANDOM_STT_SEED).unwrap())
}

fn mimi() -> &'static LoadedModel {
    static M: OnceLock<LoadedModel> = OnceLock::new();
    M.get_or_init(|| random_mimi(&small_config(), 0x51).unwrap())
}

fn stt_stage(streams: usize) -> (SttStage<CpuBackend>, SttOptions) {
    let mut opts = SttOptions::for_streams(streams).unwrap();
    opts.max_frames = STT_MAX_FRAMES;
    let be = CpuBackend::new(Some(1)).unwrap();
    let st = SttStage::with_encoder(be, stt_model(), mimi(), opts.clone()).unwrap();
    (st, opts)
}

async fn stt_server() -> Server {
    let tokenizer = SttTokenizer::synthetic(&stt_model().config);
    let stt = SttEngine::start(
        Box::new(|| Ok(stt_stage(3))),
        SttServeConfig::default(),
        tokenizer,
    )
    .unwrap();
    let engine = Engine::start(
        Box::new(|| Ok(Box::new(FakeDecoder::new(fake(1, 1))) as _)),
        EngineConfig::default(),
    )
    .unwrap();
    let services = Services {
        stt: Some(Arc::new(stt)),
        ..Services::default()
    };
    start_services(engine, services).await
}

fn stt_audio(samples: usize) -> Vec<f32> {
    (0..samples)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            0.3 * (std::f32::consts::TAU * 220.0 * t).sin()
        })
        .collect()
}

/// The tokens of `pcm` (whole frames) then `silence` frames, run on a stage alone and ended.
fn stt_direct(pcm: &[f32], silence: usize) -> Vec<(usize, u32)> {
    let (mut st, _) = stt_stage(1);
    let id = st.add(StreamRequest::default()).unwrap();
    let mut padded = pcm.to_vec();
    padded.resize(padded.len() + silence * FRAME_SAMPLES, 0.0);
    st.push_pcm(id, &padded).unwrap();
    st.end(id).unwrap();
    let mut tokens = Vec::new();
    st.drain(&mut |e| {
        if let StreamEvent::Token {
            position, token, ..
        } = e
        {
            tokens.push((position, token));
        }
    })
    .unwrap();
    tokens
}

async fn stt_json(ws: &mut Ws) -> serde_json::Value {
    match next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

/// The next `/v1/stt` message that is not progress (`step`, `flushed`, words).
async fn stt_outcome(ws: &mut Ws) -> serde_json::Value {
    loop {
        let m = stt_json(ws).await;
        let kind = m["type"].as_str().unwrap_or_default();
        if !matches!(
            kind,
            "step" | "flushed" | "word" | "end_word" | "end_of_turn"
        ) {
            return m;
        }
    }
}

/// The next `/api/asr-streaming` message that is not a `Step`, as JSON.
async fn asr_outcome(ws: &mut Ws) -> serde_json::Value {
    loop {
        let m: serde_json::Value = match next(ws).await {
            Message::Binary(b) => rmp_serde::from_slice(&b).unwrap(),
            other => panic!("expected MessagePack, got {other:?}"),
        };
        if m["type"] != "Step" {
            return m;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marker_and_flush_floods_are_refused_and_the_running_stream_is_untouched() {
    let server = stt_server().await;
    let pcm = stt_audio(STT_FRAMES * FRAME_SAMPLES);
    let flush_frames = stt_stage(1).0.flush_frames();
    let mut good = connect_path(&server, "/v1/stt").await;
    send_text(&mut good, r#"{"type":"start","format":"f32"}"#).await;
    assert_eq!(stt_json(&mut good).await["type"], "started");
    let f32_bytes = |s: &[f32]| -> Vec<u8> { s.iter().flat_map(|v| v.to_le_bytes()).collect() };
    good.send(Message::Binary(f32_bytes(&pcm[..pcm.len() / 2]).into()))
        .await
        .unwrap();

    // Markers with no audio after them wait forever: past the bound the stream is refused.
    let mut asr = connect_path(&server, "/api/asr-streaming").await;
    assert_eq!(asr_outcome(&mut asr).await["type"], "Ready");
    for id in 0..=MAX_PENDING_MARKERS as i64 {
        let msg = rmp_serde::to_vec_named(&serde_json::json!({"type": "Marker", "id": id}));
        asr.send(Message::Binary(msg.unwrap().into()))
            .await
            .unwrap();
    }
    let m = asr_outcome(&mut asr).await;
    assert_eq!(m["type"], "Error", "{m}");
    let message = m["message"].as_str().unwrap();
    assert!(
        message.starts_with("bad_request")
            && message.contains(&format!("{MAX_PENDING_MARKERS} markers")),
        "{message}"
    );
    expect_close(&mut asr, 1008).await;

    // Flushes past the stream's frames are refused as flushes, when they are sent.
    let mut flood = connect_path(&server, "/v1/stt").await;
    send_text(&mut flood, r#"{"type":"start"}"#).await;
    assert_eq!(stt_json(&mut flood).await["type"], "started");
    for _ in 0..STT_MAX_FRAMES / flush_frames + 1 {
        send_text(&mut flood, r#"{"type":"flush"}"#).await;
    }
    let m = stt_outcome(&mut flood).await;
    assert_eq!(
        (m["type"].as_str(), m["code"].as_str()),
        (Some("error"), Some("bad_request"))
    );
    let message = m["message"].as_str().unwrap();
    assert!(
        message.contains("`flush`") && message.contains(&STT_MAX_FRAMES.to_string()),
        "{message}"
    );
    expect_close(&mut flood, 1008).await;

    // The stream that ran all along gets every step of its audio and its end.
    good.send(Message::Binary(f32_bytes(&pcm[pcm.len() / 2..]).into()))
        .await
        .unwrap();
    send_text(&mut good, r#"{"type":"end"}"#).await;
    let mut tokens = Vec::new();
    let end = loop {
        let m = stt_json(&mut good).await;
        match m["type"].as_str().unwrap() {
            "step" => tokens.push((
                m["position"].as_u64().unwrap() as usize,
                m["token"].as_u64().unwrap() as u32,
            )),
            "end" | "error" => break m,
            _ => {}
        }
    };
    assert_eq!(end["type"], "end", "{end}");
    assert_eq!(tokens, stt_direct(&pcm, flush_frames));
    expect_close(&mut good, 1000).await;
}

async fn connect_path(server: &Server, path: &str) -> Ws {
    let url = format!("ws://{}{path}", server.local_addr());
    tokio_tungstenite::connect_async(url).await.unwrap().0
}
