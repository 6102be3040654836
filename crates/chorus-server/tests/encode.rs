//! Audio in and out through the real server with the real slot encoder and decoder on the CPU (a
//! small model of the real topology): encode streams in s16, f32 and Opus cut into frames however
//! the client chunks them, equal to an offline encode; resets, close, bad input; `POST /v1/encode`;
//! Opus packets on decode streams and `format=ogg`; metrics and health.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use chorus_core::{AudioFrame, Buckets, FrameEncoder, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_engine::{Engine, EngineConfig, EnginePool};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{DecoderOptions, EncoderOptions, SlotDecoder, SlotEncoder};
use chorus_server::encode::{EncodeConfig, EncodeEngine, EncodePool, EncoderFactory};
use chorus_server::loadgen::http_request;
use chorus_server::protocol::{decode_pcm, PcmFormat, ServerMessage};
use chorus_server::stage::{DeviceStage, FaultSwitch};
use chorus_server::{Server, ServerConfig, Services};
use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

const N_Q: usize = 8;

fn model() -> &'static LoadedModel {
    static MODEL: OnceLock<LoadedModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        chorus_mimi::random::random_model(&chorus_mimi::random::small_config(), 11).unwrap()
    })
}

fn encoder(max_slots: usize) -> SlotEncoder<CpuBackend> {
    let m = model();
    let opts = EncoderOptions {
        max_slots,
        buckets: Buckets::new(&[1, 2, 4]).unwrap().capped(max_slots).unwrap(),
        chunk_frames: 1,
    };
    SlotEncoder::from_weights(
        CpuBackend::new(Some(2)).unwrap(),
        &m.config,
        &m.weights,
        opts,
    )
    .unwrap()
}

async fn start(encode_slots: usize) -> Server {
    let encode = (encode_slots > 0).then(|| {
        EncodeEngine::start(
            Box::new(move || Ok(Box::new(encoder(encode_slots)) as _)),
            encode_config(),
        )
        .map(|e| Arc::new(EncodePool::from(e)))
        .unwrap()
    });
    bind(encode).await
}

fn encode_config() -> EncodeConfig {
    EncodeConfig {
        max_pending_frames: 32,
        max_undelivered: 64,
    }
}

/// A server encoding on one CPU encoder per `(device, slots, fault switch)`.
async fn start_devices(devices: &[(usize, usize, FaultSwitch)]) -> Server {
    let stages = devices
        .iter()
        .map(|(device, slots, fault)| {
            let slots = *slots;
            let factory: EncoderFactory = Box::new(move || Ok(Box::new(encoder(slots)) as _));
            DeviceStage {
                device: *device,
                factory,
                fault: Some(fault.clone()),
            }
        })
        .collect();
    let pool = EncodePool::start_on(stages, encode_config()).unwrap();
    bind(Some(Arc::new(pool))).await
}

async fn bind(encode: Option<Arc<EncodePool>>) -> Server {
    let m = model();
    let engine = Engine::start(
        Box::new(move || {
            let opts = DecoderOptions {
                max_slots: 2,
                buckets: Buckets::new(&[1, 2]).unwrap(),
                chunk_frames: 1,
            };
            let d =
                SlotDecoder::from_weights(CpuBackend::new(Some(2))?, &m.config, &m.weights, opts)?;
            Ok(Box::new(d) as _)
        }),
        EngineConfig::default(),
    )
    .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let services = Services {
        encode,
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

/// A test signal per stream, already on the s16 grid so that every format carries the same audio.
fn signal(stream: usize, frames: usize) -> Vec<f32> {
    (0..frames * FRAME_SAMPLES)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            let v = 0.4 * (t * (200.0 + 90.0 * stream as f32) * std::f32::consts::TAU).sin()
                + 0.1 * (t * 2900.0 * std::f32::consts::TAU).sin();
            (v * 32768.0).round() / 32768.0
        })
        .collect()
}

/// One stream encoded alone from the zero state, frame by frame: codes `[frames][n_q]`.
fn offline(audio: &[f32], n_q: usize) -> Vec<Vec<u32>> {
    let mut e = encoder(1);
    let mut out = Vec::new();
    let mut codes = vec![0u32; e.max_codebooks()];
    for pcm in audio.chunks(FRAME_SAMPLES) {
        let mut frame = pcm.to_vec();
        frame.resize(FRAME_SAMPLES, 0.0);
        e.step(
            &[AudioFrame {
                slot: 0,
                pcm: &frame,
                n_q,
            }],
            &mut codes,
            None,
        )
        .unwrap();
        out.push(codes[..n_q].to_vec());
    }
    out
}

fn s16_bytes(samples: &[f32]) -> Vec<u8> {
    samples
        .iter()
        .flat_map(|&s| ((s * 32768.0).round() as i16).to_le_bytes())
        .collect()
}

async fn open_encode(server: &Server, extra: &str) -> Ws {
    let mut ws = connect(server).await;
    let open = format!(r#"{{"type":"open","version":1,"input":"pcm","n_q":{N_Q}{extra}}}"#);
    send_text(&mut ws, &open).await;
    match next_json(&mut ws).await {
        ServerMessage::Opened { n_q, input, .. } => {
            assert_eq!(n_q, Some(N_Q));
            assert_eq!(serde_json::to_string(&input).unwrap(), "\"pcm\"");
        }
        other => panic!("expected opened, got {other:?}"),
    }
    ws
}

/// Reads codes messages until `closed`; checks indices; returns `[frames][n_q]`.
async fn read_codes(ws: &mut Ws, latent_dim: Option<usize>) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    loop {
        match next(ws).await {
            Message::Binary(b) => {
                let want = 4 + 2 * N_Q + latent_dim.map_or(0, |d| 4 * d);
                assert_eq!(b.len(), want, "codes message size");
                assert_eq!(
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
                    out.len()
                );
                out.push(
                    b[4..4 + 2 * N_Q]
                        .chunks_exact(2)
                        .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
                        .collect(),
                );
            }
            Message::Text(t) => match serde_json::from_str::<ServerMessage>(&t).unwrap() {
                ServerMessage::Closed { frames } => {
                    assert_eq!(frames as usize, out.len());
                    expect_close(ws, 1000).await;
                    return out;
                }
                ServerMessage::ResetDone { .. } => {}
                other => panic!("unexpected {other:?}"),
            },
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn encode_streams_in_every_format_equal_an_offline_encode() {
    let server = start(3).await;
    let frames = 5;
    // s16 in odd chunks, f32 in whole frames, and a partial last frame padded at close.
    let a = signal(0, frames);
    let b = signal(1, frames);
    let mut ws_a = open_encode(&server, r#","pcm":"s16""#).await;
    let mut ws_b = open_encode(&server, r#","pcm":"f32","latents":true"#).await;
    let cut = frames * FRAME_SAMPLES - 700;
    for chunk in a[..cut].chunks(777) {
        ws_a.send(Message::Binary(s16_bytes(chunk).into()))
            .await
            .unwrap();
    }
    let f32_bytes: Vec<u8> = b.iter().flat_map(|s| s.to_le_bytes()).collect();
    // One message the server reads in several pieces.
    assert!(f32_bytes.len() > 4 * chorus_server::WS_READ_BUFFER_BYTES);
    ws_b.send(Message::Binary(f32_bytes.into())).await.unwrap();
    send_text(&mut ws_a, r#"{"type":"close"}"#).await;
    send_text(&mut ws_b, r#"{"type":"close"}"#).await;
    let got_a = read_codes(&mut ws_a, None).await;
    let got_b = read_codes(&mut ws_b, Some(model().config.hidden_size)).await;
    assert_eq!(got_a, offline(&a[..cut], N_Q), "s16 stream");
    assert_eq!(got_b, offline(&b, N_Q), "f32 stream");
    assert_eq!(
        got_a.len(),
        frames,
        "the partial frame is padded and encoded"
    );

    // Opus in: the server's frames are the client's packets decoded, so compare with that audio.
    let mut enc = chorus_audio::OpusFrameEncoder::new(64_000).unwrap();
    let mut dec = chorus_audio::OpusFrameDecoder::new().unwrap();
    let mut ws_c = open_encode(&server, r#","pcm":"opus""#).await;
    let mut heard = Vec::new();
    for f in a.chunks(FRAME_SAMPLES) {
        let mut packet = Vec::new();
        enc.encode(f, &mut packet).unwrap();
        dec.decode(&packet, &mut heard).unwrap();
        ws_c.send(Message::Binary(packet.into())).await.unwrap();
    }
    send_text(&mut ws_c, r#"{"type":"close"}"#).await;
    assert_eq!(
        read_codes(&mut ws_c, None).await,
        offline(&heard, N_Q),
        "opus stream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reset_restarts_from_zero_and_bad_input_ends_only_its_stream() {
    let server = start(4).await;
    let a = signal(2, 3);
    let mut ws = open_encode(&server, "").await;
    let mut other = open_encode(&server, "").await;
    ws.send(Message::Binary(s16_bytes(&a).into()))
        .await
        .unwrap();
    send_text(&mut ws, r#"{"type":"reset"}"#).await;
    ws.send(Message::Binary(s16_bytes(&a).into()))
        .await
        .unwrap();
    send_text(&mut ws, r#"{"type":"close"}"#).await;
    let mut codes = Vec::new();
    let mut reset_at = None;
    loop {
        match next(&mut ws).await {
            Message::Binary(b) => codes.push(
                b[4..]
                    .chunks_exact(2)
                    .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
                    .collect::<Vec<u32>>(),
            ),
            Message::Text(t) => match serde_json::from_str::<ServerMessage>(&t).unwrap() {
                ServerMessage::ResetDone { next_frame } => reset_at = Some(next_frame),
                ServerMessage::Closed { .. } => break,
                m => panic!("unexpected {m:?}"),
            },
            m => panic!("unexpected {m:?}"),
        }
    }
    assert_eq!(reset_at, Some(3));
    let once = offline(&a, N_Q);
    assert_eq!(codes[..3], once[..]);
    assert_eq!(
        codes[3..],
        once[..],
        "after the reset the stream starts from zero"
    );

    // A NaN ends that stream with bad_audio; the other stream still encodes.
    let mut bad: Vec<u8> = (0..10).flat_map(|_| 0.25f32.to_le_bytes()).collect();
    bad.extend_from_slice(&f32::NAN.to_le_bytes());
    let mut ws_f = open_encode(&server, r#","pcm":"f32""#).await;
    ws_f.send(Message::Binary(bad.into())).await.unwrap();
    expect_error(&mut ws_f, "bad_audio", 1008).await;
    other
        .send(Message::Binary(vec![1u8; 3].into()))
        .await
        .unwrap();
    expect_error(&mut other, "bad_frame_size", 1008).await;
    let mut fresh = open_encode(&server, "").await;
    fresh
        .send(Message::Binary(s16_bytes(&a).into()))
        .await
        .unwrap();
    send_text(&mut fresh, r#"{"type":"close"}"#).await;
    assert_eq!(read_codes(&mut fresh, None).await, once);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_opens_are_refused_and_a_server_without_encoder_says_so() {
    let server = start(1).await;
    for (open, code) in [
        (r#"{"type":"open","version":1,"input":"pcm"}"#, "bad_open"),
        (
            r#"{"type":"open","version":1,"input":"pcm","n_q":33}"#,
            "bad_open",
        ),
        (
            r#"{"type":"open","version":1,"input":"codes","n_q":8,"latents":true}"#,
            "bad_open",
        ),
        (
            r#"{"type":"open","version":1,"input":"codes","n_q":8,"opus_bitrate":32000}"#,
            "bad_open",
        ),
        (
            r#"{"type":"open","version":1,"input":"codes","n_q":8,"pcm":"opus","opus_bitrate":5}"#,
            "bad_open",
        ),
        (
            r#"{"type":"open","version":1,"input":"pcm","n_q":8,"opus_bitrate":32000}"#,
            "bad_open",
        ),
    ] {
        let mut ws = connect(&server).await;
        send_text(&mut ws, open).await;
        expect_error(&mut ws, code, 1008).await;
    }
    // One slot: a second encode stream is busy, the first is unaffected.
    let mut first = open_encode(&server, "").await;
    let mut ws = connect(&server).await;
    send_text(
        &mut ws,
        &format!(r#"{{"type":"open","version":1,"input":"pcm","n_q":{N_Q}}}"#),
    )
    .await;
    expect_error(&mut ws, "busy", 1013).await;
    first
        .send(Message::Binary(s16_bytes(&signal(0, 1)).into()))
        .await
        .unwrap();
    send_text(&mut first, r#"{"type":"close"}"#).await;
    assert_eq!(read_codes(&mut first, None).await.len(), 1);

    let plain = start(0).await;
    let mut ws = connect(&plain).await;
    send_text(
        &mut ws,
        &format!(r#"{{"type":"open","version":1,"input":"pcm","n_q":{N_Q}}}"#),
    )
    .await;
    expect_error(&mut ws, "not_enabled", 1008).await;
    let addr = plain.local_addr().to_string();
    let (status, _) = http_request(&addr, "POST", "/v1/encode", b"x".to_vec())
        .await
        .unwrap();
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_files_encode_over_http_and_decode_to_ogg_opus() {
    let server = start(2).await;
    let addr = server.local_addr().to_string();
    let audio = signal(3, 4);
    let mut wav = Vec::new();
    {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 24_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::new(std::io::Cursor::new(&mut wav), spec).unwrap();
        for &s in &audio {
            w.write_sample((s * 32768.0).round() as i16).unwrap();
        }
        w.finalize().unwrap();
    }
    let (status, body) = http_request(&addr, "POST", &format!("/v1/encode?n_q={N_Q}"), wav)
        .await
        .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let arr = chorus_core::npy::read_npy(&body, "answer").unwrap();
    assert_eq!(arr.shape, vec![N_Q, 4]);
    let chorus_core::npy::NpyData::Int(values) = arr.data else {
        panic!("codes must be integers")
    };
    let want = offline(&audio, N_Q);
    for t in 0..4 {
        for q in 0..N_Q {
            assert_eq!(
                values[q * 4 + t],
                i64::from(want[t][q]),
                "frame {t} level {q}"
            );
        }
    }
    let (status, body) = http_request(&addr, "POST", "/v1/encode", b"not audio".to_vec())
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("bad_audio"));
    // A float WAV holding a NaN is refused at the edge, never reaching a shared step.
    let mut nan_wav = Vec::new();
    {
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 24_000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::new(std::io::Cursor::new(&mut nan_wav), spec).unwrap();
        for i in 0..4000 {
            w.write_sample(if i == 3000 { f32::NAN } else { 0.1 })
                .unwrap();
        }
        w.finalize().unwrap();
    }
    let (status, body) = http_request(&addr, "POST", "/v1/encode", nan_wav)
        .await
        .unwrap();
    assert_eq!(status, 400);
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("bad_audio") && body.contains("not finite"),
        "{body}"
    );

    // The same codes decoded to Ogg Opus: a valid file of exactly the decoded length.
    let codes: Vec<i64> = (0..N_Q * 4).map(|i| (i * 37 % 2048) as i64).collect();
    let npy = chorus_core::npy::write_npy_i64(&[N_Q, 4], &codes);
    let (status, ogg) = http_request(
        &addr,
        "POST",
        "/v1/decode?format=ogg&bitrate=48000",
        npy.clone(),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(&ogg[..4], b"OggS");
    let back = chorus_audio::read_audio_bytes(ogg, Some("opus")).unwrap();
    assert_eq!(back.format, "ogg-opus");
    assert_eq!(back.samples.len(), 4 * FRAME_SAMPLES);
    let (status, _) = http_request(&addr, "POST", "/v1/decode?format=wav&bitrate=48000", npy)
        .await
        .unwrap();
    assert_eq!(status, 400, "bitrate without ogg is refused");

    let (_, metrics) = http_request(&addr, "GET", "/metrics", Vec::new())
        .await
        .unwrap();
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("chorus_encode_frames_total 4"),
        "{metrics}"
    );
    let (_, health) = http_request(&addr, "GET", "/healthz", Vec::new())
        .await
        .unwrap();
    let health: serde_json::Value = serde_json::from_slice(&health).unwrap();
    assert_eq!(health["encoder"]["max_streams"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decode_streams_can_receive_opus_packets() {
    let server = start(0).await;
    let codes: Vec<Vec<u32>> = (0..6).map(|t| common::codes(1, t, N_Q)).collect();
    // The exact f32 PCM of the same codes, from a second stream.
    let mut exact = open(&server, N_Q, "f32").await;
    for c in &codes {
        send_codes(&mut exact, c).await;
    }
    let pcm = read_pcm(&mut exact, 0, 6).await;
    let mut ws = connect(&server).await;
    send_text(
        &mut ws,
        &format!(r#"{{"type":"open","version":1,"input":"codes","n_q":{N_Q},"pcm":"opus","opus_bitrate":96000}}"#),
    )
    .await;
    match next_json(&mut ws).await {
        ServerMessage::Opened {
            opus_bitrate, pcm, ..
        } => {
            assert_eq!(opus_bitrate, Some(96_000));
            assert_eq!(pcm, PcmFormat::Opus);
        }
        other => panic!("expected opened, got {other:?}"),
    }
    for c in &codes {
        send_codes(&mut ws, c).await;
    }
    let mut dec = chorus_audio::OpusFrameDecoder::new().unwrap();
    let mut heard = Vec::new();
    for i in 0..6u32 {
        match next(&mut ws).await {
            Message::Binary(b) => {
                assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), i);
                assert!(
                    b.len() < 4 + 4 * FRAME_SAMPLES,
                    "an Opus packet, not raw PCM"
                );
                assert!(decode_pcm(&b, PcmFormat::F32).is_none());
                dec.decode(&b[4..], &mut heard).unwrap();
            }
            other => panic!("expected an Opus frame, got {other:?}"),
        }
    }
    // Aligned for the codec's 156-sample look-ahead, the packets carry the decoded audio.
    let delay = 156;
    let (a, b) = (&heard[delay..], &pcm[..pcm.len() - delay]);
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum();
    let corr = dot / (na * nb).sqrt();
    assert!(corr > 0.9, "correlation {corr}");
}

/// The load generator drives encode streams in every format and Opus decode streams, and reports
/// the wire bytes per stream per second.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn loadgen_measures_wire_bytes_of_every_format() {
    use chorus_server::loadgen::{run, LoadInput, LoadgenConfig, Rate};
    let server = start(4).await;
    let cases = [
        (LoadInput::Pcm, PcmFormat::S16),
        (LoadInput::Pcm, PcmFormat::F32),
        (LoadInput::Pcm, PcmFormat::Opus),
        (LoadInput::Codes, PcmFormat::Opus),
        (LoadInput::Codes, PcmFormat::S16),
    ];
    let mut sent = Vec::new();
    let mut received = Vec::new();
    for (input, pcm) in cases {
        let report = run(LoadgenConfig {
            input,
            pcm,
            url: format!("ws://{}", server.local_addr()),
            streams: 2,
            duration: std::time::Duration::from_millis(400),
            rate: Rate::Max,
            n_q: N_Q,
            seed: 5,
            verify_streams: None,
            window: 4,
            keep_pcm_streams: 0,
            wait_ready: std::time::Duration::from_secs(10),
            api_key: None,
        })
        .await
        .unwrap();
        assert!(
            report.errors.is_empty(),
            "{input:?} {pcm:?}: {:?}",
            report.errors
        );
        assert_eq!(
            report.frames_received, report.frames_sent,
            "{input:?} {pcm:?}"
        );
        assert!(report.frames_sent > 0);
        assert!(!report.verify.applicable);
        sent.push(report.wire_bytes_sent_per_stream_s);
        received.push(report.wire_bytes_received_per_stream_s);
    }
    // Audio in: s16 is 2 bytes and f32 4 bytes a sample at 24 kHz; Opus about its bitrate.
    assert!((sent[0] - 48_000.0).abs() < 1.0, "s16 {}", sent[0]);
    assert!((sent[1] - 96_000.0).abs() < 1.0, "f32 {}", sent[1]);
    assert!(
        sent[2] > 2_000.0 && sent[2] < 6_000.0,
        "opus in {}",
        sent[2]
    );
    // Codes out: a 4-byte index and 2 bytes a code, 12.5 times a second.
    assert!((received[0] - 12.5 * (4.0 + 2.0 * N_Q as f64)).abs() < 1e-6);
    // Opus out at the default 32 kbit/s, against 48,050 bytes/s of s16.
    assert!(
        received[3] > 2_000.0 && received[3] < 6_000.0,
        "opus out {}",
        received[3]
    );
    assert!((received[4] - 12.5 * 3844.0).abs() < 1e-6);
}

async fn get_json(server: &Server, path: &str) -> serde_json::Value {
    let addr = server.local_addr().to_string();
    let (status, body) = http_request(&addr, "GET", path, vec![]).await.unwrap();
    assert_eq!(status, 200, "{path}");
    serde_json::from_slice(&body).unwrap()
}

/// Sends `frames` frames of stream `salt`'s signal and reads their codes (the stream stays open).
async fn encode_frames(ws: &mut Ws, audio: &[f32]) -> Vec<Vec<u32>> {
    let bytes: Vec<u8> = audio.iter().flat_map(|s| s.to_le_bytes()).collect();
    ws.send(Message::Binary(bytes.into())).await.unwrap();
    let mut out = Vec::new();
    while out.len() < audio.len() / FRAME_SAMPLES {
        match next(ws).await {
            Message::Binary(b) => out.push(
                b[4..4 + 2 * N_Q]
                    .chunks_exact(2)
                    .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
                    .collect(),
            ),
            other => panic!("expected codes, got {other:?}"),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encode_streams_spread_over_devices_and_a_failed_device_ends_only_its_own() {
    let faults = [FaultSwitch::default(), FaultSwitch::default()];
    let server = start_devices(&[(0, 1, faults[0].clone()), (3, 2, faults[1].clone())]).await;
    // Free slots (1, 2): the first stream goes to device 3, the second ties and goes to device 0,
    // the third to device 3; a fourth finds every device full.
    let mut ws: Vec<Ws> = Vec::new();
    for _ in 0..3 {
        ws.push(open_encode(&server, r#","pcm":"f32""#).await);
    }
    let h = get_json(&server, "/healthz").await;
    let devices = h["encoder"]["devices"].as_array().unwrap().clone();
    let live: Vec<(u64, u64)> = devices
        .iter()
        .map(|d| (d["device"].as_u64().unwrap(), d["live"].as_u64().unwrap()))
        .collect();
    assert_eq!(live, [(0, 1), (3, 2)], "{h}");
    assert_eq!(h["encoder"]["max_streams"], 3);
    let mut busy = connect(&server).await;
    let open = format!(r#"{{"type":"open","version":1,"input":"pcm","n_q":{N_Q}}}"#);
    send_text(&mut busy, &open).await;
    match next_json(&mut busy).await {
        ServerMessage::Error { code, .. } => assert_eq!(code.as_str(), "busy"),
        other => panic!("expected busy, got {other:?}"),
    }
    // Every stream's codes equal the one-device encode of its audio.
    let audio: Vec<Vec<f32>> = (0..3).map(|i| signal(i, 6)).collect();
    let half = 3 * FRAME_SAMPLES;
    for (i, w) in ws.iter_mut().enumerate() {
        let got = encode_frames(w, &audio[i][..half]).await;
        assert_eq!(got, offline(&audio[i][..half], N_Q), "stream {i}");
    }
    let text = String::from_utf8(
        http_request(&server.local_addr().to_string(), "GET", "/metrics", vec![])
            .await
            .unwrap()
            .1,
    )
    .unwrap();
    for line in [
        "chorus_encode_live_streams{device=\"0\"} 1",
        "chorus_encode_live_streams{device=\"3\"} 2",
        "chorus_encode_frames_total{device=\"0\"} 3",
        "chorus_encode_frames_total{device=\"3\"} 6",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }
    assert_eq!(text.matches("# TYPE chorus_encode_frames_total").count(), 1);

    // Device 0 fails: its stream (the second) ends with an error naming it; the others go on.
    faults[0].trip();
    let bytes: Vec<u8> = audio[1][half..]
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect();
    ws[1].send(Message::Binary(bytes.into())).await.unwrap();
    let failed = loop {
        match next(&mut ws[1]).await {
            Message::Text(t) => break serde_json::from_str::<ServerMessage>(&t).unwrap(),
            Message::Binary(_) => {}
            other => panic!("expected an error, got {other:?}"),
        }
    };
    match failed {
        ServerMessage::Error { message, .. } => {
            assert!(message.contains("device 0 failed"), "{message}")
        }
        other => panic!("expected an error, got {other:?}"),
    }
    for i in [0, 2] {
        let got = encode_frames(&mut ws[i], &audio[i][half..]).await;
        assert_eq!(
            got,
            offline(&audio[i], N_Q)[3..],
            "stream {i} after device 0 failed"
        );
        send_text(&mut ws[i], r#"{"type":"close"}"#).await;
        match next_json(&mut ws[i]).await {
            ServerMessage::Closed { frames } => assert_eq!(frames, 6),
            other => panic!("expected closed, got {other:?}"),
        }
        expect_close(&mut ws[i], 1000).await;
    }
    let h = get_json(&server, "/healthz").await;
    let d0 = &h["encoder"]["devices"][0];
    assert_eq!(d0["state"], "failed", "{h}");
    assert!(d0["error"].as_str().unwrap().contains("device 0"), "{h}");
    // New streams go to the device still running, once its slots are free.
    let deadline = tokio::time::Instant::now() + WAIT;
    while get_json(&server, "/healthz").await["encoder"]["devices"][1]["live"] != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "device 3 kept its streams"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut again = open_encode(&server, r#","pcm":"f32""#).await;
    assert_eq!(
        encode_frames(&mut again, &audio[0][..half]).await,
        offline(&audio[0][..half], N_Q)
    );
}
