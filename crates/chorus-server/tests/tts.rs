//! `/v1/tts` over real sockets on loopback: the `random-small` speech stage with a random Mimi on
//! the CPU backend, every streamed utterance checked bit for bit against the same request run on
//! a stage directly.

mod common;

use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chorus_core::FRAME_SAMPLES;
use chorus_cpu::CpuBackend;
use chorus_csm::prompt::{build_prompt, PromptLimits, Segment};
use chorus_csm::{
    load_csm_model, CsmModel, CsmTokenizer, DrawSettings, TtsOptions, TtsStage, UtteranceEvent,
    UtteranceRequest,
};
use chorus_engine::fake::FakeDecoder;
use chorus_engine::{Engine, EngineConfig, EnginePool};
use chorus_lm::Sampling;
use chorus_mimi::checkpoint::{load_model, LoadedModel};
use chorus_server::loadgen::tts::{run_tts, TtsLoadConfig};
use chorus_server::loadgen::{http_exchange, http_request, HttpAnswer};
use chorus_server::protocol::{decode_pcm, to_s16, PcmFormat};
use chorus_server::stage::{DeviceStage, FaultSwitch};
use chorus_server::tts::{
    parse_tts_body, TtsConfig, TtsEndReason, TtsEngine, TtsEvent, TtsOutcome, TtsServerMessage,
    TtsStageFactory, TtsUpdate,
};
use chorus_server::{Server, ServerConfig, Services};
use common::{expect_close, fake, healthz, next, send_text, stage_devices, Ws, WAIT};
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

/// Utterance seats of every test server (the busy test fills them).
const SEATS: usize = 2;
/// Positions per utterance: a short text leaves room for about 100 frames.
const CONTEXT: usize = 128;
/// CPU threads of each stage.
const THREADS: usize = 1;
/// The test servers' longest text (below the prompt limit's text, so both errors can be seen).
const MAX_TEXT: usize = 400;
/// How often a test polls `/metrics` for a change the engine makes between steps.
const POLL: Duration = Duration::from_millis(10);

fn model() -> &'static CsmModel {
    static MODEL: OnceLock<CsmModel> = OnceLock::new();
    MODEL.get_or_init(|| load_csm_model("random-small").unwrap())
}

fn mimi() -> &'static LoadedModel {
    static MIMI: OnceLock<LoadedModel> = OnceLock::new();
    MIMI.get_or_init(|| load_model("random").unwrap())
}

fn tokenizer() -> CsmTokenizer {
    CsmTokenizer::byte_fallback(&model().config).unwrap()
}

fn stage() -> (TtsStage<CpuBackend>, TtsOptions) {
    let opts = TtsOptions::for_utterances(SEATS, CONTEXT).unwrap();
    let be = CpuBackend::new(Some(THREADS)).unwrap();
    let st = TtsStage::new(be, model(), Some(mimi()), opts.clone()).unwrap();
    (st, opts)
}

fn config() -> TtsConfig {
    TtsConfig {
        max_text_bytes: MAX_TEXT,
        ..TtsConfig::default()
    }
}

async fn tts_server() -> Server {
    let tts = TtsEngine::start(Box::new(|| Ok(stage())), config(), Some(tokenizer())).unwrap();
    bind(tts).await
}

/// A server with one CPU speech stage per `(device, fault switch)`, standing in for devices.
async fn start_devices(devices: &[(usize, FaultSwitch)]) -> Server {
    let stages = devices
        .iter()
        .map(|(device, fault)| {
            let factory: TtsStageFactory<CpuBackend> = Box::new(|| Ok(stage()));
            DeviceStage {
                device: *device,
                factory,
                fault: Some(fault.clone()),
            }
        })
        .collect();
    bind(TtsEngine::start_on(stages, config(), Some(tokenizer())).unwrap()).await
}

async fn bind(tts: TtsEngine) -> Server {
    let engine = Engine::start(
        Box::new(|| Ok(Box::new(FakeDecoder::new(fake(1, 1))) as _)),
        EngineConfig::default(),
    )
    .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let services = Services {
        tts: Some(Arc::new(tts)),
        ..Services::default()
    };
    Server::bind_with(
        Arc::new(EnginePool::from(engine)),
        services,
        addr,
        ServerConfig::default(),
    )
    .await
    .unwrap()
}

/// The same utterance run on a fresh stage, alone: its audio.
fn direct(text: &str, speaker: u32, frames: usize, sampling: Sampling) -> Vec<f32> {
    direct_after(&[], text, speaker, frames, sampling)
}

/// [`direct`] after the `context` turns.
fn direct_after(
    context: &[Segment],
    text: &str,
    speaker: u32,
    frames: usize,
    sampling: Sampling,
) -> Vec<f32> {
    run_direct(request_for(context, text, speaker, frames, sampling))
}

/// [`direct`] by speaker 1 with its own temperature and top-k.
fn direct_drawn(text: &str, frames: usize, sampling: Sampling, draws: DrawSettings) -> Vec<f32> {
    let mut req = request_for(&[], text, 1, frames, sampling);
    req.draws = Some(draws);
    run_direct(req)
}

/// The stage request of an utterance after the `context` turns, at the stage's draws.
fn request_for(
    context: &[Segment],
    text: &str,
    speaker: u32,
    frames: usize,
    sampling: Sampling,
) -> UtteranceRequest {
    let limits = PromptLimits::new(&model().config, frames);
    let prompt = build_prompt(&tokenizer(), context, speaker, text, &limits).unwrap();
    UtteranceRequest {
        prompt,
        max_frames: frames,
        sampling,
        draws: None,
        forced: None,
    }
}

/// Runs `req` on a fresh stage, alone, to its length cap: its audio.
fn run_direct(req: UtteranceRequest) -> Vec<f32> {
    let (mut st, _) = stage();
    let frames = req.max_frames;
    let id = st.add(req).unwrap();
    let mut pcm = Vec::new();
    while st.active() > 0 {
        st.step(&mut |ev| {
            if let UtteranceEvent::Frame {
                utterance, pcm: p, ..
            } = ev
            {
                assert_eq!(utterance, id);
                pcm.extend_from_slice(p.expect("the stage decodes audio"));
            }
        })
        .unwrap();
    }
    assert_eq!(pcm.len(), frames * FRAME_SAMPLES, "ran to the length cap");
    pcm
}

fn start_msg(text: &str, frames: usize, seed: u64, sampling: &str, format: &str) -> String {
    format!(
        r#"{{"type":"start","text":"{text}","speaker":1,"max_frames":{frames},"seed":{seed},"sampling":"{sampling}","format":"{format}"}}"#
    )
}

async fn connect(server: &Server) -> Ws {
    let url = format!("ws://{}/v1/tts", server.local_addr());
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

async fn next_tts(ws: &mut Ws) -> TtsServerMessage {
    match next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

/// Sends `start` and checks `started`; returns the socket.
async fn start_utterance(server: &Server, text: &str, frames: usize) -> Ws {
    let mut ws = connect(server).await;
    send_text(&mut ws, text).await;
    match next_tts(&mut ws).await {
        TtsServerMessage::Started {
            max_frames,
            sample_rate,
            frame_samples,
            ..
        } => assert_eq!(
            (max_frames, sample_rate, frame_samples),
            (frames, 24_000, FRAME_SAMPLES)
        ),
        other => panic!("expected started, got {other:?}"),
    }
    ws
}

/// What a client received: the audio and how it ended.
struct Heard {
    pcm: Vec<f32>,
    frames: usize,
    reason: TtsEndReason,
    first_audio_ms: Option<f64>,
}

/// Reads f32 (or s16) frames in order until `end`; checks the count and the normal close.
async fn read_utterance(ws: &mut Ws, format: PcmFormat) -> Heard {
    let mut pcm = Vec::new();
    let mut index = 0;
    loop {
        match next(ws).await {
            Message::Binary(b) => {
                let f = decode_pcm(&b, format).expect("one 80 ms frame");
                assert_eq!(f.index, index, "frames arrive in order");
                pcm.extend(f.samples);
                index += 1;
            }
            Message::Text(t) => match serde_json::from_str(&t).unwrap() {
                TtsServerMessage::End {
                    reason,
                    frames,
                    first_audio_ms,
                } => {
                    assert_eq!(frames, index as usize, "`end` counts the frames sent");
                    expect_close(ws, 1000).await;
                    return Heard {
                        pcm,
                        frames,
                        reason,
                        first_audio_ms,
                    };
                }
                other => panic!("expected a frame or end, got {other:?}"),
            },
            other => panic!("expected a frame or end, got {other:?}"),
        }
    }
}

/// Bits of every sample, so that equality is exact (and NaN-safe).
fn bits(pcm: &[f32]) -> Vec<u32> {
    pcm.iter().map(|x| x.to_bits()).collect()
}

async fn metrics(server: &Server) -> String {
    let addr = server.local_addr().to_string();
    let (status, body) = http_request(&addr, "GET", "/metrics", vec![])
        .await
        .unwrap();
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

/// The value of the sample named exactly `name` (labels included).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Polls `/metrics` until `ok` holds.
async fn wait_metrics(server: &Server, ok: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = metrics(server).await;
        if ok(&text) {
            return text;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out:\n{text}");
        tokio::time::sleep(POLL).await;
    }
}

async fn expect_error(ws: &mut Ws, code: &str, needle: &str, close: u16) {
    match next_tts(ws).await {
        TtsServerMessage::Error { code: c, message } => {
            assert_eq!(c.as_str(), code, "{message}");
            assert!(message.contains(needle), "`{needle}` not in: {message}");
        }
        other => panic!("expected error {code}, got {other:?}"),
    }
    expect_close(ws, close).await;
}

async fn post(server: &Server, path: &str, headers: &[(&str, &str)], body: &str) -> HttpAnswer {
    let addr = server.local_addr().to_string();
    http_exchange(&addr, "POST", path, headers, body.as_bytes().to_vec())
        .await
        .unwrap()
}

fn error_code(a: &HttpAnswer) -> (u16, String, String) {
    let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    (a.status, s("code"), s("message"))
}

#[tokio::test]
async fn the_stream_equals_the_stage_run_bit_for_bit() {
    let server = tts_server().await;
    let mut ws = start_utterance(
        &server,
        &start_msg("Hello there.", 6, 7, "seeded", "f32"),
        6,
    )
    .await;
    let heard = read_utterance(&mut ws, PcmFormat::F32).await;
    assert_eq!((heard.reason, heard.frames), (TtsEndReason::MaxFrames, 6));
    assert!(heard.first_audio_ms.is_some_and(|ms| ms > 0.0));
    let want = direct("Hello there.", 1, 6, Sampling::Seeded(7));
    assert!(want.iter().any(|&x| x != 0.0), "the audio is not silence");
    assert_eq!(bits(&heard.pcm), bits(&want), "every sample bit-identical");
    let text = wait_metrics(&server, |t| {
        metric(t, "chorus_tts_active_utterances") == 0.0
    })
    .await;
    assert_eq!(metric(&text, "chorus_tts_utterances_started_total"), 1.0);
    assert_eq!(metric(&text, "chorus_tts_utterances_finished_total"), 1.0);
    assert_eq!(metric(&text, "chorus_tts_frames_total"), 6.0);
    assert_eq!(metric(&text, "chorus_tts_utterance_slots"), SEATS as f64);
    assert_eq!(metric(&text, "chorus_tts_first_audio_seconds_count"), 1.0);
    assert_eq!(
        metric(&text, "chorus_tts_first_audio_seconds_bucket{le=\"+Inf\"}"),
        1.0
    );
    assert!(metric(&text, "chorus_tts_step_seconds_count") >= 6.0);
    assert_eq!(metric(&text, "chorus_tts_kv_blocks_in_use"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_utterances_each_equal_their_solo_runs() {
    let server = tts_server().await;
    let mut ws_a = start_utterance(
        &server,
        &start_msg("First voice.", 9, 3, "seeded", "f32"),
        9,
    )
    .await;
    let mut ws_b = start_utterance(
        &server,
        &start_msg("A second, longer line.", 5, 0, "greedy", "s16"),
        5,
    )
    .await;
    let task_a = tokio::spawn(async move { read_utterance(&mut ws_a, PcmFormat::F32).await });
    let got_b = read_utterance(&mut ws_b, PcmFormat::S16).await;
    let got_a = task_a.await.unwrap();
    let want_a = direct("First voice.", 1, 9, Sampling::Seeded(3));
    assert_eq!(bits(&got_a.pcm), bits(&want_a));
    let want_b = direct("A second, longer line.", 1, 5, Sampling::Greedy);
    // s16 on the wire: the server's conversion of the same samples, read back divided by 32767.
    let want_b: Vec<f32> = want_b
        .iter()
        .map(|&x| to_s16(x) as f32 / i16::MAX as f32)
        .collect();
    assert_eq!(bits(&got_b.pcm), bits(&want_b));
    let text = metrics(&server).await;
    assert_eq!(metric(&text, "chorus_tts_utterances_finished_total"), 2.0);
    assert_eq!(metric(&text, "chorus_tts_frames_total"), 14.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_utterances_with_their_own_temperature_and_top_k_equal_their_solo_runs() {
    let server = tts_server().await;
    let with_draws = |text: &str, t: f32, k: usize| {
        let msg = start_msg(text, 6, 3, "seeded", "f32");
        format!(
            r#"{},"temperature":{t},"top_k":{k}}}"#,
            msg.trim_end_matches('}')
        )
    };
    let mut ws_a = start_utterance(&server, &with_draws("Cool and narrow.", 0.4, 2), 6).await;
    let mut ws_b = start_utterance(&server, &with_draws("Hot and wide.", 3.0, 2051), 6).await;
    let task_a = tokio::spawn(async move { read_utterance(&mut ws_a, PcmFormat::F32).await });
    let got_b = read_utterance(&mut ws_b, PcmFormat::F32).await;
    let got_a = task_a.await.unwrap();
    let draws = |temperature, top_k| DrawSettings { temperature, top_k };
    let want_a = direct_drawn("Cool and narrow.", 6, Sampling::Seeded(3), draws(0.4, 2));
    let want_b = direct_drawn("Hot and wide.", 6, Sampling::Seeded(3), draws(3.0, 2051));
    assert_eq!(bits(&got_a.pcm), bits(&want_a), "utterance a");
    assert_eq!(bits(&got_b.pcm), bits(&want_b), "utterance b");
    // The request's settings were used, not the server's.
    let default_a = direct("Cool and narrow.", 1, 6, Sampling::Seeded(3));
    assert_ne!(bits(&got_a.pcm), bits(&default_a));
    // Over HTTP with only `temperature` given: `top_k` is the server's.
    let body = r#"{"text":"Hot and wide.","speaker":1,"max_frames":6,"seed":3,"temperature":3.0}"#;
    let answer = post(&server, "/v1/tts?format=wav_f32", &[], body).await;
    assert_eq!(answer.status, 200);
    let wav = hound::WavReader::new(Cursor::new(&answer.body)).unwrap();
    let got: Vec<f32> = wav.into_samples().map(|s| s.unwrap()).collect();
    let want = direct_drawn("Hot and wide.", 6, Sampling::Seeded(3), draws(3.0, 50));
    assert_eq!(bits(&got), bits(&want), "HTTP, temperature only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_stream_and_frees_the_seat_at_once() {
    let server = tts_server().await;
    let long = |seed| start_msg("Keep talking.", 100, seed, "seeded", "f32");
    let mut first = start_utterance(&server, &long(1), 100).await;
    let mut second = start_utterance(&server, &long(2), 100).await;
    // Both seats are taken: a third is refused.
    let mut third = connect(&server).await;
    send_text(&mut third, &long(3)).await;
    expect_error(&mut third, "busy", "seats", 1013).await;
    // Two frames of the first, then cancel it.
    for _ in 0..2 {
        assert!(matches!(next(&mut first).await, Message::Binary(_)));
    }
    send_text(&mut first, r#"{"type":"cancel"}"#).await;
    let heard = read_utterance_counting(&mut first, 2).await;
    assert_eq!(heard.reason, TtsEndReason::Cancelled);
    assert!(heard.frames < 100, "{} frames", heard.frames);
    // The seat is free: a new utterance is admitted while the second still runs.
    let mut fourth = start_utterance(&server, &start_msg("Next.", 3, 4, "seeded", "f32"), 3).await;
    let got = read_utterance(&mut fourth, PcmFormat::F32).await;
    // Read at once, and the second dropped next, before the reference at the end takes the
    // cores: the unread second has most of its 100 frames to go (under load it could otherwise
    // end first).
    let text = metrics(&server).await;
    assert!(
        metric(&text, "chorus_tts_active_utterances") >= 1.0,
        "the second runs on"
    );
    assert_eq!(
        metric(
            &text,
            "chorus_tts_utterances_cancelled_total{reason=\"client\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&text, "chorus_tts_utterances_refused_total{code=\"busy\"}"),
        1.0
    );
    // Dropping the second's socket cancels it as a disconnect.
    let _ = second.close(None).await;
    wait_metrics(&server, |t| {
        metric(
            t,
            "chorus_tts_utterances_cancelled_total{reason=\"disconnect\"}",
        ) == 1.0
            && metric(t, "chorus_tts_active_utterances") == 0.0
    })
    .await;
    assert_eq!(
        bits(&got.pcm),
        bits(&direct("Next.", 1, 3, Sampling::Seeded(4)))
    );
}

/// [`read_utterance`] for a stream whose first `read` frames were already taken (audio not kept).
async fn read_utterance_counting(ws: &mut Ws, read: usize) -> Heard {
    let mut index = read;
    loop {
        match next(ws).await {
            Message::Binary(b) => {
                let f = decode_pcm(&b, PcmFormat::F32).expect("one 80 ms frame");
                assert_eq!(f.index as usize, index);
                index += 1;
            }
            Message::Text(t) => match serde_json::from_str(&t).unwrap() {
                TtsServerMessage::End {
                    reason,
                    frames,
                    first_audio_ms,
                } => {
                    assert_eq!(frames, index, "`end` counts the frames sent");
                    expect_close(ws, 1000).await;
                    return Heard {
                        pcm: Vec::new(),
                        frames,
                        reason,
                        first_audio_ms,
                    };
                }
                other => panic!("expected a frame or end, got {other:?}"),
            },
            other => panic!("expected a frame or end, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_refused_at_once_over_http_with_retry_after() {
    let server = tts_server().await;
    let long = |seed| start_msg("Keep talking.", 100, seed, "seeded", "f32");
    let first = start_utterance(&server, &long(1), 100).await;
    let second = start_utterance(&server, &long(2), 100).await;
    let body = r#"{"text":"Me too.","max_frames":3}"#;
    let answer = post(&server, "/v1/tts", &[], body).await;
    let (status, code, message) = error_code(&answer);
    assert_eq!((status, code.as_str()), (503, "busy"), "{message}");
    assert!(message.contains("seats"), "{message}");
    assert_eq!(answer.header("retry-after"), Some("1"));
    drop((first, second));
    wait_metrics(&server, |t| {
        metric(t, "chorus_tts_active_utterances") == 0.0
    })
    .await;
    // Once the seats are free the same request is served.
    let answer = post(&server, "/v1/tts", &[], body).await;
    assert_eq!(answer.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_gets_its_named_error_and_leaves_the_running_utterance_untouched() {
    let server = tts_server().await;
    let mut running =
        start_utterance(&server, &start_msg("Steady.", 12, 5, "seeded", "f32"), 12).await;
    let long_text = "x".repeat(200);
    let huge_text = "y".repeat(MAX_TEXT + 1);
    let cases: Vec<(String, &str, &str)> = vec![
        ("{oops".into(), "bad_json", "malformed JSON"),
        ("[1]".into(), "bad_json", "object"),
        (r#"{"type":"speak"}"#.into(), "unknown_message", "speak"),
        (r#"{"type":"cancel"}"#.into(), "not_started", "`cancel` before `start`"),
        (r#"{"type":"start","text":""}"#.into(), "bad_request", "empty"),
        (r#"{"type":"start","text":"  "}"#.into(), "bad_request", "empty"),
        (r#"{"type":"start"}"#.into(), "bad_request", "missing field `text`"),
        (r#"{"type":"start","text":"Hi","speaker":99}"#.into(), "bad_request", "unknown speaker 99"),
        (r#"{"type":"start","text":"Hi","speaker":-1}"#.into(), "bad_request", "`speaker`"),
        (format!(r#"{{"type":"start","text":"{long_text}"}}"#), "bad_request", "too long: its prompt has"),
        (format!(r#"{{"type":"start","text":"{huge_text}"}}"#), "bad_request", "401 bytes"),
        (r#"{"type":"start","text":"Hi","sampling":"top_p"}"#.into(), "bad_request", "top_p"),
        (r#"{"type":"start","text":"Hi","temperature":-1}"#.into(), "bad_request", "`temperature` must be a number >= 0"),
        (r#"{"type":"start","text":"Hi","temperature":"warm"}"#.into(), "bad_request", "`temperature`"),
        (r#"{"type":"start","text":"Hi","top_k":0}"#.into(), "bad_request", "`top_k`"),
        (r#"{"type":"start","text":"Hi","top_k":2052}"#.into(), "bad_request", "`top_k` is 2052: it must be in 1..=2051"),
        (r#"{"type":"start","text":"Hi","seed":-3}"#.into(), "bad_request", "`seed`"),
        (r#"{"type":"start","text":"Hi","max_frames":1000}"#.into(), "bad_request", "`max_frames` is 1000"),
        (r#"{"type":"start","text":"Hi","max_frames":0}"#.into(), "bad_request", "`max_frames`"),
        (r#"{"type":"start","text":"Hi","format":"mp3"}"#.into(), "bad_request", "mp3"),
        (r#"{"type":"start","text":"Hi","opus_bitrate":9000}"#.into(), "bad_request", "opus_bitrate"),
        (r#"{"type":"start","text":"Hi","colour":1}"#.into(), "bad_request", "`colour`"),
        (r#"{"type":"start","text":"Hi","context":[{"speaker":0,"text":"Before.","codes":[[1,2,3]]}]}"#.into(), "bad_request", "3 codes"),
        (r#"{"type":"start","text":"Hi","context":[{"speaker":0,"text":"Before.","codes":[[1,2,3,4,5,6,7,99]]}]}"#.into(), "bad_request", "code 99"),
        (r#"{"type":"start","text":"Hi","context":[{"speaker":0,"text":"Before."}]}"#.into(), "bad_request", "no `codes`"),
        (r#"{"type":"start","text":"Hi","prompt_ids":[1,2]}"#.into(), "bad_request", "not both"),
        (r#"{"type":"start","prompt_ids":[1,500,3]}"#.into(), "bad_request", "text id 500"),
    ];
    for (text, code, needle) in &cases {
        let mut ws = connect(&server).await;
        send_text(&mut ws, text).await;
        expect_error(&mut ws, code, needle, 1008).await;
    }
    // Binary where JSON is expected: before `start`, and during an utterance.
    let mut ws = connect(&server).await;
    ws.send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    expect_error(&mut ws, "not_started", "binary", 1008).await;
    let mut ws = start_utterance(&server, &start_msg("Short.", 50, 1, "seeded", "f32"), 50).await;
    ws.send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    loop {
        match next(&mut ws).await {
            Message::Binary(_) => continue,
            Message::Text(t) => {
                let msg: TtsServerMessage = serde_json::from_str(&t).unwrap();
                let TtsServerMessage::Error { code, message } = msg else {
                    panic!("expected an error, got {msg:?}")
                };
                assert_eq!(code.as_str(), "bad_request");
                assert!(message.contains("binary"), "{message}");
                break;
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
    expect_close(&mut ws, 1008).await;
    // Its seat is freed before the next step.
    wait_metrics(&server, |t| {
        metric(t, "chorus_tts_active_utterances") == 1.0
    })
    .await;
    // A second `start` on one connection.
    let mut ws = start_utterance(&server, &start_msg("Once.", 50, 1, "seeded", "f32"), 50).await;
    send_text(&mut ws, &start_msg("Twice.", 3, 1, "seeded", "f32")).await;
    loop {
        match next(&mut ws).await {
            Message::Binary(_) => continue,
            Message::Text(t) => {
                let msg: TtsServerMessage = serde_json::from_str(&t).unwrap();
                assert!(
                    matches!(&msg, TtsServerMessage::Error { code, .. } if code.as_str() == "already_started"),
                    "{msg:?}"
                );
                break;
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
    // The same named errors over HTTP, as 400s.
    let answer = post(&server, "/v1/tts", &[], r#"{"text":"Hi","speaker":42}"#).await;
    let (status, code, message) = error_code(&answer);
    assert_eq!((status, code.as_str()), (400, "bad_request"));
    assert!(message.contains("unknown speaker 42"), "{message}");
    let answer = post(&server, "/v1/tts", &[], "not json").await;
    assert_eq!(error_code(&answer).1, "bad_json");
    let answer = post(&server, "/v1/tts", &[], r#"{"text":"Hi","format":"f32"}"#).await;
    assert!(error_code(&answer).2.contains("?format="));
    let answer = post(&server, "/v1/tts?format=flac", &[], r#"{"text":"Hi"}"#).await;
    assert_eq!(error_code(&answer).0, 400);
    // The utterance that ran beside all of this is exactly its solo run.
    let heard = read_utterance(&mut running, PcmFormat::F32).await;
    assert_eq!(
        bits(&heard.pcm),
        bits(&direct("Steady.", 1, 12, Sampling::Seeded(5)))
    );
    let text = metrics(&server).await;
    assert!(
        metric(
            &text,
            "chorus_tts_utterances_refused_total{code=\"bad_request\"}"
        ) >= 20.0
    );
}

#[tokio::test]
async fn http_returns_a_wav_of_the_same_samples_and_ogg_opus_on_request() {
    let server = tts_server().await;
    let body = r#"{"text":"Hello there.","speaker":1,"max_frames":4,"seed":9}"#;
    let want = direct("Hello there.", 1, 4, Sampling::Seeded(9));
    let answer = post(&server, "/v1/tts", &[], body).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("audio/wav"));
    assert_eq!(answer.header("x-chorus-frames"), Some("4"));
    assert_eq!(answer.header("x-chorus-end-reason"), Some("max_frames"));
    let wav = hound::WavReader::new(Cursor::new(&answer.body)).unwrap();
    let spec = wav.spec();
    assert_eq!(
        (spec.sample_rate, spec.channels, spec.bits_per_sample),
        (24_000, 1, 16)
    );
    let got: Vec<i16> = wav.into_samples().map(|s| s.unwrap()).collect();
    let want_s16: Vec<i16> = want.iter().map(|&x| to_s16(x)).collect();
    assert_eq!(got, want_s16);
    let answer = post(&server, "/v1/tts?format=wav_f32", &[], body).await;
    let wav = hound::WavReader::new(Cursor::new(&answer.body)).unwrap();
    let got: Vec<f32> = wav.into_samples().map(|s| s.unwrap()).collect();
    assert_eq!(bits(&got), bits(&want));
    for (path, headers) in [
        ("/v1/tts?format=opus", &[][..]),
        ("/v1/tts", &[("accept", "audio/ogg")][..]),
    ] {
        let answer = post(&server, path, headers, body).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.header("content-type"), Some("audio/ogg"));
        assert_eq!(&answer.body[..4], b"OggS");
    }
}

#[tokio::test]
async fn opus_streams_one_packet_per_frame() {
    let server = tts_server().await;
    let mut ws = start_utterance(&server, &start_msg("Opus.", 3, 2, "seeded", "opus"), 3).await;
    let mut dec = chorus_audio::OpusFrameDecoder::new().unwrap();
    let mut pcm = Vec::new();
    for i in 0..3u32 {
        let Message::Binary(b) = next(&mut ws).await else {
            panic!("expected frame {i}")
        };
        assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), i);
        let n = dec.decode(&b[4..], &mut pcm).unwrap();
        assert_eq!(n, FRAME_SAMPLES);
    }
    match next_tts(&mut ws).await {
        TtsServerMessage::End { reason, frames, .. } => {
            assert_eq!((reason, frames), (TtsEndReason::MaxFrames, 3))
        }
        other => panic!("expected end, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_without_a_speech_model_says_so() {
    let server = common::start(1, 1).await;
    let answer = post(&server, "/v1/tts", &[], r#"{"text":"Hi"}"#).await;
    let (status, code, _) = error_code(&answer);
    assert_eq!((status, code.as_str()), (404, "not_enabled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_generator_times_every_frame_of_every_utterance() {
    let server = tts_server().await;
    let config = TtsLoadConfig {
        url: format!("ws://{}", server.local_addr()),
        streams: SEATS,
        duration: Duration::from_millis(500),
        text: "Load.".into(),
        frames: 4,
        seed: 1,
        format: PcmFormat::F32,
        wait_ready: WAIT,
        api_key: None,
    };
    let report = run_tts(config).await.unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.utterances >= SEATS as u64, "{}", report.summary());
    assert_eq!(report.frames, report.utterances * 4);
    // Every frame but each utterance's first has a gap; every utterance a first audio.
    assert_eq!(report.gap_ms.p99 > 0.0, report.frames > report.utterances);
    assert!(report.first_audio_ms.max >= report.first_audio_ms.p50);
    assert!(report.first_audio_ms.p50 > 0.0);
    let text = metrics(&server).await;
    assert_eq!(
        metric(&text, "chorus_tts_utterances_finished_total"),
        report.utterances as f64
    );
}

#[tokio::test]
async fn a_client_that_does_not_read_is_cut_off_as_a_slow_consumer() {
    // Through the engine's API: a socket's buffers would hide a slow reader for a long time.
    let config = TtsConfig {
        max_undelivered_frames: 3,
        ..config()
    };
    let tts = TtsEngine::start(Box::new(|| Ok(stage())), config, Some(tokenizer())).unwrap();
    let req = parse_tts_body(br#"{"text":"Slow.","max_frames":40}"#).unwrap();
    let mut job = tts.submit(tts.prepare(&req).unwrap()).unwrap();
    let slow = "chorus_tts_utterances_cancelled_total{reason=\"slow_consumer\"}";
    let render = || {
        let mut text = String::new();
        tts.metrics().render(&mut text);
        text
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while metric(&render(), slow) < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "never cut off");
        tokio::time::sleep(POLL).await;
    }
    let gauges = tts.metrics().gauges();
    assert_eq!((gauges.active_utterances, gauges.kv_in_use), (0, 0));
    assert!(matches!(
        job.next().await,
        TtsUpdate::Event(TtsEvent::Started(_))
    ));
    for i in 0..3 {
        match job.next().await {
            TtsUpdate::Event(TtsEvent::Frame(f)) => {
                assert_eq!((f.index, f.pcm.len()), (i, FRAME_SAMPLES))
            }
            other => panic!("expected frame {i}, got {other:?}"),
        }
    }
    match job.next().await {
        TtsUpdate::Done(TtsOutcome::Failed(e)) => assert_eq!(e.code.as_str(), "slow_consumer"),
        other => panic!("expected slow_consumer, got {other:?}"),
    }
    // The engine goes on: an utterance that is read runs to its end.
    let req = parse_tts_body(br#"{"text":"Next.","max_frames":5}"#).unwrap();
    let mut job = tts.submit(tts.prepare(&req).unwrap()).unwrap();
    let mut frames = 0;
    loop {
        match job.next().await {
            TtsUpdate::Event(TtsEvent::Frame(_)) => frames += 1,
            TtsUpdate::Event(TtsEvent::Started(_)) => {}
            TtsUpdate::Done(o) => {
                assert!(
                    matches!(
                        o,
                        TtsOutcome::Ended {
                            reason: TtsEndReason::MaxFrames,
                            frames: 5,
                            ..
                        }
                    ),
                    "{o:?}"
                );
                break;
            }
        }
    }
    assert_eq!(frames, 5);
}

#[tokio::test]
async fn context_turns_given_as_codes_shape_the_utterance_as_in_the_stage() {
    let server = tts_server().await;
    let codes: Vec<Vec<u32>> = (0..3u32)
        .map(|f| (0..8u32).map(|l| (f * 5 + l * 3) % 11).collect())
        .collect();
    let start = serde_json::json!({
        "type": "start", "text": "Yes, I heard.", "speaker": 1, "max_frames": 5, "seed": 11,
        "format": "f32",
        "context": [{"speaker": 0, "text": "Did you hear?", "codes": codes}],
    });
    let mut ws = start_utterance(&server, &start.to_string(), 5).await;
    let heard = read_utterance(&mut ws, PcmFormat::F32).await;
    let context = [Segment {
        speaker: 0,
        text: "Did you hear?".into(),
        audio: Some(codes),
    }];
    let want = direct_after(&context, "Yes, I heard.", 1, 5, Sampling::Seeded(11));
    assert_eq!(bits(&heard.pcm), bits(&want));
    let alone = direct("Yes, I heard.", 1, 5, Sampling::Seeded(11));
    assert_ne!(bits(&want), bits(&alone), "the context changes the audio");
}

#[tokio::test]
async fn an_http_client_that_goes_away_cancels_its_utterance() {
    use tokio::io::AsyncWriteExt;
    let server = tts_server().await;
    let body = r#"{"text":"A long answer.","max_frames":100}"#;
    let mut tcp = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let head = format!(
        "POST /v1/tts HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    wait_metrics(&server, |t| {
        metric(t, "chorus_tts_active_utterances") == 1.0
    })
    .await;
    drop(tcp);
    let text = wait_metrics(&server, |t| {
        metric(t, "chorus_tts_active_utterances") == 0.0
    })
    .await;
    let disconnects = "chorus_tts_utterances_cancelled_total{reason=\"disconnect\"}";
    assert_eq!(metric(&text, disconnects), 1.0, "{text}");
    assert!(metric(&text, "chorus_tts_frames_total") < 100.0);
    assert_eq!(metric(&text, "chorus_tts_kv_blocks_in_use"), 0.0);
}

/// Two stand-in devices: utterances go to the one with the most free KV blocks and each equals
/// its solo run; when one device fails, its utterance ends with an error naming it, the other's
/// is whole and exact, and the survivor takes every new utterance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utterances_spread_over_devices_and_a_failed_device_ends_only_its_own() {
    let faults = [FaultSwitch::default(), FaultSwitch::default()];
    let server = start_devices(&[(0, faults[0].clone()), (1, faults[1].clone())]).await;
    assert_eq!(healthz(&server).await["tts"]["max_utterances"], 2 * SEATS);
    let long = 90;
    let mut on_0 = start_utterance(
        &server,
        &start_msg("On the first.", long, 5, "seeded", "f32"),
        long,
    )
    .await;
    let mut on_1 = start_utterance(
        &server,
        &start_msg("On the second.", 12, 6, "seeded", "f32"),
        12,
    )
    .await;
    let h = healthz(&server).await;
    assert_eq!(
        stage_devices(&h, "tts")
            .iter()
            .map(|d| (d.0, d.1, d.3.as_str()))
            .collect::<Vec<_>>(),
        [(0, 1, "ok"), (1, 1, "ok")],
        "{h}"
    );
    faults[0].trip();
    // Device 0's utterance: whatever frames it had, then an error naming its device.
    let message = loop {
        match next(&mut on_0).await {
            Message::Binary(_) => {}
            Message::Text(t) => match serde_json::from_str(&t).unwrap() {
                TtsServerMessage::Error { code, message } => {
                    assert_eq!(code.as_str(), "internal", "{message}");
                    break message;
                }
                other => panic!("expected frames then an error, got {other:?}"),
            },
            other => panic!("expected frames then an error, got {other:?}"),
        }
    };
    assert!(message.contains("device 0 failed"), "{message}");
    expect_close(&mut on_0, 1011).await;
    // Device 1's utterance is whole and bit-identical to its solo run.
    let heard = read_utterance(&mut on_1, PcmFormat::F32).await;
    assert_eq!((heard.reason, heard.frames), (TtsEndReason::MaxFrames, 12));
    let want = direct("On the second.", 1, 12, Sampling::Seeded(6));
    assert_eq!(bits(&heard.pcm), bits(&want));
    let h = healthz(&server).await;
    assert_eq!(stage_devices(&h, "tts")[0].3, "failed", "{h}");
    assert!(
        h["tts"]["devices"][0]["error"]
            .as_str()
            .unwrap()
            .contains("device 0 failed"),
        "{h}"
    );
    // The survivor takes the next utterances, exact as ever.
    for seed in [8, 9] {
        let mut ws = start_utterance(
            &server,
            &start_msg("Still here.", 4, seed, "seeded", "f32"),
            4,
        )
        .await;
        let heard = read_utterance(&mut ws, PcmFormat::F32).await;
        assert_eq!(
            bits(&heard.pcm),
            bits(&direct("Still here.", 1, 4, Sampling::Seeded(seed)))
        );
    }
    let text = metrics(&server).await;
    assert_eq!(
        metric(&text, "chorus_tts_utterances_started_total{device=\"1\"}"),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "chorus_tts_utterances_started_total{device=\"0\"}"),
        1.0,
        "{text}"
    );
}
