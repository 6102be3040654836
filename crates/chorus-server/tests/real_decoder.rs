//! The server with the real slot decoder on the CPU backend (a small model of the real topology).
//!
//! The CPU backend is batch-invariant: a row's result depends neither on the bucket (row count)
//! nor on which streams share the step or which slots they hold, so every frame a server streams
//! equals a one-stream offline decode bit for bit, in one bucket or across several.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chorus_core::{Buckets, Frame, FrameDecoder, FrameInput, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_engine::{Engine, EngineConfig, EnginePool};
use chorus_mimi::checkpoint::LoadedModel;
use chorus_mimi::{DecoderOptions, SlotDecoder};
use chorus_server::loadgen::{run, LoadgenConfig, LoadgenReport, Rate};
use chorus_server::protocol::ServerMessage;
use chorus_server::{Server, ServerConfig};
use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

/// The real topology (1920 samples per frame) at a small width so that tests stay fast.
fn model() -> &'static LoadedModel {
    static MODEL: OnceLock<LoadedModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let config = chorus_mimi::random::small_config();
        chorus_mimi::random::random_model(&config, 11).unwrap()
    })
}

fn decoder(max_slots: usize, buckets: &[usize]) -> SlotDecoder<CpuBackend> {
    let m = model();
    let opts = DecoderOptions {
        max_slots,
        buckets: Buckets::new(buckets).unwrap(),
        chunk_frames: 1,
    };
    SlotDecoder::from_weights(CpuBackend::new(None).unwrap(), &m.config, &m.weights, opts).unwrap()
}

async fn start_real(max_slots: usize, buckets: &'static [usize]) -> Server {
    let engine = Engine::start(
        Box::new(move || Ok(Box::new(decoder(max_slots, buckets)) as _)),
        EngineConfig::default(),
    )
    .unwrap();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    Server::bind(
        Arc::new(EnginePool::from(engine)),
        addr,
        ServerConfig::default(),
    )
    .await
    .unwrap()
}

/// One stream decoded alone from the zero state, each step padded to `bucket` rows.
fn offline<'a>(bucket: usize, frames: impl IntoIterator<Item = FrameInput<'a>>) -> Vec<f32> {
    let mut d = decoder(bucket, &[bucket]);
    let mut out = Vec::new();
    let mut pcm = vec![0.0; FRAME_SAMPLES];
    for input in frames {
        d.step(&[Frame { slot: 0, input }], &mut pcm).unwrap();
        out.extend_from_slice(&pcm);
    }
    out
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// Four streams with different n_q, sent two frames per message; returns codes and PCM.
async fn four_streams(server: &Server) -> Vec<(Vec<Vec<u32>>, Vec<f32>)> {
    let mut tasks = Vec::new();
    for s in 0..4u64 {
        let n_q = [8, 32, 1, 5][s as usize];
        let mut ws = open(server, n_q, "f32").await;
        tasks.push(tokio::spawn(async move {
            let frames: Vec<Vec<u32>> = (0..6).map(|t| codes(s, t, n_q)).collect();
            for pair in frames.chunks(2) {
                send_codes(&mut ws, &pair.concat()).await;
            }
            let pcm = read_pcm(&mut ws, 0, 6).await;
            (frames, pcm)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_streams_equal_their_offline_decode_bit_for_bit_in_one_bucket() {
    let server = start_real(4, &[4]).await;
    for (frames, pcm) in four_streams(&server).await {
        let expected = offline(4, frames.iter().map(|c| FrameInput::Codes(c)));
        assert!(pcm == expected, "rel L2 {:e}", rel_l2(&pcm, &expected));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_buckets_streams_equal_offline_bit_for_bit() {
    let server = start_real(4, &[1, 2, 4]).await;
    for (frames, pcm) in four_streams(&server).await {
        let expected = offline(1, frames.iter().map(|c| FrameInput::Codes(c)));
        assert!(pcm == expected, "rel L2 {:e}", rel_l2(&pcm, &expected));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_and_slot_reuse_start_from_zero_state() {
    let server = start_real(1, &[1]).await;
    let mut ws = open(&server, 8, "f32").await;
    let before: Vec<Vec<u32>> = (0..3).map(|t| codes(1, t, 8)).collect();
    let after: Vec<Vec<u32>> = (0..3).map(|t| codes(2, t, 8)).collect();
    send_codes(&mut ws, &before.concat()).await;
    send_text(&mut ws, r#"{"type":"reset"}"#).await;
    send_codes(&mut ws, &after.concat()).await;
    read_pcm(&mut ws, 0, 3).await;
    assert_eq!(
        next_json(&mut ws).await,
        ServerMessage::ResetDone { next_frame: 3 }
    );
    let expected = offline(1, after.iter().map(|c| FrameInput::Codes(c)));
    assert!(read_pcm(&mut ws, 3, 3).await == expected);
    send_text(&mut ws, r#"{"type":"close"}"#).await;
    assert_eq!(
        next_json(&mut ws).await,
        ServerMessage::Closed { frames: 6 }
    );
    expect_close(&mut ws, 1000).await;
    ws.close(None).await.ok();
    // The only slot, reused by a new stream, starts clean.
    let mut ws = open(&server, 8, "f32").await;
    send_codes(&mut ws, &after.concat()).await;
    assert!(read_pcm(&mut ws, 0, 3).await == expected);
}

#[tokio::test]
async fn latent_streams_decode_like_offline() {
    let server = start_real(2, &[2]).await;
    let dim = model().config.hidden_size;
    let mut ws = connect(&server).await;
    send_text(
        &mut ws,
        r#"{"type":"open","version":1,"input":"latents","pcm":"f32"}"#,
    )
    .await;
    match next_json(&mut ws).await {
        ServerMessage::Opened { latent_dim, .. } => assert_eq!(latent_dim, dim),
        other => panic!("{other:?}"),
    }
    let frames: Vec<Vec<f32>> = (0..3)
        .map(|t| {
            (0..dim)
                .map(|i| ((i + t * 7) as f32 * 0.37).sin())
                .collect()
        })
        .collect();
    let bytes: Vec<u8> = frames
        .concat()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    ws.send(Message::Binary(bytes.into())).await.unwrap();
    let expected = offline(2, frames.iter().map(|l| FrameInput::Latent(l)));
    assert!(read_pcm(&mut ws, 0, 3).await == expected);
}

async fn loadgen(server: &Server) -> LoadgenReport {
    run(LoadgenConfig {
        input: chorus_server::loadgen::LoadInput::Codes,
        pcm: chorus_server::protocol::PcmFormat::F32,
        url: format!("ws://{}", server.local_addr()),
        streams: 3,
        duration: Duration::from_millis(400),
        rate: Rate::Max,
        n_q: 8,
        seed: 3,
        verify_streams: None,
        window: 4,
        keep_pcm_streams: 3,
        wait_ready: Duration::from_secs(5),
        api_key: None,
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_finds_every_frame_bit_exact_with_one_bucket() {
    let server = start_real(4, &[4]).await;
    let report = loadgen(&server).await;
    assert!(report.errors.is_empty(), "{}", report.summary());
    assert_eq!(report.streams_completed, 3);
    assert!(report.verify.bit_exact, "{}", report.summary());
    assert_eq!(report.verify.max_abs_diff, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_finds_every_frame_bit_exact_across_buckets() {
    let server = start_real(4, &[1, 2, 4]).await;
    let report = loadgen(&server).await;
    assert!(report.errors.is_empty(), "{}", report.summary());
    assert_eq!(report.verify.streams_checked, 3);
    assert_eq!(report.verify.pcm_streams_compared, 3);
    assert!(report.verify.bit_exact, "{}", report.summary());
    assert_eq!(report.verify.frames_mismatched, 0);
    assert_eq!(report.verify.max_abs_diff, 0.0);
}
