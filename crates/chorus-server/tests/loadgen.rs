//! The load generator against a server with the fake decoder.

mod common;

use std::time::Duration;

use chorus_server::loadgen::{run, LoadgenConfig, Rate};
use common::*;

fn config(server: &chorus_server::Server, streams: usize, rate: Rate) -> LoadgenConfig {
    LoadgenConfig {
        input: chorus_server::loadgen::LoadInput::Codes,
        pcm: chorus_server::protocol::PcmFormat::F32,
        url: format!("ws://{}", server.local_addr()),
        streams,
        duration: Duration::from_millis(800),
        rate,
        n_q: 8,
        seed: 42,
        verify_streams: None,
        window: 4,
        keep_pcm_streams: 2,
        wait_ready: Duration::from_secs(5),
        api_key: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_streams_all_complete_and_match_the_whole_file_decode() {
    let server = start(4, 4).await;
    let report = run(config(&server, 3, Rate::Realtime)).await.unwrap();
    assert_eq!(report.streams_completed, 3, "{}", report.summary());
    assert_eq!(report.frames_sent, 30);
    assert_eq!(report.frames_received, 30);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.verify.bit_exact);
    assert_eq!(report.verify.frames_checked, 30);
    assert!(report.latency_ms.p50 <= report.latency_ms.p99);
    assert!(report.latency_ms.p99 <= report.latency_ms.max);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["verify"]["bit_exact"], true);
    let server = report.server.expect("server stats");
    assert_eq!(server.total.frames_decoded, 30);
    assert_eq!(server.decoder, "fake");
    assert!(server.total.steps >= 8 && server.total.mean_batch >= 1.0);
    let devices: Vec<&str> = server.devices.iter().map(|d| d.device.as_str()).collect();
    assert_eq!(devices, ["0"], "a one-device server reports device 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_spread_over_two_servers_and_each_is_checked_on_its_own() {
    let (a, b) = (start(4, 4).await, start(4, 4).await);
    let mut cfg = config(&a, 6, Rate::Realtime);
    cfg.url = format!("ws://{},http://{}", a.local_addr(), b.local_addr());
    let report = run(cfg).await.unwrap();
    assert_eq!(report.streams_completed, 6, "{}", report.summary());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.verify.bit_exact, "{}", report.summary());
    assert_eq!(report.verify.frames_checked, 60);
    assert!(
        report.server.is_none(),
        "one server's stats stand for one server only"
    );
    let addrs: Vec<String> = report.servers.iter().map(|s| s.addr.clone()).collect();
    assert_eq!(
        addrs,
        [a.local_addr().to_string(), b.local_addr().to_string()]
    );
    // Round-robin: three streams of ten frames on each, plus each server's whole-file decodes.
    for s in &report.servers {
        assert!(s.total.frames_decoded >= 30, "{s:?}");
    }
    assert!(report.summary().contains(&b.local_addr().to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_server_list_is_an_error() {
    let server = start(1, 1).await;
    let mut cfg = config(&server, 1, Rate::Realtime);
    cfg.url = " , ".into();
    let e = run(cfg).await.unwrap_err().to_string();
    assert!(e.contains("no server"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_capacity_are_reported_busy() {
    let server = start(2, 2).await;
    // Real-time streams hold their slots for the whole second, long after the third is refused.
    let mut cfg = config(&server, 3, Rate::Realtime);
    cfg.duration = Duration::from_millis(1000);
    let report = run(cfg).await.unwrap();
    assert_eq!(report.streams_opened, 2, "{}", report.summary());
    assert_eq!(report.errors.get("busy"), Some(&1));
    assert!(report.verify.bit_exact, "{}", report.summary());
    assert_eq!(report.frames_received, report.frames_sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mismatch_with_the_offline_decode_is_detected() {
    // A decoder that ignores resets keeps state across streams in the same slot, so the
    // whole-file decode (a new stream) cannot match what was streamed.
    let server = start_with(
        chorus_engine::fake::FakeOptions {
            ignore_reset: true,
            ..fake(1, 1)
        },
        Default::default(),
        Default::default(),
    )
    .await;
    let mut cfg = config(&server, 1, Rate::Max);
    cfg.duration = Duration::from_millis(200);
    let report = run(cfg).await.unwrap();
    assert_eq!(report.streams_completed, 1, "{}", report.summary());
    assert!(!report.verify.bit_exact);
    assert!(report.verify.frames_mismatched > 0, "{}", report.summary());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reaches_every_request_of_a_keyed_server() {
    const KEY: &str = "k-load";
    let config = chorus_server::ServerConfig {
        api_keys: Some(chorus_server::gate::ApiKeys::from_keys(&[KEY]).unwrap()),
        ..Default::default()
    };
    let server = start_with(fake(2, 2), Default::default(), config).await;
    let mut cfg = super_config(&server);
    cfg.api_key = Some(KEY.into());
    let report = run(cfg).await.unwrap();
    assert_eq!(report.streams_completed, 2, "{}", report.summary());
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // The whole-file decodes and the metrics scrapes presented the key too.
    assert!(report.verify.bit_exact && report.verify.frames_checked == 20);
    assert!(report.server.is_some(), "the keyed /metrics was scraped");
    let report = run(super_config(&server)).await.unwrap();
    assert_eq!(
        report.errors.get("unauthorized"),
        Some(&2),
        "{:?}",
        report.errors
    );
}

fn super_config(server: &chorus_server::Server) -> LoadgenConfig {
    config(server, 2, Rate::Realtime)
}
