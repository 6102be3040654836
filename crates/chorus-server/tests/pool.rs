//! A server on several fake devices, through the real HTTP server on loopback: per-device health
//! and metrics, placement, and a failed device that closes only its own streams.

mod common;

use chorus_engine::fake::DeviceFault;
use chorus_server::loadgen::http_request;
use chorus_server::protocol::ServerMessage;
use chorus_server::Server;
use common::*;
use serde_json::Value;

async fn get(server: &Server, path: &str) -> (u16, String) {
    let (status, body) = http_request(&server.local_addr().to_string(), "GET", path, vec![])
        .await
        .unwrap();
    (status, String::from_utf8(body).unwrap())
}

async fn health(server: &Server) -> (u16, Value) {
    let (status, body) = get(server, "/healthz").await;
    (status, serde_json::from_str(&body).unwrap())
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_report_every_device() {
    let server = start_pool(vec![(0, fake(2, 2)), (1, fake(3, 3))]).await;
    // Free (2, 3): the first stream goes to device 1, the second ties and goes to device 0.
    let mut a = open(&server, 2, "f32").await;
    let mut b = open(&server, 2, "f32").await;
    let frames = [codes(1, 0, 2), codes(1, 1, 2)];
    for ws in [&mut a, &mut b] {
        send_codes(ws, &frames.concat()).await;
        assert_eq!(read_pcm(ws, 0, 2).await, reference(&frames));
    }
    let (status, h) = health(&server).await;
    assert_eq!(status, 200);
    assert_eq!(h["status"], "ok");
    assert_eq!(
        (&h["max_streams"], &h["live_streams"], &h["free_slots"]),
        (&Value::from(5), &Value::from(2), &Value::from(3))
    );
    assert_eq!(h["decoder"], "2 x fake");
    let devices = h["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for (d, want) in devices.iter().zip([(0, 2, 1, 1), (1, 3, 1, 2)]) {
        let got = (
            d["device"].as_u64().unwrap(),
            d["max_streams"].as_u64().unwrap(),
            d["live_streams"].as_u64().unwrap(),
            d["free_slots"].as_u64().unwrap(),
        );
        assert_eq!(got, want, "{d}");
        assert_eq!(d["state"], "ok");
        assert_eq!(d["name"], "fake");
        assert!(d["error"].is_null());
    }
    let (_, text) = get(&server, "/metrics").await;
    for line in [
        "chorus_live_streams{device=\"0\"} 1",
        "chorus_live_streams{device=\"1\"} 1",
        "chorus_free_slots{device=\"1\"} 2",
        "chorus_frames_decoded_total{device=\"0\"} 2",
        "chorus_frames_decoded_total{device=\"1\"} 2",
        "chorus_streams_opened_total{device=\"1\"} 1",
        "chorus_batch_size_count{device=\"0\"} 2",
    ] {
        assert!(has_line(&text, line), "{line} missing from\n{text}");
    }
    assert_eq!(
        text.matches("# TYPE chorus_frames_decoded_total").count(),
        1
    );
    // Three more fill every slot; the next is busy, counted outside any device.
    let _more = [
        open(&server, 1, "f32").await,
        open(&server, 1, "f32").await,
        open(&server, 1, "f32").await,
    ];
    let mut c = connect(&server).await;
    send_text(&mut c, &open_msg(1, "f32")).await;
    expect_error(&mut c, "busy", 1013).await;
    let (_, text) = get(&server, "/metrics").await;
    assert!(
        has_line(&text, "chorus_errors_total{kind=\"busy\"} 1"),
        "{text}"
    );
    server.pool().drain();
    let (status, h) = health(&server).await;
    assert_eq!((status, h["status"].as_str()), (503, Some("draining")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_device_closes_its_streams_and_the_others_go_on() {
    let fault = DeviceFault::default();
    let broken = chorus_engine::fake::FakeOptions {
        fault: Some(fault.clone()),
        ..fake(2, 2)
    };
    let server = start_pool(vec![(0, fake(2, 2)), (1, broken)]).await;
    // Ties go to device 0 first: a on 0, b on 1.
    let mut a = open(&server, 1, "f32").await;
    let mut b = open(&server, 1, "f32").await;
    let mut sent_a = Vec::new();
    for (s, ws) in [(0, &mut a), (1, &mut b)] {
        send_codes(ws, &codes(s, 0, 1)).await;
        read_pcm(ws, 0, 1).await;
    }
    sent_a.push(codes(0, 0, 1));
    fault.trip();
    send_codes(&mut b, &codes(1, 1, 1)).await;
    match next_json(&mut b).await {
        ServerMessage::Error { code, message } => {
            assert_eq!(code.as_str(), "decode_failed");
            assert!(message.contains("device 1 failed"), "{message}");
        }
        other => panic!("expected decode_failed, got {other:?}"),
    }
    expect_close(&mut b, 1011).await;
    // The stream on device 0 goes on, and a new stream lands there too.
    for t in 1..4 {
        send_codes(&mut a, &codes(0, t, 1)).await;
        sent_a.push(codes(0, t, 1));
        let got = read_pcm(&mut a, t as u32, 1).await;
        assert_eq!(got, reference(&sent_a)[t as usize * 1920..]);
    }
    let mut fresh = open(&server, 1, "f32").await;
    send_codes(&mut fresh, &codes(7, 0, 1)).await;
    assert_eq!(
        read_pcm(&mut fresh, 0, 1).await,
        reference(&[codes(7, 0, 1)])
    );
    let (status, h) = health(&server).await;
    assert_eq!((status, h["status"].as_str()), (200, Some("ok")));
    let dev1 = &h["devices"][1];
    assert_eq!(dev1["state"], "failed");
    assert!(
        dev1["error"].as_str().unwrap().contains("device lost"),
        "{dev1}"
    );
    assert_eq!(
        h["free_slots"], 0,
        "device 0 is full and device 1 takes none"
    );
    let (_, text) = get(&server, "/metrics").await;
    for line in [
        "chorus_errors_total{device=\"1\",kind=\"decode_failed\"} 1",
        "chorus_free_slots{device=\"1\"} 0",
        "chorus_frames_decoded_total{device=\"0\"} 5",
    ] {
        assert!(has_line(&text, line), "{line} missing from\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_every_device_failed_is_not_ready() {
    let fault = DeviceFault::default();
    let broken = chorus_engine::fake::FakeOptions {
        fault: Some(fault.clone()),
        ..fake(1, 1)
    };
    let server = start_pool(vec![(0, broken)]).await;
    let mut ws = open(&server, 1, "f32").await;
    fault.trip();
    send_codes(&mut ws, &codes(0, 0, 1)).await;
    expect_error(&mut ws, "decode_failed", 1011).await;
    let (status, h) = health(&server).await;
    assert_eq!((status, h["status"].as_str()), (503, Some("failed")));
}
