//! `/v1/stt` and `/api/asr-streaming` over real sockets on loopback: the `random-small` STT stage
//! with a small random Mimi encoder on the CPU backend, every stream checked token for token and
//! word for word against the same audio run on a stage directly.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chorus_core::FRAME_SAMPLES;
use chorus_cpu::CpuBackend;
use chorus_engine::fake::FakeDecoder;
use chorus_engine::{Engine, EngineConfig, EnginePool};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::random::{random_model as random_mimi, small_config};
use chorus_server::gate::ApiKeys;
use chorus_server::loadgen::http_request;
use chorus_server::loadgen::stt::{run_stt, SttEndpoint, SttLoadConfig};
use chorus_server::stage::{DeviceStage, FaultSwitch};
use chorus_server::stt::{SttEngine, SttServeConfig, SttStageFactory};
use chorus_server::{Server, ServerConfig, Services};
use chorus_stt::random::RANDOM_STT_SEED;
use chorus_stt::{
    random_model, StreamEvent, StreamRequest, SttConfig, SttModel, SttOptions, SttStage,
    SttTokenizer, WordEvent,
};
use common::{expect_close, fake, healthz, next, send_text, stage_devices, Ws};
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Streams of every test server (the busy test fills them).
const SLOTS: usize = 2;
/// Frames one stream may send (audio, flushes and the end's flush).
const MAX_FRAMES: usize = 160;
const MIMI_SEED: u64 = 0x51;
/// Whole frames of the test audio, and the samples past them.
const FRAMES: usize = 24;
/// The test audio whose words come out before its end (random weights speak rarely).
const WORDY: usize = 1;
const PARTIAL: usize = 700;
const KEY: &str = "public_token";

fn model() -> &'static SttModel {
    static M: OnceLock<SttModel> = OnceLock::new();
    M.get_or_init(|| random_model(SttConfig::random_small(), RANDOM_STT_SEED).unwrap())
}

fn mimi() -> &'static LoadedModel {
    static M: OnceLock<LoadedModel> = OnceLock::new();
    M.get_or_init(|| random_mimi(&small_config(), MIMI_SEED).unwrap())
}

fn tokenizer() -> SttTokenizer {
    SttTokenizer::synthetic(&model().config)
}

fn stage(streams: usize) -> (SttStage<CpuBackend>, SttOptions) {
    let mut opts = SttOptions::for_streams(streams).unwrap();
    opts.max_frames = MAX_FRAMES;
    let be = CpuBackend::new(Some(1)).unwrap();
    let st = SttStage::with_encoder(be, model(), mimi(), opts.clone()).unwrap();
    (st, opts)
}

async fn server_with(config: ServerConfig, stt_config: SttServeConfig) -> Server {
    let stt = SttEngine::start(Box::new(|| Ok(stage(SLOTS))), stt_config, tokenizer()).unwrap();
    bind(stt, config).await
}

/// A server with one CPU STT stage per `(device, fault switch)`, standing in for devices.
async fn start_devices(devices: &[(usize, FaultSwitch)]) -> Server {
    let stages = devices
        .iter()
        .map(|(device, fault)| {
            let factory: SttStageFactory<CpuBackend> = Box::new(|| Ok(stage(SLOTS)));
            DeviceStage {
                device: *device,
                factory,
                fault: Some(fault.clone()),
            }
        })
        .collect();
    let stt = SttEngine::start_on(stages, SttServeConfig::default(), tokenizer()).unwrap();
    bind(stt, ServerConfig::default()).await
}

async fn bind(stt: SttEngine, config: ServerConfig) -> Server {
    let engine = Engine::start(
        Box::new(|| Ok(Box::new(FakeDecoder::new(fake(1, 1))) as _)),
        EngineConfig::default(),
    )
    .unwrap();
    let services = Services {
        stt: Some(Arc::new(stt)),
        ..Services::default()
    };
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Server::bind_with(Arc::new(EnginePool::from(engine)), services, addr, config)
        .await
        .unwrap()
}

async fn stt_server() -> Server {
    server_with(ServerConfig::default(), SttServeConfig::default()).await
}

/// Speech-like test audio: two drifting tones and seeded noise, different per `salt`.
fn audio(salt: usize, samples: usize) -> Vec<f32> {
    let mut x = 0x9e37_79b9_u32.wrapping_mul(salt as u32 + 1);
    (0..samples)
        .map(|i| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let t = i as f32 / 24_000.0;
            let f = 180.0 + 40.0 * salt as f32 + 60.0 * t;
            let noise = (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
            0.3 * (std::f32::consts::TAU * f * t).sin()
                + 0.1 * (std::f32::consts::TAU * 2.7 * f * t).sin()
                + 0.05 * noise
        })
        .collect()
}

fn speech(salt: usize) -> Vec<f32> {
    audio(salt, FRAMES * FRAME_SAMPLES + PARTIAL)
}

/// What a stream produced: every position's token, the words (pieces and start) and ends.
#[derive(Debug, Default, PartialEq)]
struct Heard {
    tokens: Vec<(usize, u32)>,
    words: Vec<(Vec<u32>, f32)>,
    stops: Vec<f32>,
}

/// `pcm` run on a fresh stage alone, as the server runs it: completed to a whole frame with
/// silence, then `silence_frames` frames of silence; `end` closes the stream (its last word).
fn direct(pcm: &[f32], silence_frames: usize, end: bool) -> Heard {
    let (mut st, _) = stage(1);
    let id = st.add(StreamRequest::default()).unwrap();
    let mut padded = pcm.to_vec();
    padded.resize(pcm.len().div_ceil(FRAME_SAMPLES) * FRAME_SAMPLES, 0.0);
    padded.resize(padded.len() + silence_frames * FRAME_SAMPLES, 0.0);
    st.push_pcm(id, &padded).unwrap();
    if end {
        st.end(id).unwrap();
    }
    let mut h = Heard::default();
    st.drain(&mut |e| match e {
        StreamEvent::Token {
            position, token, ..
        } => h.tokens.push((position, token)),
        StreamEvent::Word { event, .. } => match event {
            WordEvent::Word { tokens, start } => h.words.push((tokens, start)),
            WordEvent::EndWord { stop } => h.stops.push(stop),
        },
        StreamEvent::Ended { .. } => {}
    })
    .unwrap();
    h
}

fn flush_frames() -> usize {
    stage(1).0.flush_frames()
}

async fn connect(server: &Server, path: &str) -> Ws {
    let url = format!("ws://{}{path}", server.local_addr());
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

async fn next_json(ws: &mut Ws) -> serde_json::Value {
    match next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

/// Opens a `/v1/stt` stream in `format` and reads `started`.
async fn open(server: &Server, format: &str) -> (Ws, serde_json::Value) {
    let mut ws = connect(server, "/v1/stt").await;
    send_text(
        &mut ws,
        &format!(r#"{{"type":"start","format":"{format}"}}"#),
    )
    .await;
    let started = next_json(&mut ws).await;
    assert_eq!(started["type"], "started", "{started}");
    (ws, started)
}

fn f32_bytes(pcm: &[f32]) -> Vec<u8> {
    pcm.iter().flat_map(|v| v.to_le_bytes()).collect()
}

async fn send_audio(ws: &mut Ws, pcm: &[f32], chunk: usize) {
    for c in pcm.chunks(chunk) {
        ws.send(Message::Binary(f32_bytes(c).into())).await.unwrap();
    }
}

/// Reads a `/v1/stt` stream until `until` (a message type), collecting what it heard; returns
/// the last message.
async fn read_until(ws: &mut Ws, until: &str, h: &mut Heard) -> serde_json::Value {
    loop {
        let m = next_json(ws).await;
        match m["type"].as_str().unwrap() {
            "step" => h.tokens.push((
                m["position"].as_u64().unwrap() as usize,
                m["token"].as_u64().unwrap() as u32,
            )),
            "word" => {
                let tokens = m["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap() as u32)
                    .collect::<Vec<_>>();
                let text = tokenizer().decode(&tokens).unwrap();
                assert_eq!(m["text"], text.as_str(), "a word's text spells its pieces");
                h.words.push((tokens, m["start"].as_f64().unwrap() as f32));
            }
            "end_word" => h.stops.push(m["stop"].as_f64().unwrap() as f32),
            "end_of_turn" | "flushed" | "reset_done" => {}
            "error" => panic!("error: {m}"),
            _ => {}
        }
        if m["type"] == until {
            return m;
        }
    }
}

/// One whole `/v1/stt` stream of `pcm` in chunks of `chunk` samples, ended with `end`.
async fn transcribe(server: &Server, pcm: &[f32], chunk: usize) -> Heard {
    let (mut ws, _) = open(server, "f32").await;
    send_audio(&mut ws, pcm, chunk).await;
    send_text(&mut ws, r#"{"type":"end"}"#).await;
    let mut h = Heard::default();
    let end = read_until(&mut ws, "end", &mut h).await;
    assert_eq!(end["reason"], "end");
    assert_eq!(end["words"].as_u64().unwrap() as usize, h.words.len());
    assert_eq!(end["positions"].as_u64().unwrap() as usize, h.tokens.len());
    expect_close(&mut ws, 1000).await;
    h
}

async fn metrics(server: &Server) -> String {
    let (status, body) = http_request(&server.local_addr().to_string(), "GET", "/metrics", vec![])
        .await
        .unwrap();
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

async fn expect_error(ws: &mut Ws, code: &str, needle: &str, close: u16) {
    let m = next_json(ws).await;
    assert_eq!(
        (m["type"].as_str(), m["code"].as_str()),
        (Some("error"), Some(code)),
        "{m}"
    );
    let message = m["message"].as_str().unwrap();
    assert!(message.contains(needle), "{code}: {message}");
    expect_close(ws, close).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_equals_the_stage_run_bit_for_bit_at_any_chunking() {
    let server = stt_server().await;
    let pcm = speech(WORDY);
    let want = direct(&pcm, flush_frames(), true);
    assert!(
        !want.words.is_empty() && !want.stops.is_empty(),
        "the test audio must make words: {want:?}"
    );
    for chunk in [1000, 24_000, 1920, 7] {
        let got = transcribe(&server, &pcm, chunk).await;
        assert_eq!(got, want, "chunks of {chunk} samples");
    }
    // One sample per message, on a shorter clip.
    let short = audio(3, 2 * FRAME_SAMPLES + 5);
    assert_eq!(
        transcribe(&server, &short, 1).await,
        direct(&short, flush_frames(), true)
    );
    let text = metrics(&server).await;
    assert!(metric(&text, "chorus_stt_words_total") >= want.words.len() as f64);
    assert!(metric(&text, "chorus_stt_word_latency_seconds_count") > 0.0);
    assert!(metric(&text, "chorus_stt_frames_total") > 0.0);
    assert_eq!(metric(&text, "chorus_stt_stream_slots"), SLOTS as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_and_opus_audio_are_framed_like_f32() {
    let server = stt_server().await;
    let pcm = speech(2);
    let s16: Vec<i16> = pcm.iter().map(|v| (v * 32768.0).round() as i16).collect();
    let heard_as: Vec<f32> = s16.iter().map(|&v| f32::from(v) / 32768.0).collect();
    let (mut ws, started) = open(&server, "s16").await;
    assert_eq!(started["format"], "s16");
    assert_eq!(started["vad_heads"], 4);
    for c in s16.chunks(333) {
        let bytes: Vec<u8> = c.iter().flat_map(|v| v.to_le_bytes()).collect();
        ws.send(Message::Binary(bytes.into())).await.unwrap();
    }
    send_text(&mut ws, r#"{"type":"end"}"#).await;
    let mut h = Heard::default();
    read_until(&mut ws, "end", &mut h).await;
    assert_eq!(h, direct(&heard_as, flush_frames(), true));
    // Opus: packets of 20 ms, decoded server-side; one step per frame of decoded audio.
    let (mut ws, _) = open(&server, "opus").await;
    let mut enc = chorus_audio::OpusFrameEncoder::new(32_000).unwrap();
    let mut frames = 0;
    for f in pcm.chunks_exact(FRAME_SAMPLES) {
        let mut packet = Vec::new();
        enc.encode(f, &mut packet).unwrap();
        ws.send(Message::Binary(packet.into())).await.unwrap();
        frames += 1;
    }
    send_text(&mut ws, r#"{"type":"end"}"#).await;
    let mut h = Heard::default();
    read_until(&mut ws, "end", &mut h).await;
    assert_eq!(h.tokens.len(), 1 + frames + flush_frames(), "{h:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_each_equal_their_solo_runs() {
    let server = stt_server().await;
    let (a, b) = (speech(4), audio(5, 9 * FRAME_SAMPLES + 11));
    let (ha, hb) = tokio::join!(transcribe(&server, &a, 960), transcribe(&server, &b, 4000));
    assert_eq!(ha, direct(&a, flush_frames(), true));
    assert_eq!(hb, direct(&b, flush_frames(), true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_delivers_the_last_words_and_the_stream_goes_on() {
    let server = stt_server().await;
    let pcm = speech(WORDY);
    let (mut ws, started) = open(&server, "f32").await;
    assert_eq!(
        started["flush_frames"].as_u64().unwrap() as usize,
        flush_frames()
    );
    send_audio(&mut ws, &pcm, 5000).await;
    send_text(&mut ws, r#"{"type":"flush"}"#).await;
    let mut h = Heard::default();
    let flushed = read_until(&mut ws, "flushed", &mut h).await;
    // Everything the stage makes of the audio and the flush's silence, without an end.
    let want = direct(&pcm, flush_frames(), false);
    assert_eq!(h, want);
    assert!(!want.words.is_empty());
    let frames = pcm.len().div_ceil(FRAME_SAMPLES) + flush_frames();
    assert_eq!(flushed["position"].as_u64().unwrap() as usize, frames);
    // The stream goes on after a flush, and `reset` starts it over at position 0.
    send_audio(&mut ws, &pcm[..2 * FRAME_SAMPLES], 2 * FRAME_SAMPLES).await;
    send_text(&mut ws, r#"{"type":"reset"}"#).await;
    let mut more = Heard::default();
    read_until(&mut ws, "reset_done", &mut more).await;
    send_audio(&mut ws, &pcm, 3000).await;
    send_text(&mut ws, r#"{"type":"end"}"#).await;
    let mut after = Heard::default();
    read_until(&mut ws, "end", &mut after).await;
    // Steps of the audio before the reset may still arrive before it; after it, the stream is
    // a fresh one.
    let restart = after.tokens.iter().position(|&(p, _)| p == 0).unwrap();
    assert_eq!(
        after.tokens[restart..],
        direct(&pcm, flush_frames(), true).tokens[..]
    );
}

/// A stream that ends beside a live one steps its flush silence at the audio's pace (one frame
/// per 80 ms), not all at once in back-to-back steps of every stream; alone, at once. Either way
/// its tokens and words are its solo run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_beside_a_live_stream_steps_its_silence_at_the_audio_pace() {
    let server = stt_server().await;
    let flush = flush_frames();
    let frame = Duration::from_millis(chorus_core::FRAME_MS);
    let (mut live, _) = open(&server, "f32").await;
    // The live stream sends real-time audio until the other's end has been read (however slow
    // this machine steps the other's speech), so the silence always has company.
    let live_audio = audio(6, (flush + 12) * FRAME_SAMPLES);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let keep_live = tokio::spawn(async move {
        let mut next = tokio::time::Instant::now();
        for f in live_audio.chunks(FRAME_SAMPLES).cycle() {
            if *stopped.borrow_and_update() {
                break;
            }
            live.send(Message::Binary(f32_bytes(f).into()))
                .await
                .unwrap();
            next += frame;
            tokio::time::sleep_until(next).await;
        }
        live
    });
    // The live stream is under way before the other ends.
    tokio::time::sleep(3 * frame).await;
    let pcm = speech(WORDY);
    let (mut ws, _) = open(&server, "f32").await;
    send_audio(&mut ws, &pcm, 24_000).await;
    let mut h = Heard::default();
    // Every frame of the audio stepped: what is left is the silence.
    let audio_steps = pcm.len() / FRAME_SAMPLES;
    while h.tokens.len() <= audio_steps {
        read_until(&mut ws, "step", &mut h).await;
    }
    let ended_at = std::time::Instant::now();
    send_text(&mut ws, r#"{"type":"end"}"#).await;
    let mut rest = Heard::default();
    read_until(&mut ws, "end", &mut rest).await;
    let took = ended_at.elapsed();
    stop.send(true).unwrap();
    // The silence (the partial frame's completion and `flush` frames) enters one frame per 80 ms
    // after its first: at least (flush - 1) frames' time.
    assert!(
        took >= frame * (flush as u32 - 1),
        "{flush} frames of silence stepped in {took:?} beside a live stream"
    );
    h.tokens.extend(rest.tokens);
    h.words.extend(rest.words);
    h.stops.extend(rest.stops);
    let want = direct(&pcm, flush, true);
    assert_eq!(h, want);
    let mut live = keep_live.await.unwrap();
    send_text(&mut live, r#"{"type":"cancel"}"#).await;
    // Alone, the same end takes far less than the paced silence would.
    let alone = std::time::Instant::now();
    assert_eq!(transcribe(&server, &pcm, 24_000).await, want);
    assert!(
        alone.elapsed() < frame * (flush as u32 - 1),
        "alone: {:?}",
        alone.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_thread_sleeps_while_no_stream_has_a_whole_frame() {
    let server = stt_server().await;
    let (mut ws, _) = open(&server, "f32").await;
    // Position 0 runs at admission: its step arrives with no audio.
    let first = next_json(&mut ws).await;
    assert_eq!(
        (first["type"].as_str(), first["position"].as_u64()),
        (Some("step"), Some(0))
    );
    send_audio(&mut ws, &speech(0)[..FRAME_SAMPLES - 1], 500).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let steps = metric(&metrics(&server).await, "chorus_stt_step_seconds_count");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = metric(&metrics(&server).await, "chorus_stt_step_seconds_count");
    assert_eq!(steps, later, "no step while no stream has a whole frame");
    // One more sample completes the frame: its step comes.
    send_audio(&mut ws, &[0.0], 1).await;
    let m = next_json(&mut ws).await;
    assert_eq!(
        (m["type"].as_str(), m["position"].as_u64()),
        (Some("step"), Some(1))
    );
}

/// Reads `ws` until its step of `position`; returns when it came.
async fn step_at(ws: &mut Ws, position: u64) -> std::time::Instant {
    loop {
        let m = next_json(ws).await;
        if m["type"] == "step" && m["position"].as_u64() == Some(position) {
            return std::time::Instant::now();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_waits_up_to_the_gather_for_the_other_streams_and_not_when_all_have_frames() {
    // Two slots, a gather of one second: a frame of one stream waits for the other's, a frame
    // of every stream goes at once.
    const GATHER: Duration = Duration::from_millis(1000);
    let stt_config = SttServeConfig {
        step_gather: GATHER,
        ..SttServeConfig::default()
    };
    let server = server_with(ServerConfig::default(), stt_config).await;
    let (mut a, _) = open(&server, "f32").await;
    step_at(&mut a, 0).await;
    let (mut b, _) = open(&server, "f32").await;
    step_at(&mut b, 0).await;
    let pcm = speech(0);
    let sent = std::time::Instant::now();
    send_audio(&mut a, &pcm[..FRAME_SAMPLES], FRAME_SAMPLES).await;
    let waited = step_at(&mut a, 1).await - sent;
    assert!(
        waited >= GATHER * 7 / 10,
        "a lone frame went after {waited:?}, before the gather of {GATHER:?}"
    );
    let sent = std::time::Instant::now();
    send_audio(
        &mut a,
        &pcm[FRAME_SAMPLES..2 * FRAME_SAMPLES],
        FRAME_SAMPLES,
    )
    .await;
    send_audio(&mut b, &pcm[..FRAME_SAMPLES], FRAME_SAMPLES).await;
    let (ta, tb) = (step_at(&mut a, 2).await, step_at(&mut b, 1).await);
    let waited = ta.max(tb) - sent;
    assert!(
        waited < GATHER / 2,
        "frames of every stream waited {waited:?}: they should go at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_refused_at_once_on_both_endpoints() {
    let server = stt_server().await;
    let (_a, _) = open(&server, "f32").await;
    let (_b, _) = open(&server, "s16").await;
    let mut ws = connect(&server, "/v1/stt").await;
    send_text(&mut ws, r#"{"type":"start"}"#).await;
    expect_error(&mut ws, "busy", "streams are in use", 1013).await;
    let mut asr = connect(&server, "/api/asr-streaming").await;
    let m = read_asr(&mut asr).await;
    assert_eq!(m.kind(), "Error");
    assert!(m.str("message").starts_with("busy:"), "{m:?}");
    expect_close(&mut asr, 1013).await;
    let text = metrics(&server).await;
    assert_eq!(
        metric(&text, "chorus_stt_streams_refused_total{code=\"busy\"}"),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_gets_its_named_error_and_leaves_the_running_stream_untouched() {
    let stt_config = SttServeConfig {
        max_frames_per_message: 2,
        ..SttServeConfig::default()
    };
    let server = server_with(ServerConfig::default(), stt_config).await;
    let pcm = speech(6);
    let (mut good, _) = open(&server, "f32").await;
    send_audio(&mut good, &pcm[..5 * FRAME_SAMPLES], 1500).await;
    let bad: [(&str, Message, &str, &str); 8] = [
        (
            "s16",
            Message::Binary(vec![1, 2, 3].into()),
            "bad_frame_size",
            "whole number",
        ),
        (
            "f32",
            Message::Binary(f32_bytes(&[0.1, f32::NAN]).into()),
            "bad_audio",
            "sample 1",
        ),
        (
            "f32",
            Message::Binary(vec![0; 4 * (2 * FRAME_SAMPLES + 1)].into()),
            "bad_frame_size",
            "at most 3840",
        ),
        (
            "f32",
            Message::Binary(Vec::new().into()),
            "bad_frame_size",
            "empty",
        ),
        (
            "f32",
            Message::Text(r#"{"type":"pause"}"#.into()),
            "unknown_message",
            "`pause`",
        ),
        (
            "f32",
            Message::Text("{not json".into()),
            "bad_json",
            "malformed",
        ),
        (
            "f32",
            Message::Text(r#"{"type":"start"}"#.into()),
            "already_started",
            "one stream",
        ),
        (
            "opus",
            Message::Binary(vec![0xff; 7].into()),
            "bad_audio",
            "opus",
        ),
    ];
    for (format, msg, code, needle) in bad {
        let (mut ws, _) = open(&server, format).await;
        ws.send(msg).await.unwrap();
        let m = loop {
            let m = next_json(&mut ws).await;
            if m["type"] != "step" {
                break m;
            }
        };
        assert_eq!(m["code"], code, "{m}");
        assert!(m["message"].as_str().unwrap().contains(needle), "{m}");
    }
    // Before `start`: audio, `flush`, an unknown field of `start`.
    let mut ws = connect(&server, "/v1/stt").await;
    ws.send(Message::Binary(vec![0; 8].into())).await.unwrap();
    expect_error(&mut ws, "not_started", "before `start`", 1008).await;
    let mut ws = connect(&server, "/v1/stt").await;
    send_text(&mut ws, r#"{"type":"flush"}"#).await;
    expect_error(&mut ws, "not_started", "`flush` before", 1008).await;
    let mut ws = connect(&server, "/v1/stt").await;
    send_text(&mut ws, r#"{"type":"start","rate":16000}"#).await;
    expect_error(&mut ws, "bad_request", "unknown field `rate`", 1008).await;
    // moshi's protocol: a text message, an unknown type, a NaN sample.
    let asr_bad: [(Message, &str); 3] = [
        (Message::Text("hi".into()), "bad_request: text messages"),
        (
            Message::Binary(mp_map(&[("type", Mp::Str("Pause".into()))]).into()),
            "unknown_message",
        ),
        (
            Message::Binary(audio_msg(&[0.0, f32::NAN]).into()),
            "bad_audio: sample 1",
        ),
    ];
    for (msg, needle) in asr_bad {
        let mut ws = connect(&server, "/api/asr-streaming").await;
        assert_eq!(read_asr(&mut ws).await.kind(), "Ready");
        ws.send(msg).await.unwrap();
        let m = loop {
            let m = read_asr(&mut ws).await;
            if m.kind() != "Step" {
                break m;
            }
        };
        assert_eq!(m.kind(), "Error");
        assert!(m.str("message").starts_with(needle), "{m:?}");
    }
    // The stream that was running all along is untouched.
    send_audio(&mut good, &pcm[5 * FRAME_SAMPLES..], 1500).await;
    send_text(&mut good, r#"{"type":"end"}"#).await;
    let mut h = Heard::default();
    read_until(&mut good, "end", &mut h).await;
    assert_eq!(h, direct(&pcm, flush_frames(), true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_speech_to_text_model_says_so() {
    let server = common::start(1, 1).await;
    for path in ["/v1/stt", "/api/asr-streaming"] {
        let (status, body) = http_request(&server.local_addr().to_string(), "GET", path, vec![])
            .await
            .unwrap();
        assert_eq!(status, 404, "{path}");
        assert!(String::from_utf8_lossy(&body).contains("not_enabled"));
    }
}

// ---- moshi-server's protocol, from its message table: a MessagePack writer and reader of our
// own (not the server's types).

/// A MessagePack value as these tests write and read them.
#[derive(Clone, Debug, PartialEq)]
enum Mp {
    Str(String),
    Int(i64),
    Float(f64),
    F32s(Vec<f32>),
    Floats(Vec<f64>),
    Nil,
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    assert!(s.len() < 32);
    out.push(0xa0 | s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// A map of `fields` (fixmap, fixstr keys).
fn mp_map(fields: &[(&str, Mp)]) -> Vec<u8> {
    let mut out = vec![0x80 | fields.len() as u8];
    for (k, v) in fields {
        write_str(&mut out, k);
        match v {
            Mp::Str(s) => write_str(&mut out, s),
            Mp::Int(i) => {
                out.push(0xd3);
                out.extend_from_slice(&i.to_be_bytes());
            }
            Mp::F32s(xs) => {
                out.push(0xdd);
                out.extend_from_slice(&(xs.len() as u32).to_be_bytes());
                for x in xs {
                    out.push(0xca);
                    out.extend_from_slice(&x.to_bits().to_be_bytes());
                }
            }
            other => panic!("not written here: {other:?}"),
        }
    }
    out
}

fn audio_msg(pcm: &[f32]) -> Vec<u8> {
    mp_map(&[
        ("type", Mp::Str("Audio".into())),
        ("pcm", Mp::F32s(pcm.to_vec())),
    ])
}

/// A decoded server message: its fields.
#[derive(Debug)]
struct AsrMsg(Vec<(String, Mp)>);

impl AsrMsg {
    fn get(&self, k: &str) -> &Mp {
        &self
            .0
            .iter()
            .find(|(n, _)| n == k)
            .unwrap_or_else(|| panic!("no {k}: {self:?}"))
            .1
    }

    fn kind(&self) -> &str {
        self.str("type")
    }

    fn str(&self, k: &str) -> &str {
        match self.get(k) {
            Mp::Str(s) => s,
            v => panic!("{k} is {v:?}"),
        }
    }

    fn float(&self, k: &str) -> f64 {
        match self.get(k) {
            Mp::Float(f) => *f,
            v => panic!("{k} is {v:?}"),
        }
    }

    fn int(&self, k: &str) -> i64 {
        match self.get(k) {
            Mp::Int(i) => *i,
            v => panic!("{k} is {v:?}"),
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }

    fn byte(&mut self) -> u8 {
        self.take(1)[0]
    }

    fn be<const N: usize>(&mut self) -> [u8; N] {
        self.take(N).try_into().unwrap()
    }

    fn str_of(&mut self, n: usize) -> String {
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }

    fn value(&mut self) -> Mp {
        let b = self.byte();
        match b {
            0x00..=0x7f => Mp::Int(b as i64),
            0xa0..=0xbf => Mp::Str(self.str_of((b & 0x1f) as usize)),
            0xd9 => {
                let n = self.byte() as usize;
                Mp::Str(self.str_of(n))
            }
            0xc0 => Mp::Nil,
            0xca => Mp::Float(f32::from_be_bytes(self.be()) as f64),
            0xcb => Mp::Float(f64::from_be_bytes(self.be())),
            0xcc => Mp::Int(self.byte() as i64),
            0xcd => Mp::Int(u16::from_be_bytes(self.be()) as i64),
            0xce => Mp::Int(u32::from_be_bytes(self.be()) as i64),
            0xcf => Mp::Int(u64::from_be_bytes(self.be()) as i64),
            0xd0 => Mp::Int(self.byte() as i8 as i64),
            0xd3 => Mp::Int(i64::from_be_bytes(self.be())),
            0x90..=0x9f => Mp::Floats((0..b & 0x0f).map(|_| self.float()).collect()),
            0xe0..=0xff => Mp::Int(b as i8 as i64),
            other => panic!("unexpected MessagePack byte {other:#x}"),
        }
    }

    fn float(&mut self) -> f64 {
        match self.value() {
            Mp::Float(f) => f,
            v => panic!("expected a float, got {v:?}"),
        }
    }

    fn map(&mut self) -> AsrMsg {
        let b = self.byte();
        assert_eq!(b & 0xf0, 0x80, "a server message is a fixmap, got {b:#x}");
        let fields = (0..b & 0x0f)
            .map(|_| {
                let Mp::Str(k) = self.value() else {
                    panic!("keys are strings")
                };
                (k, self.value())
            })
            .collect();
        assert!(self.0.is_empty(), "one map per message");
        AsrMsg(fields)
    }
}

async fn read_asr(ws: &mut Ws) -> AsrMsg {
    match next(ws).await {
        Message::Binary(b) => Reader(&b).map(),
        other => panic!("expected a MessagePack message, got {other:?}"),
    }
}

async fn connect_asr(server: &Server, query: &str, key: Option<&str>) -> Result<Ws, u16> {
    let url = format!("ws://{}/api/asr-streaming{query}", server.local_addr());
    let mut req = url.into_client_request().unwrap();
    if let Some(k) = key {
        req.headers_mut()
            .insert("kyutai-api-key", k.parse().unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => Err(res.status().as_u16()),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_moshi_protocol_gives_ready_steps_words_and_markers_like_the_stage() {
    let server = stt_server().await;
    let pcm = speech(WORDY);
    let delay = model().config.text_delay_frames;
    // The marker comes back once the stream has stepped past the audio and the delay: send that
    // much silence after it.
    let frames = pcm.len().div_ceil(FRAME_SAMPLES);
    let silence = delay + 2;
    let want = direct(&pcm, silence, false);
    let mut ws = connect(&server, "/api/asr-streaming").await;
    assert_eq!(read_asr(&mut ws).await.kind(), "Ready");
    ws.send(Message::Binary(
        mp_map(&[("type", Mp::Str("Init".into()))]).into(),
    ))
    .await
    .unwrap();
    for c in pcm.chunks(1920 / 2 * 3) {
        ws.send(Message::Binary(audio_msg(c).into())).await.unwrap();
    }
    // The partial last frame is completed by the silence that follows.
    let mut tail = vec![0.0; frames * FRAME_SAMPLES - pcm.len()];
    ws.send(Message::Binary(audio_msg(&tail).into()))
        .await
        .unwrap();
    ws.send(Message::Binary(
        mp_map(&[("type", Mp::Str("Marker".into())), ("id", Mp::Int(77))]).into(),
    ))
    .await
    .unwrap();
    tail = vec![0.0; silence * FRAME_SAMPLES];
    ws.send(Message::Binary(audio_msg(&tail).into()))
        .await
        .unwrap();
    let (mut steps, mut words, mut stops) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let m = read_asr(&mut ws).await;
        match m.kind() {
            "Step" => {
                let Mp::Floats(prs) = m.get("prs") else {
                    panic!("prs is an array: {m:?}")
                };
                assert_eq!(prs.len(), 4);
                assert!(prs.iter().all(|p| (0.0..=1.0).contains(p)));
                assert!(m.int("buffered_pcm") >= 0);
                steps.push(m.int("step_idx") as usize);
            }
            "Word" => words.push((m.str("text").to_string(), m.float("start_time") as f32)),
            "EndWord" => stops.push(m.float("stop_time") as f32),
            "Marker" => {
                assert_eq!(m.int("id"), 77);
                break;
            }
            other => panic!("unexpected {other}: {m:?}"),
        }
    }
    assert_eq!(
        steps,
        (0..steps.len()).collect::<Vec<_>>(),
        "a Step per position"
    );
    assert!(
        steps.len() > frames + delay,
        "the marker waits for the delay: {}",
        steps.len()
    );
    let tok = tokenizer();
    let n = words.len();
    let want_words: Vec<(String, f32)> = want.words[..n]
        .iter()
        .map(|(t, s)| (tok.decode(t).unwrap(), *s))
        .collect();
    assert!(n > 0, "the audio makes words");
    assert_eq!(words, want_words);
    assert_eq!(stops[..], want.stops[..stops.len()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_taken_from_the_kyutai_header_or_auth_id_and_required() {
    let config = ServerConfig {
        api_keys: Some(ApiKeys::from_keys(&[KEY]).unwrap()),
        ..ServerConfig::default()
    };
    let server = server_with(config, SttServeConfig::default()).await;
    let mut ws = connect_asr(&server, "", Some(KEY)).await.unwrap();
    assert_eq!(read_asr(&mut ws).await.kind(), "Ready");
    drop(ws);
    let mut ws = connect_asr(&server, &format!("?auth_id={KEY}"), None)
        .await
        .unwrap();
    assert_eq!(read_asr(&mut ws).await.kind(), "Ready");
    drop(ws);
    assert_eq!(connect_asr(&server, "", None).await.err(), Some(401));
    assert_eq!(
        connect_asr(&server, "?auth_id=wrong", None).await.err(),
        Some(401)
    );
    assert_eq!(
        connect_asr(&server, "", Some("wrong")).await.err(),
        Some(401)
    );
    let url = format!("ws://{}/v1/stt", server.local_addr());
    assert!(tokio_tungstenite::connect_async(url).await.is_err());
}

fn load(server: &Server, endpoint: SttEndpoint, key: Option<&str>) -> SttLoadConfig {
    SttLoadConfig {
        url: format!("ws://{}", server.local_addr()),
        streams: SLOTS,
        duration: Duration::from_millis(800),
        endpoint,
        format: chorus_server::protocol::PcmFormat::S16,
        seed: 3,
        // The CPU test machine is shared: this checks the timing, not the speed.
        deadline: Duration::from_secs(10),
        wait_ready: Duration::from_secs(10),
        api_key: key.map(str::to_owned),
        ramp: Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_times_every_step_on_both_endpoints_with_a_key() {
    let config = ServerConfig {
        api_keys: Some(ApiKeys::from_keys(&[KEY]).unwrap()),
        ..ServerConfig::default()
    };
    let server = server_with(config, SttServeConfig::default()).await;
    for endpoint in [SttEndpoint::V1, SttEndpoint::Asr] {
        let mut cfg = load(&server, endpoint, Some(KEY));
        // `/v1/stt` with the streams connecting over 100 ms: each one's first step is timed.
        let v1 = endpoint == SttEndpoint::V1;
        if v1 {
            cfg.ramp = Duration::from_millis(100);
        }
        let report = run_stt(cfg).await.unwrap();
        assert!(report.real_time(), "{}", report.summary());
        if v1 {
            let f = &report.first_step_ms;
            assert!(f.max > 0.0 && f.p50 <= f.max, "{f:?}");
        }
        assert_eq!(
            report.frames_sent,
            (SLOTS * 10) as u64,
            "{}",
            report.summary()
        );
        assert_eq!(report.steps_timed, report.frames_sent);
        assert!(report.delay_ms.p50 <= report.delay_ms.p99);
        assert!(report.summary().contains("real time: yes"));
    }
    let refused = run_stt(load(&server, SttEndpoint::V1, None)).await.unwrap();
    assert_eq!(refused.errors.get("unauthorized"), Some(&(SLOTS as u64)));
    assert!(!refused.real_time());
}

/// Two stand-in devices: streams go to the one with the most free slots and each equals its
/// solo run; when one device fails, its stream ends with an error naming it, the other's is whole
/// and exact, and the survivor takes every new stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_spread_over_devices_and_a_failed_device_ends_only_its_own() {
    let faults = [FaultSwitch::default(), FaultSwitch::default()];
    let server = start_devices(&[(0, faults[0].clone()), (1, faults[1].clone())]).await;
    assert_eq!(healthz(&server).await["stt"]["max_streams"], 2 * SLOTS);
    let (mut on_0, _) = open(&server, "f32").await;
    let (mut on_1, _) = open(&server, "f32").await;
    let h = healthz(&server).await;
    let live: Vec<_> = stage_devices(&h, "stt")
        .iter()
        .map(|d| (d.0, d.1))
        .collect();
    assert_eq!(live, [(0, 1), (1, 1)], "{h}");
    faults[0].trip();
    // Device 0 wakes for its stream's audio, fails, and ends that stream naming itself.
    send_audio(&mut on_0, &speech(2), 960).await;
    let message = loop {
        let m = next_json(&mut on_0).await;
        match m["type"].as_str().unwrap() {
            "error" => {
                assert_eq!(m["code"], "internal", "{m}");
                break m["message"].as_str().unwrap().to_string();
            }
            "step" | "word" | "end_word" => {}
            other => panic!("expected steps then an error, got {other}: {m}"),
        }
    };
    assert!(message.contains("device 0 failed"), "{message}");
    expect_close(&mut on_0, 1011).await;
    // Device 1's stream is whole and equal to its solo run.
    let pcm = speech(3);
    send_audio(&mut on_1, &pcm, 2000).await;
    send_text(&mut on_1, r#"{"type":"end"}"#).await;
    let mut heard = Heard::default();
    let end = read_until(&mut on_1, "end", &mut heard).await;
    assert_eq!(end["reason"], "end");
    expect_close(&mut on_1, 1000).await;
    assert_eq!(heard, direct(&pcm, flush_frames(), true));
    let h = healthz(&server).await;
    assert_eq!(h["stt"]["devices"][0]["state"], "failed", "{h}");
    // The survivor takes the next streams, exact as ever.
    for salt in [6, 7] {
        let pcm = audio(salt, 6 * FRAME_SAMPLES);
        assert_eq!(
            transcribe(&server, &pcm, 960).await,
            direct(&pcm, flush_frames(), true)
        );
    }
    let text = metrics(&server).await;
    assert_eq!(
        metric(&text, "chorus_stt_streams_started_total{device=\"1\"}"),
        3.0,
        "{text}"
    );
}
