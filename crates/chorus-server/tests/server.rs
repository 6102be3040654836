//! The server on a loopback port, driven by a real WebSocket client.

mod common;

use std::time::Duration;

use chorus_engine::fake::Poison;
use chorus_engine::EngineConfig;
use chorus_server::loadgen::http_request;
use chorus_server::npy::write_codes;
use chorus_server::protocol::{decode_pcm, to_s16, PcmFormat, ServerMessage};
use chorus_server::ServerConfig;
use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_get_their_own_pcm_in_order() {
    let server = start(6, 4).await;
    let mut tasks = Vec::new();
    for s in 0..6u64 {
        let mut ws = open(&server, 1 + s as usize * 3, "f32").await;
        tasks.push(tokio::spawn(async move {
            let n_q = 1 + s as usize * 3;
            let frames: Vec<Vec<u32>> = (0..10).map(|t| codes(s, t, n_q)).collect();
            // One frame per message, then three frames in one message.
            for f in &frames[..7] {
                send_codes(&mut ws, f).await;
            }
            send_codes(&mut ws, &frames[7..].concat()).await;
            let pcm = read_pcm(&mut ws, 0, 10).await;
            assert_eq!(pcm, reference(&frames), "stream {s}");
            send_text(&mut ws, r#"{"type":"close"}"#).await;
            assert_eq!(
                next_json(&mut ws).await,
                ServerMessage::Closed { frames: 10 }
            );
            expect_close(&mut ws, 1000).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (status, body) = http_request(&server.local_addr().to_string(), "GET", "/metrics", vec![])
        .await
        .unwrap();
    let text = String::from_utf8(body).unwrap();
    assert_eq!(status, 200);
    // A one-device server labels every engine series `device="0"`.
    assert!(
        text.contains("chorus_frames_decoded_total{device=\"0\"} 60"),
        "{text}"
    );
    assert!(text.contains("chorus_streams_opened_total{device=\"0\"} 6"));
    assert!(text.contains("chorus_batch_size_count{device=\"0\"}"));
    assert!(text.contains("chorus_step_seconds_bucket{device=\"0\",le=\"+Inf\"}"));
    assert!(text.contains("chorus_queue_delay_seconds_count{device=\"0\"} 60"));
    assert!(text.contains("chorus_free_slots{device=\"0\"} 6"));
}

#[tokio::test]
async fn s16_output_is_the_clamped_rounded_float_output() {
    let server = start(1, 1).await;
    let mut ws = open(&server, 2, "s16").await;
    let frames = vec![codes(4, 0, 2), codes(4, 1, 2)];
    send_codes(&mut ws, &frames.concat()).await;
    let expected: Vec<i16> = reference(&frames).into_iter().map(to_s16).collect();
    let mut got = Vec::new();
    for i in 0..2 {
        let Message::Binary(b) = next(&mut ws).await else {
            panic!("expected PCM")
        };
        assert_eq!(b.len(), 4 + 1920 * 2);
        assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), i);
        got.extend(
            b[4..]
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]])),
        );
    }
    assert_eq!(got, expected);
}

#[tokio::test]
async fn reset_makes_later_frames_decode_from_zero_state() {
    let server = start(2, 2).await;
    let mut ws = open(&server, 4, "f32").await;
    let before: Vec<Vec<u32>> = (0..3).map(|t| codes(1, t, 4)).collect();
    let after: Vec<Vec<u32>> = (5..7).map(|t| codes(1, t, 4)).collect();
    send_codes(&mut ws, &before.concat()).await;
    send_text(&mut ws, r#"{"type":"reset"}"#).await;
    send_codes(&mut ws, &after.concat()).await;
    assert_eq!(read_pcm(&mut ws, 0, 3).await, reference(&before));
    assert_eq!(
        next_json(&mut ws).await,
        ServerMessage::ResetDone { next_frame: 3 }
    );
    assert_eq!(read_pcm(&mut ws, 3, 2).await, reference(&after));
}

/// A bad-input case: what it is, the messages a client sends, the error code expected.
type Case = (&'static str, Box<dyn Fn() -> Vec<Message>>, &'static str);

/// Each bad input closes its own stream with a named error while a bystander keeps streaming
/// and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_closes_only_the_offending_stream() {
    let server = start(3, 2).await;
    let mut bystander = open(&server, 2, "f32").await;
    let mut sent = Vec::new();
    let cases: Vec<Case> = vec![
        (
            "malformed JSON",
            Box::new(|| vec![Message::Text("{oops".into())]),
            "bad_json",
        ),
        (
            "unknown message",
            Box::new(|| vec![Message::Text(r#"{"type":"sing"}"#.into())]),
            "unknown_message",
        ),
        (
            "data before open",
            Box::new(|| vec![Message::Binary(vec![0u8; 4].into())]),
            "not_open",
        ),
        (
            "reset before open",
            Box::new(|| vec![Message::Text(r#"{"type":"reset"}"#.into())]),
            "not_open",
        ),
        (
            "unsupported version",
            Box::new(|| {
                vec![Message::Text(
                    r#"{"type":"open","version":9,"input":"codes","n_q":2}"#.into(),
                )]
            }),
            "unsupported_version",
        ),
        (
            "n_q out of range",
            Box::new(|| vec![Message::Text(open_msg(40, "f32").into())]),
            "bad_open",
        ),
        (
            "wrong frame size",
            Box::new(|| {
                vec![
                    Message::Text(open_msg(2, "f32").into()),
                    Message::Binary(vec![1u8, 0, 2].into()),
                ]
            }),
            "bad_frame_size",
        ),
        (
            "code out of range",
            Box::new(|| {
                vec![
                    Message::Text(open_msg(2, "f32").into()),
                    Message::Binary(vec![1u8, 0, 0x00, 0x08].into()),
                ]
            }),
            "code_out_of_range",
        ),
        (
            "second open",
            Box::new(|| {
                vec![
                    Message::Text(open_msg(2, "f32").into()),
                    Message::Text(open_msg(2, "f32").into()),
                ]
            }),
            "already_open",
        ),
        (
            "garbage after open",
            Box::new(|| {
                vec![
                    Message::Text(open_msg(2, "f32").into()),
                    Message::Text("[1,2".into()),
                ]
            }),
            "bad_json",
        ),
    ];
    for (t, (what, messages, code)) in cases.iter().enumerate() {
        let frame = codes(9, t as u64, 2);
        send_codes(&mut bystander, &frame).await;
        sent.push(frame);
        let mut ws = connect(&server).await;
        let messages = messages();
        let opens = messages
            .iter()
            .filter(|m| matches!(m, Message::Text(t) if t.contains("\"version\":1")))
            .count();
        for m in messages {
            ws.send(m).await.unwrap();
        }
        if opens > 0 && *code != "bad_open" {
            assert!(
                matches!(next_json(&mut ws).await, ServerMessage::Opened { .. }),
                "{what}"
            );
        }
        expect_error(&mut ws, code, 1008).await;
        let got = read_pcm(&mut bystander, t as u32, 1).await;
        assert_eq!(got, reference(&sent)[t * 1920..], "{what}");
    }
    let (_, body) = http_request(&server.local_addr().to_string(), "GET", "/metrics", vec![])
        .await
        .unwrap();
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("chorus_errors_total{kind=\"bad_json\"} 2"),
        "{text}"
    );
    assert!(text.contains("chorus_errors_total{kind=\"code_out_of_range\"} 1"));
    assert!(text.contains("chorus_errors_total{kind=\"not_open\"} 2"));
}

#[tokio::test]
async fn a_full_server_answers_busy_at_once() {
    let server = start(2, 2).await;
    let a = open(&server, 1, "f32").await;
    let _b = open(&server, 1, "f32").await;
    let mut c = connect(&server).await;
    send_text(&mut c, &open_msg(1, "f32")).await;
    expect_error(&mut c, "busy", 1013).await;
    drop(a);
    // The slot comes back once the server notices the disconnect.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut d = connect(&server).await;
        send_text(&mut d, &open_msg(1, "f32")).await;
        match next_json(&mut d).await {
            ServerMessage::Opened { .. } => break,
            ServerMessage::Error { code, .. } if code.as_str() == "busy" => {
                assert!(tokio::time::Instant::now() < deadline, "slot never freed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_disconnect_mid_stream_frees_the_slot_for_a_clean_start() {
    let server = start(1, 1).await;
    let mut ws = open(&server, 3, "f32").await;
    for t in 0..4 {
        send_codes(&mut ws, &codes(2, t, 3)).await;
    }
    read_pcm(&mut ws, 0, 1).await;
    drop(ws);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut ws = loop {
        let mut ws = connect(&server).await;
        send_text(&mut ws, &open_msg(3, "f32")).await;
        match next_json(&mut ws).await {
            ServerMessage::Opened { .. } => break ws,
            _ => {
                assert!(tokio::time::Instant::now() < deadline, "slot never freed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let frames = vec![codes(3, 0, 3), codes(3, 1, 3)];
    send_codes(&mut ws, &frames.concat()).await;
    assert_eq!(read_pcm(&mut ws, 0, 2).await, reference(&frames));
}

#[tokio::test]
async fn a_client_sending_too_far_ahead_is_cut_off() {
    let mut opts = fake(2, 2);
    opts.step_delay = Duration::from_millis(100);
    let config = EngineConfig {
        max_pending_frames: 4,
        ..EngineConfig::default()
    };
    let server = start_with(opts, config, ServerConfig::default()).await;
    let mut ws = open(&server, 1, "f32").await;
    // 24 frames at once against a bound of 4 and one decode per 100 ms.
    for t in 0..8 {
        send_codes(&mut ws, &[t, t + 1, t + 2]).await;
    }
    // PCM of the frames taken before the overflow may come first.
    loop {
        match next(&mut ws).await {
            Message::Binary(_) => continue,
            Message::Text(t) => {
                let msg: ServerMessage = serde_json::from_str(&t).unwrap();
                assert!(
                    matches!(msg, ServerMessage::Error { code, .. } if code.as_str() == "queue_full"),
                    "{msg:?}"
                );
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    expect_close(&mut ws, 1008).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_cut_off_and_frees_its_slot() {
    let config = EngineConfig {
        max_undelivered_frames: 4,
        ..EngineConfig::default()
    };
    let server_config = ServerConfig {
        write_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    };
    let server = start_with(fake(2, 2), config, server_config).await;
    let addr = server.local_addr().to_string();
    let mut slow = open(&server, 1, "f32").await;
    let mut good = open(&server, 1, "f32").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut t = 0u32;
    let mut good_frames = Vec::new();
    loop {
        // The slow client keeps sending, never reads; the good one reads everything.
        let batch: Vec<u32> = (0..8).map(|i| (t * 8 + i) % 2000).collect();
        if tokio::time::timeout(Duration::from_millis(50), send_codes(&mut slow, &batch))
            .await
            .is_err()
        {
            // The server stopped reading it: its socket is full.
        }
        good_frames.push(vec![t % 2000]);
        send_codes(&mut good, &[t % 2000]).await;
        read_pcm(&mut good, t, 1).await;
        t += 1;
        let (_, body) = http_request(&addr, "GET", "/healthz", vec![])
            .await
            .unwrap();
        let health: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if health["live_streams"] == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "slow client never cut off"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (_, body) = http_request(&addr, "GET", "/metrics", vec![])
        .await
        .unwrap();
    let text = String::from_utf8(body).unwrap();
    // Counted by the engine (with its device) or by the connection's write timeout (without).
    assert!(
        text.lines()
            .any(|l| l.starts_with("chorus_errors_total{") && l.contains("kind=\"slow_consumer\"")),
        "{text}"
    );
    // The good stream lost nothing.
    send_codes(&mut good, &[7]).await;
    good_frames.push(vec![7]);
    let last = read_pcm(&mut good, t, 1).await;
    assert_eq!(last, reference(&good_frames)[t as usize * 1920..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_open_streams_then_closes_them_going_away() {
    let mut opts = fake(3, 3);
    opts.step_delay = Duration::from_millis(20);
    let server = start_with(opts, EngineConfig::default(), ServerConfig::default()).await;
    let addr = server.local_addr();
    let mut streams = Vec::new();
    for s in 0..2u64 {
        let mut ws = open(&server, 2, "f32").await;
        let frames: Vec<Vec<u32>> = (0..6).map(|t| codes(s, t, 2)).collect();
        send_codes(&mut ws, &frames.concat()).await;
        streams.push((ws, frames));
    }
    // A first PCM frame shows that the server has taken the whole message.
    let mut firsts = Vec::new();
    for (ws, _) in streams.iter_mut() {
        firsts.push(read_pcm(ws, 0, 1).await);
    }
    let shutdown = tokio::spawn(server.shutdown());
    for ((ws, frames), first) in streams.iter_mut().zip(firsts) {
        let mut pcm = first;
        pcm.extend(read_pcm(ws, 1, 5).await);
        assert_eq!(pcm, reference(frames));
        assert_eq!(next_json(ws).await, ServerMessage::Closed { frames: 6 });
        expect_close(ws, 1001).await;
    }
    assert_eq!(shutdown.await.unwrap().unwrap(), 0, "no connection was cut");
    let url = format!("ws://{addr}/v1/stream");
    assert!(
        tokio_tungstenite::connect_async(url).await.is_err(),
        "listener closed"
    );
}

#[tokio::test]
async fn a_failed_decode_step_ends_only_the_streams_in_it() {
    let mut opts = fake(2, 1);
    opts.poison = Poison::Backend;
    let server = start_with(opts, EngineConfig::default(), ServerConfig::default()).await;
    let mut good = open(&server, 1, "f32").await;
    let mut bad = open(&server, 1, "f32").await;
    send_codes(&mut bad, &[chorus_engine::fake::POISON_CODE]).await;
    expect_error(&mut bad, "decode_failed", 1011).await;
    send_codes(&mut good, &[5]).await;
    assert_eq!(read_pcm(&mut good, 0, 1).await, reference(&[vec![5]]));
}

#[tokio::test]
async fn whole_file_decode_returns_wav_and_exact_floats() {
    let server = start(2, 2).await;
    let addr = server.local_addr().to_string();
    let frames: Vec<Vec<u32>> = (0..5).map(|t| codes(8, t, 3)).collect();
    let body = write_codes(3, &frames.concat());
    let (status, wav) = http_request(&addr, "POST", "/v1/decode", body.clone())
        .await
        .unwrap();
    assert_eq!(status, 200);
    let reader = hound::WavReader::new(std::io::Cursor::new(wav)).unwrap();
    let spec = reader.spec();
    assert_eq!(
        (spec.channels, spec.sample_rate, spec.bits_per_sample),
        (1, 24_000, 16)
    );
    let samples: Vec<i16> = reader.into_samples().map(|s| s.unwrap()).collect();
    let expected = reference(&frames);
    assert_eq!(
        samples,
        expected.iter().map(|&s| to_s16(s)).collect::<Vec<_>>()
    );
    let (status, raw) = http_request(&addr, "POST", "/v1/decode?format=f32", body)
        .await
        .unwrap();
    assert_eq!(status, 200);
    let floats: Vec<f32> = raw
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(floats, expected);

    let (status, err) = http_request(&addr, "POST", "/v1/decode", b"not npy".to_vec())
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&err).contains("bad_file"));
    let (status, err) = http_request(&addr, "POST", "/v1/decode", write_codes(1, &[3, 4000]))
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&err).contains("code_out_of_range"));
}

#[tokio::test]
async fn healthz_reports_slots_and_draining() {
    let server = start(2, 2).await;
    let addr = server.local_addr().to_string();
    let _ws = open(&server, 1, "f32").await;
    let (status, body) = http_request(&addr, "GET", "/healthz", vec![])
        .await
        .unwrap();
    assert_eq!(status, 200);
    let health: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["live_streams"], 1);
    assert_eq!(health["free_slots"], 1);
    assert_eq!(health["max_streams"], 2);
    server.pool().drain();
    let (status, _) = http_request(&addr, "GET", "/healthz", vec![])
        .await
        .unwrap();
    assert_eq!(status, 503);
}

#[tokio::test]
async fn pcm_frames_decode_helper_rejects_wrong_sizes() {
    assert!(decode_pcm(&[0u8; 10], PcmFormat::F32).is_none());
}

#[tokio::test]
async fn a_connection_that_never_opens_is_told_and_closed() {
    let config = ServerConfig {
        open_timeout: Duration::from_millis(100),
        ..ServerConfig::default()
    };
    let server = start_with(fake(1, 1), EngineConfig::default(), config).await;
    let mut idle = connect(&server).await;
    expect_error(&mut idle, "open_timeout", 1008).await;
    // It held no slot: the only one is free.
    let _ws = open(&server, 1, "f32").await;
}

/// The local and peer ports of socket `fd` (IPv4), if it is one.
fn socket_ports(fd: i32) -> Option<(u16, u16)> {
    let port =
        |getter: unsafe extern "C" fn(i32, *mut libc::sockaddr, *mut libc::socklen_t) -> i32| {
            // SAFETY: the getter writes at most `len` bytes into the zeroed sockaddr_in we own.
            unsafe {
                let mut addr: libc::sockaddr_in = std::mem::zeroed();
                let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                let ok = getter(fd, &mut addr as *mut _ as *mut libc::sockaddr, &mut len) == 0;
                (ok && addr.sin_family == libc::AF_INET as libc::sa_family_t)
                    .then(|| u16::from_be(addr.sin_port))
            }
        };
    Some((port(libc::getsockname)?, port(libc::getpeername)?))
}

/// Whether TCP_NODELAY is set on socket `fd`.
fn nodelay(fd: i32) -> bool {
    let mut on: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes one c_int into `on`, which we own, and its length into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &mut on as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    rc == 0 && on != 0
}

#[tokio::test]
async fn the_server_turns_nagle_off_on_every_connection() {
    // Regression: with Nagle's algorithm on, a PCM frame written right behind another waited for
    // the client's delayed ACK (up to 40 ms on Linux), which showed as a p99 of 30 to 50 ms
    // under load. The server's end of a loopback connection lives in this test's process, so its
    // option can be read directly.
    let server = start(2, 2).await;
    let server_port = server.local_addr().port();
    let client = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let client_port = client.local_addr().unwrap().port();
    let mut found = None;
    for _ in 0..200 {
        found = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|&fd| socket_ports(fd) == Some((server_port, client_port)));
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fd = found.expect("the server accepted the connection");
    assert!(nodelay(fd), "TCP_NODELAY is set on the accepted socket");
    assert!(
        !client.nodelay().unwrap(),
        "the raw test client kept the default"
    );
}
