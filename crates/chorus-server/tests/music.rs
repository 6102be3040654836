//! `/v1/music` over real sockets on loopback: the `random-small` semantic stage on the CPU backend,
//! every streamed song checked bit for bit against the same request run on a stage directly.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chorus_core::checkpoint::{SafetensorsFile, TensorSource};
use chorus_cpu::CpuBackend;
use chorus_engine::fake::FakeDecoder;
use chorus_engine::{Engine, EngineConfig, EnginePool};
use chorus_music::prompt::{PromptIds, PromptTokenizer, AUDIO_START, IM_END, IM_START};
use chorus_music::song::LEVELS;
use chorus_music::{
    load_music_model, EndReason, MusicModel, Sampling, SemanticStage, SongEvent, SongRequest,
    StageOptions,
};
use chorus_server::loadgen::http_request;
use chorus_server::music::{
    JobUpdate, MusicConfig, MusicEndReason, MusicEngine, MusicEvent, MusicServerMessage, Outcome,
    PromptSource, StageFactory, StartRequest,
};
use chorus_server::stage::{DeviceStage, FaultSwitch};
use chorus_server::{Server, ServerConfig};
use common::{expect_close, fake, healthz, next, send_text, stage_devices, Ws, WAIT};
use tokio_tungstenite::tungstenite::Message;

/// Song slots of every test server (the busy test fills them).
const SONGS: usize = 2;
/// Positions per row: a 12-token prompt leaves room for 115 frames.
const CONTEXT: usize = 128;
/// CPU threads of each stage (CI's size).
const THREADS: usize = 2;
/// The small model's hidden size.
const HIDDEN: usize = 256;
/// How often a test polls `/metrics` for a change the engine makes between steps.
const POLL: Duration = Duration::from_millis(10);

fn model() -> &'static MusicModel {
    static MODEL: OnceLock<MusicModel> = OnceLock::new();
    MODEL.get_or_init(|| load_music_model("random-small").unwrap())
}

fn stage() -> (SemanticStage<CpuBackend>, StageOptions) {
    let opts = StageOptions::for_songs(SONGS, CONTEXT).unwrap();
    let be = CpuBackend::new(Some(THREADS)).unwrap();
    (SemanticStage::new(be, model(), opts.clone()).unwrap(), opts)
}

/// A 12-token prompt in the template's shape; `salt` varies the middle.
fn prompt(salt: u32) -> Vec<u32> {
    let mut ids = vec![IM_START];
    ids.extend((0..9).map(|i| 100 + salt * 31 + i * 7));
    ids.extend([IM_END, AUDIO_START]);
    ids
}

async fn start_server(config: MusicConfig, tokenizer: Option<PromptTokenizer>) -> Server {
    let music = MusicEngine::start(Box::new(|| Ok(stage())), config, tokenizer).unwrap();
    bind(music).await
}

/// A server with one CPU music stage per `(device, fault switch)`, standing in for devices.
async fn start_devices(devices: &[(usize, FaultSwitch)], config: MusicConfig) -> Server {
    let stages = devices
        .iter()
        .map(|(device, fault)| {
            let factory: StageFactory<CpuBackend> = Box::new(|| Ok(stage()));
            DeviceStage {
                device: *device,
                factory,
                fault: Some(fault.clone()),
            }
        })
        .collect();
    bind(MusicEngine::start_on(stages, config, None).unwrap()).await
}

async fn bind(music: MusicEngine) -> Server {
    let engine = Engine::start(
        Box::new(|| Ok(Box::new(FakeDecoder::new(fake(1, 1))) as _)),
        EngineConfig::default(),
    )
    .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Server::bind_with_music(
        Arc::new(EnginePool::from(engine)),
        Some(Arc::new(music)),
        addr,
        ServerConfig::default(),
    )
    .await
    .unwrap()
}

async fn music_server() -> Server {
    start_server(MusicConfig::default(), None).await
}

/// A song as a client (or the direct run) sees it.
#[derive(Debug, PartialEq)]
struct Song {
    codes: Vec<[u32; LEVELS]>,
    /// bf16 little-endian bytes of every frame's hiddens (empty when not requested).
    hiddens: Vec<u8>,
}

/// The same request run on a fresh stage, alone.
fn direct(prompt: PromptIds, frames: usize, sampling: Sampling) -> Song {
    let (mut st, _) = stage();
    let req = SongRequest {
        prompt,
        max_frames: frames,
        sampling,
        allow_end: false,
        forced: None,
    };
    let id = st.add_song(req).unwrap();
    let mut song = Song {
        codes: Vec::new(),
        hiddens: Vec::new(),
    };
    while st.active() > 0 {
        st.step(&mut |ev| {
            if let SongEvent::Frame {
                song: s,
                codes,
                hidden,
                ..
            } = ev
            {
                assert_eq!(s, id);
                song.codes.push(codes);
                song.hiddens.extend(
                    hidden
                        .iter()
                        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()),
                );
            }
        })
        .unwrap();
    }
    song
}

fn vocab() -> usize {
    model().lm_config.vocab_size
}

fn start_msg(ids: &str, frames: usize, seed: u64, sampling: &str, hiddens: bool) -> String {
    format!(
        r#"{{"type":"start","prompt_ids":{ids},"seconds":5,"max_frames":{frames},"seed":{seed},"sampling":"{sampling}","allow_end":false,"hiddens":{hiddens}}}"#
    )
}

fn ids_json(ids: &[u32]) -> String {
    serde_json::to_string(ids).unwrap()
}

async fn connect(server: &Server) -> Ws {
    let url = format!("ws://{}/v1/music", server.local_addr());
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

async fn next_music(ws: &mut Ws) -> MusicServerMessage {
    match next(ws).await {
        Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected JSON, got {other:?}"),
    }
}

/// Sends `start` and checks `started`; returns the socket.
async fn start_song(server: &Server, text: &str, frames: usize) -> Ws {
    let mut ws = connect(server).await;
    send_text(&mut ws, text).await;
    match next_music(&mut ws).await {
        MusicServerMessage::Started {
            max_frames,
            levels,
            hidden_size,
            ..
        } => assert_eq!((max_frames, levels, hidden_size), (frames, LEVELS, HIDDEN)),
        other => panic!("expected started, got {other:?}"),
    }
    ws
}

/// Reads frames (and hiddens) in order until `end`; checks the end and the normal close.
async fn read_song(ws: &mut Ws, hiddens: bool, reason: MusicEndReason) -> Song {
    let mut song = Song {
        codes: Vec::new(),
        hiddens: Vec::new(),
    };
    loop {
        match next_music(ws).await {
            MusicServerMessage::Frame { index, codes } => {
                assert_eq!(index, song.codes.len());
                song.codes.push(codes);
                if hiddens {
                    let Message::Binary(b) = next(ws).await else {
                        panic!("expected the hiddens of frame {index}")
                    };
                    assert_eq!(b.len(), LEVELS * HIDDEN * 2);
                    song.hiddens.extend_from_slice(&b);
                }
            }
            MusicServerMessage::End { reason: r, frames } => {
                assert_eq!((r, frames), (reason, song.codes.len()));
                break;
            }
            other => panic!("expected a frame or end, got {other:?}"),
        }
    }
    expect_close(ws, 1000).await;
    song
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
    match next_music(ws).await {
        MusicServerMessage::Error { code: c, message } => {
            assert_eq!(c.as_str(), code, "{message}");
            assert!(message.contains(needle), "`{needle}` not in: {message}");
        }
        other => panic!("expected error {code}, got {other:?}"),
    }
    expect_close(ws, close).await;
}

#[tokio::test]
async fn a_song_streams_its_frames_in_order_and_equals_the_stage_run() {
    let server = music_server().await;
    let ids = prompt(1);
    let mut ws = start_song(
        &server,
        &start_msg(&ids_json(&ids), 12, 7, "seeded", true),
        12,
    )
    .await;
    let got = read_song(&mut ws, true, MusicEndReason::MaxFrames).await;
    let want = direct(
        PromptIds::from_cond(ids, vocab()).unwrap(),
        12,
        Sampling::Seeded(7),
    );
    assert_eq!(got.codes.len(), 12);
    assert_eq!(got, want, "codes and hiddens are bit-identical");
    let text = wait_metrics(&server, |t| metric(t, "chorus_music_active_songs") == 0.0).await;
    assert_eq!(metric(&text, "chorus_music_songs_started_total"), 1.0);
    assert_eq!(metric(&text, "chorus_music_songs_finished_total"), 1.0);
    assert_eq!(metric(&text, "chorus_music_frames_total"), 12.0);
    assert_eq!(metric(&text, "chorus_music_song_slots"), SONGS as f64);
    assert_eq!(metric(&text, "chorus_music_kv_blocks_in_use"), 0.0);
    assert_eq!(metric(&text, "chorus_music_kv_blocks_usable"), 4.0);
    // At least one step per frame (how many more is the stage's business).
    let steps = metric(&text, "chorus_music_step_seconds_count");
    assert!(steps >= 12.0, "{steps} steps");
    assert_eq!(
        metric(&text, "chorus_music_step_seconds_bucket{le=\"+Inf\"}"),
        steps
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_songs_each_equal_their_solo_run() {
    let server = music_server().await;
    let (a, b) = (prompt(2), prompt(3));
    let mut uncond = b.clone();
    uncond[3] = 42;
    let pair = format!("[{},{}]", ids_json(&b), ids_json(&uncond));
    let mut ws_a = start_song(
        &server,
        &start_msg(&ids_json(&a), 20, 1, "noise", false),
        20,
    )
    .await;
    let mut ws_b = start_song(&server, &start_msg(&pair, 15, 0, "greedy", true), 15).await;
    let task_a =
        tokio::spawn(async move { read_song(&mut ws_a, false, MusicEndReason::MaxFrames).await });
    let got_b = read_song(&mut ws_b, true, MusicEndReason::MaxFrames).await;
    let got_a = task_a.await.unwrap();
    let want_a = direct(
        PromptIds::from_cond(a, vocab()).unwrap(),
        20,
        Sampling::Noise(1),
    );
    assert_eq!(got_a.codes, want_a.codes);
    let want_b = direct(
        PromptIds::from_pair(b, uncond, vocab()).unwrap(),
        15,
        Sampling::Greedy,
    );
    assert_eq!(got_b, want_b);
    let text = metrics(&server).await;
    assert_eq!(metric(&text, "chorus_music_songs_finished_total"), 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_song_beyond_the_slots_is_busy_while_the_others_finish() {
    let server = music_server().await;
    let text = |salt| start_msg(&ids_json(&prompt(salt)), 60, salt as u64, "seeded", false);
    let mut first = start_song(&server, &text(4), 60).await;
    let mut second = start_song(&server, &text(5), 60).await;
    wait_metrics(&server, |t| metric(t, "chorus_music_step_songs") == 2.0).await;
    let mut third = connect(&server).await;
    send_text(&mut third, &text(6)).await;
    expect_error(&mut third, "busy", "song slots", 1013).await;
    // The same over HTTP: 503 with a JSON error, nothing queued.
    let addr = server.local_addr().to_string();
    let body = text(7).into_bytes();
    let (status, body) = http_request(&addr, "POST", "/v1/music", body)
        .await
        .unwrap();
    let err: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, err["code"].as_str()), (503, Some("busy")), "{err}");
    for ws in [&mut first, &mut second] {
        let song = read_song(ws, false, MusicEndReason::MaxFrames).await;
        assert_eq!(song.codes.len(), 60);
    }
    let text = metrics(&server).await;
    assert_eq!(
        metric(&text, "chorus_music_songs_refused_total{code=\"busy\"}"),
        2.0
    );
    assert_eq!(metric(&text, "chorus_music_songs_started_total"), 2.0);
}

#[tokio::test]
async fn cancel_mid_song_ends_it_and_frees_its_blocks() {
    let server = music_server().await;
    let song = |salt| start_msg(&ids_json(&prompt(salt)), 100, 3, "seeded", false);
    let mut ws = start_song(&server, &song(8), 100).await;
    for i in 0..3 {
        assert!(
            matches!(next_music(&mut ws).await, MusicServerMessage::Frame { index, .. } if index == i)
        );
    }
    send_text(&mut ws, r#"{"type":"cancel"}"#).await;
    let n = read_song_from(&mut ws, 3, MusicEndReason::Cancelled).await;
    assert!(n < 100, "cancelled after {n} frames");
    let text = wait_metrics(&server, |t| {
        metric(t, "chorus_music_kv_blocks_in_use") == 0.0
            && metric(t, "chorus_music_active_songs") == 0.0
    })
    .await;
    assert_eq!(
        metric(
            &text,
            "chorus_music_songs_cancelled_total{reason=\"client\"}"
        ),
        1.0
    );
    assert_eq!(metric(&text, "chorus_music_kv_blocks_available"), 4.0);
    // Both slots take new songs.
    let _a = start_song(&server, &song(9), 100).await;
    let _b = start_song(&server, &song(10), 100).await;
}

/// Reads frames from index `first` until `end` with `reason`; returns the frame count.
async fn read_song_from(ws: &mut Ws, first: usize, reason: MusicEndReason) -> usize {
    let mut n = first;
    loop {
        match next_music(ws).await {
            MusicServerMessage::Frame { index, .. } => {
                assert_eq!(index, n);
                n += 1;
            }
            MusicServerMessage::End { reason: r, frames } => {
                assert_eq!((r, frames), (reason, n));
                expect_close(ws, 1000).await;
                return n;
            }
            other => panic!("expected a frame or end, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_client_disconnect_cancels_its_song() {
    let server = music_server().await;
    let text = start_msg(&ids_json(&prompt(11)), 110, 3, "seeded", true);
    let mut ws = start_song(&server, &text, 110).await;
    for _ in 0..2 {
        next(&mut ws).await;
    }
    drop(ws);
    let text = wait_metrics(&server, |t| {
        metric(
            t,
            "chorus_music_songs_cancelled_total{reason=\"disconnect\"}",
        ) == 1.0
    })
    .await;
    assert_eq!(metric(&text, "chorus_music_active_songs"), 0.0);
    assert_eq!(metric(&text, "chorus_music_kv_blocks_in_use"), 0.0);
    assert!(metric(&text, "chorus_music_frames_total") < 110.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_errors_naming_the_problem_and_disturb_no_song() {
    let server = music_server().await;
    let ids = prompt(12);
    let mut bystander = start_song(
        &server,
        &start_msg(&ids_json(&ids), 40, 9, "seeded", false),
        40,
    )
    .await;
    let good = ids_json(&prompt(13));
    let mut bad_id = prompt(13);
    bad_id[4] = vocab() as u32;
    let cases: Vec<(String, &str, &str)> = vec![
        ("{oops".into(), "bad_json", "malformed JSON"),
        (
            format!(r#"{{"type":"start","prompt_ids":{good},"seconds":0}}"#),
            "bad_request",
            "`seconds` is 0",
        ),
        (
            format!(r#"{{"type":"start","prompt_ids":{good},"seconds":400}}"#),
            "bad_request",
            "`seconds` is 400",
        ),
        (
            start_msg(&ids_json(&bad_id), 5, 0, "seeded", false),
            "bad_request",
            "outside the vocabulary",
        ),
        (
            start_msg(&good, 5, 0, "top_p", false),
            "bad_request",
            "unknown `sampling` `top_p`",
        ),
        (
            format!(r#"{{"type":"start","prompt_ids":{good},"seconds":10}}"#),
            "bad_request",
            "context of 128",
        ),
        (
            r#"{"type":"start","caption":"pop","lyrics":"la","seconds":1}"#.into(),
            "no_tokenizer",
            "--music-tokenizer",
        ),
        (
            r#"{"type":"cancel"}"#.into(),
            "not_started",
            "before `start`",
        ),
        (r#"{"type":"dance"}"#.into(), "unknown_message", "dance"),
    ];
    for (text, code, needle) in &cases {
        let mut ws = connect(&server).await;
        send_text(&mut ws, text).await;
        expect_error(&mut ws, code, needle, 1008).await;
    }
    let got = read_song(&mut bystander, false, MusicEndReason::MaxFrames).await;
    let want = direct(
        PromptIds::from_cond(ids, vocab()).unwrap(),
        40,
        Sampling::Seeded(9),
    );
    assert_eq!(got.codes, want.codes);
    let text = metrics(&server).await;
    assert_eq!(
        metric(
            &text,
            "chorus_music_songs_refused_total{code=\"bad_request\"}"
        ),
        5.0
    );
    assert_eq!(metric(&text, "chorus_music_songs_started_total"), 1.0);
}

#[tokio::test]
async fn http_post_returns_the_song_as_safetensors_or_json() {
    let server = music_server().await;
    let addr = server.local_addr().to_string();
    let ids = prompt(14);
    let body = format!(
        r#"{{"prompt_ids":{},"seconds":1,"max_frames":9,"seed":5,"allow_end":false}}"#,
        ids_json(&ids)
    );
    let want = direct(
        PromptIds::from_cond(ids, vocab()).unwrap(),
        9,
        Sampling::Seeded(5),
    );
    let (status, bytes) = http_request(&addr, "POST", "/v1/music", body.clone().into_bytes())
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&bytes));
    let path = tempfile::Builder::new()
        .prefix("chorus-music-http-")
        .suffix(".st")
        .tempfile()
        .unwrap()
        .into_temp_path();
    std::fs::write(&path, &bytes).unwrap();
    let file = SafetensorsFile::open(&path).unwrap();
    let (shape, codes) = file.load_i32("codes").unwrap();
    assert_eq!(shape, vec![9, LEVELS]);
    let flat: Vec<i32> = want.codes.iter().flatten().map(|&c| c as i32).collect();
    assert_eq!(codes, flat);
    assert_eq!(file.dtype_name("frame_hiddens"), Some("BF16"));
    let hiddens = file.load("frame_hiddens").unwrap();
    assert_eq!(hiddens.shape, vec![9, LEVELS * HIDDEN]);
    let bits: Vec<u8> = hiddens
        .data
        .iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
        .collect();
    assert_eq!(
        bits, want.hiddens,
        "the file's hiddens are the stage's, in bf16"
    );
    drop(file);
    std::fs::remove_file(&path).unwrap();

    let (status, json) = http_request(&addr, "POST", "/v1/music?format=json", body.into_bytes())
        .await
        .unwrap();
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let codes: Vec<[u32; LEVELS]> = serde_json::from_value(json["codes"].clone()).unwrap();
    assert_eq!(
        (codes, json["reason"].as_str()),
        (want.codes, Some("max_frames"))
    );

    let bad = br#"{"prompt_ids":[1,2,3],"seconds":"long"}"#.to_vec();
    let (status, body) = http_request(&addr, "POST", "/v1/music", bad).await.unwrap();
    let err: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, err["code"].as_str()), (400, Some("bad_request")));
    assert!(
        err["message"].as_str().unwrap().contains("`seconds`"),
        "{err}"
    );
}

#[tokio::test]
async fn caption_and_lyrics_go_through_the_servers_tokenizer() {
    let tok_path = write_tokenizer();
    let tokenizer = PromptTokenizer::from_file(&tok_path).unwrap();
    let server = start_server(MusicConfig::default(), Some(tokenizer)).await;
    let (caption, lyrics) = ("genre is pop", "[verse] hello world");
    let text = format!(
        r#"{{"type":"start","caption":"{caption}","lyrics":"{lyrics}","seconds":1,"max_frames":6,"allow_end":false}}"#
    );
    let mut ws = start_song(&server, &text, 6).await;
    let got = read_song(&mut ws, false, MusicEndReason::MaxFrames).await;
    let ids = PromptTokenizer::from_file(&tok_path)
        .unwrap()
        .encode(caption, lyrics, vocab())
        .unwrap();
    let want = direct(ids, 6, Sampling::Seeded(0));
    assert_eq!(got.codes, want.codes);
    let mut ws = connect(&server).await;
    let empty = r#"{"type":"start","caption":"  ","lyrics":"la","seconds":1}"#;
    send_text(&mut ws, empty).await;
    expect_error(&mut ws, "bad_request", "caption is empty", 1008).await;
}

/// A tiny WordLevel `tokenizer.json` carrying the checkpoint's special ids.
fn write_tokenizer() -> tempfile::TempPath {
    use chorus_music::prompt::*;
    let specials = [
        ("<|im_start|>", IM_START),
        ("<|im_end|>", IM_END),
        ("<|audio_start|>", AUDIO_START),
        ("<|caption_start|>", CAPTION_START),
        ("<|caption_end|>", CAPTION_END),
        ("<|lyrics_start|>", LYRICS_START),
        ("<|lyrics_end|>", LYRICS_END),
    ];
    let words = [
        ("[UNK]", 0u32),
        ("[", 10),
        ("]", 11),
        ("start", 20),
        ("verse", 21),
        ("genre", 30),
        ("is", 31),
        ("pop", 32),
        ("hello", 40),
        ("world", 41),
    ];
    let vocab: serde_json::Map<String, serde_json::Value> = words
        .iter()
        .chain(&specials)
        .map(|&(t, id)| (t.to_string(), id.into()))
        .collect();
    let added: Vec<serde_json::Value> = specials
        .iter()
        .map(|&(t, id)| {
            serde_json::json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    let path = tempfile::Builder::new()
        .prefix("chorus-music-tok-")
        .suffix(".json")
        .tempfile()
        .unwrap()
        .into_temp_path();
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

#[tokio::test]
async fn a_client_that_does_not_read_is_cut_off_as_a_slow_consumer() {
    // Through the engine's API: a socket's buffers would hide a slow reader for a long time.
    let config = MusicConfig {
        max_undelivered_frames: 3,
        ..MusicConfig::default()
    };
    let music = MusicEngine::start(Box::new(|| Ok(stage())), config, None).unwrap();
    let req = StartRequest {
        prompt: PromptSource::Ids {
            cond: prompt(15),
            uncond: None,
        },
        frames: 50,
        sampling: Sampling::Seeded(0),
        sampling_name: "seeded".into(),
        seed: 0,
        allow_end: false,
        hiddens: None,
    };
    let mut job = music.submit(music.prepare(&req, false).unwrap()).unwrap();
    let slow = "chorus_music_songs_cancelled_total{reason=\"slow_consumer\"}";
    let render = || {
        let mut text = String::new();
        music.metrics().render(&mut text);
        text
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while metric(&render(), slow) < 1.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the song was never cut off"
        );
        tokio::time::sleep(POLL).await;
    }
    let gauges = music.metrics().gauges();
    assert_eq!((gauges.active_songs, gauges.kv_in_use), (0, 0));
    assert!(matches!(
        job.next().await,
        JobUpdate::Event(MusicEvent::Started(_))
    ));
    for i in 0..3 {
        match job.next().await {
            JobUpdate::Event(MusicEvent::Frame(f)) => assert_eq!(f.index, i),
            other => panic!("expected frame {i}, got {other:?}"),
        }
    }
    match job.next().await {
        JobUpdate::Done(Outcome::Failed(e)) => assert_eq!(e.code.as_str(), "slow_consumer"),
        other => panic!("expected slow_consumer, got {other:?}"),
    }
    assert_eq!(metric(&render(), slow), 1.0);
    // The engine goes on: the next song runs to its end.
    let mut job = music.submit(music.prepare(&req, false).unwrap()).unwrap();
    let mut frames = 0;
    loop {
        match job.next().await {
            JobUpdate::Event(MusicEvent::Frame(_)) => frames += 1,
            JobUpdate::Event(MusicEvent::Started(_)) => {}
            JobUpdate::Done(o) => {
                assert_eq!(
                    o,
                    Outcome::Ended {
                        reason: EndReason::MaxFrames,
                        frames: 50
                    }
                );
                break;
            }
        }
    }
    assert_eq!(frames, 50);
}

#[tokio::test]
async fn without_a_music_model_the_endpoint_is_not_enabled() {
    let server = common::start(1, 1).await;
    let addr = server.local_addr().to_string();
    let body = br#"{"prompt_ids":[1,2,3],"seconds":1}"#.to_vec();
    let (status, body) = http_request(&addr, "POST", "/v1/music", body)
        .await
        .unwrap();
    let err: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, err["code"].as_str()), (404, Some("not_enabled")));
    let url = format!("ws://{addr}/v1/music");
    let e = tokio_tungstenite::connect_async(url).await.unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
    let text = metrics(&server).await;
    assert!(!text.contains("chorus_music_"));
}

#[tokio::test]
async fn an_http_client_that_goes_away_cancels_its_song() {
    use tokio::io::AsyncWriteExt;
    let server = music_server().await;
    let body = format!(
        r#"{{"prompt_ids":{},"seconds":5,"max_frames":110,"allow_end":false}}"#,
        ids_json(&prompt(16))
    );
    let mut tcp = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let head = format!(
        "POST /v1/music HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body.as_bytes()).await.unwrap();
    wait_metrics(&server, |t| metric(t, "chorus_music_active_songs") == 1.0).await;
    drop(tcp);
    let text = wait_metrics(&server, |t| metric(t, "chorus_music_active_songs") == 0.0).await;
    assert_eq!(
        metric(
            &text,
            "chorus_music_songs_cancelled_total{reason=\"disconnect\"}"
        ),
        1.0,
        "{text}"
    );
    assert!(metric(&text, "chorus_music_frames_total") < 110.0);
}

/// A message over `--max-ws-message` is refused from its frame header: `message_too_big`, then
/// close 1009, and the song beside it is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_limit_closes_with_1009() {
    use futures_util::{SinkExt, StreamExt};
    let server = music_server().await;
    let ids = prompt(4);
    let text = start_msg(&ids_json(&ids), 6, 11, "seeded", false);
    let mut song = start_song(&server, &text, 6).await;
    let (mut tx, mut rx) = connect(&server).await.split();
    let big = " ".repeat(chorus_server::gate::DEFAULT_MAX_WS_MESSAGE + 1);
    // The server stops reading at the header: the rest of the send may never complete.
    let send = tokio::spawn(async move {
        let _ = tx.send(Message::Text(big.into())).await;
        tx
    });
    let msg = tokio::time::timeout(WAIT, rx.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Message::Text(t) = msg else {
        panic!("expected the error, got {msg:?}")
    };
    match serde_json::from_str(&t).unwrap() {
        MusicServerMessage::Error { code, message } => {
            assert_eq!(code.as_str(), "message_too_big");
            assert!(message.contains("--max-ws-message"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match tokio::time::timeout(WAIT, rx.next()).await.unwrap() {
        Some(Ok(Message::Close(Some(f)))) => assert_eq!(u16::from(f.code), 1009),
        other => panic!("expected close 1009, got {other:?}"),
    }
    send.abort();
    let alone = direct(
        PromptIds::from_cond(ids, vocab()).unwrap(),
        6,
        Sampling::Seeded(11),
    );
    let got = read_song(&mut song, false, MusicEndReason::MaxFrames).await;
    assert_eq!(got.codes, alone.codes);
}

/// Songs that do not fit in a client's channel are never cut off in these tests: they are read
/// only after the checks made while they run.
fn patient() -> MusicConfig {
    MusicConfig {
        max_undelivered_frames: 1000,
        ..MusicConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn songs_spread_over_devices_equal_their_solo_runs_and_busy_waits_for_every_device() {
    let server = start_devices(
        &[(0, FaultSwitch::default()), (1, FaultSwitch::default())],
        patient(),
    )
    .await;
    let frames = 100;
    let text = |salt: u32| {
        start_msg(
            &ids_json(&prompt(salt)),
            frames,
            salt as u64,
            "seeded",
            false,
        )
    };
    // Free KV blocks (4, 4): the songs alternate, ties going to device 0.
    let mut songs = Vec::new();
    for salt in 0..4 {
        songs.push(start_song(&server, &text(salt), frames).await);
    }
    let h = healthz(&server).await;
    let ok = |d, kv| (d, 2, kv, "ok".to_string());
    assert_eq!(stage_devices(&h, "music"), [ok(0, 4), ok(1, 4)], "{h}");
    assert_eq!(h["music"]["max_songs"], 2 * SONGS);
    let mut busy = connect(&server).await;
    send_text(&mut busy, &text(9)).await;
    expect_error(&mut busy, "busy", "every device is full", 1013).await;
    for (salt, ws) in songs.iter_mut().enumerate() {
        let got = read_song(ws, false, MusicEndReason::MaxFrames).await;
        let want = direct(
            PromptIds::from_cond(prompt(salt as u32), vocab()).unwrap(),
            frames,
            Sampling::Seeded(salt as u64),
        );
        assert_eq!(got.codes, want.codes, "song {salt}");
    }
    let text = wait_metrics(&server, |t| {
        metric(t, "chorus_music_active_songs{device=\"0\"}") == 0.0
            && metric(t, "chorus_music_active_songs{device=\"1\"}") == 0.0
    })
    .await;
    for d in ["0", "1"] {
        let started = format!("chorus_music_songs_started_total{{device=\"{d}\"}}");
        assert_eq!(metric(&text, &started), 2.0, "{text}");
    }
    assert_eq!(
        metric(&text, "chorus_music_songs_refused_total{code=\"busy\"}"),
        1.0
    );
    assert_eq!(text.matches("# TYPE chorus_music_frames_total").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_device_ends_only_its_own_songs_and_the_others_keep_admitting() {
    let faults = [FaultSwitch::default(), FaultSwitch::default()];
    let server = start_devices(&[(0, faults[0].clone()), (1, faults[1].clone())], patient()).await;
    let frames = 100;
    let text = |salt: u32| start_msg(&ids_json(&prompt(salt)), frames, 7, "seeded", false);
    let mut on_0 = start_song(&server, &text(1), frames).await;
    let mut on_1 = start_song(&server, &text(2), frames).await;
    faults[0].trip();
    // Device 0's song gets an error naming its device, after whatever frames it had.
    let message = loop {
        match next_music(&mut on_0).await {
            MusicServerMessage::Frame { .. } => {}
            MusicServerMessage::Error { code, message } => {
                assert_eq!(code.as_str(), "internal", "{message}");
                break message;
            }
            other => panic!("expected frames then an error, got {other:?}"),
        }
    };
    assert!(message.contains("device 0 failed"), "{message}");
    expect_close(&mut on_0, 1011).await;
    // Device 1's song is whole and equal to its solo run.
    let got = read_song(&mut on_1, false, MusicEndReason::MaxFrames).await;
    let want = direct(
        PromptIds::from_cond(prompt(2), vocab()).unwrap(),
        frames,
        Sampling::Seeded(7),
    );
    assert_eq!(got.codes, want.codes);
    let h = healthz(&server).await;
    let devices = stage_devices(&h, "music");
    assert_eq!(devices[0].3, "failed", "{h}");
    assert!(
        h["music"]["devices"][0]["error"]
            .as_str()
            .unwrap()
            .contains("device 0 failed"),
        "{h}"
    );
    // Device 1 still admits: two more songs both go there.
    for salt in [3, 4] {
        let msg = start_msg(&ids_json(&prompt(salt)), 10, 7, "seeded", false);
        let mut ws = start_song(&server, &msg, 10).await;
        let song = read_song(&mut ws, false, MusicEndReason::MaxFrames).await;
        assert_eq!(song.codes.len(), 10);
    }
    let text = metrics(&server).await;
    assert_eq!(
        metric(&text, "chorus_music_songs_started_total{device=\"1\"}"),
        3.0
    );
}
