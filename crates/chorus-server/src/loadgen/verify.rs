//! The exactness check: each stream's codes decoded again as a whole file by the server.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::http::http_request_keyed;
use super::play::StreamResult;
use super::report::Verify;
use super::{frame_hash, LoadgenConfig, Rng};
use crate::npy::write_codes;

/// Whole-file decodes running at once.
const VERIFY_CONCURRENCY: usize = 16;
/// Retries of a request refused as busy.
const VERIFY_BUSY_RETRIES: usize = 100;
/// Pause between those retries.
const VERIFY_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long verification waits for a server's other streams (another load generator's, which
/// ends within seconds of this one) to end before it checks anyway.
const VERIFY_QUIET_WAIT: Duration = Duration::from_secs(30);
/// Pause between two looks at a server's open streams.
const VERIFY_QUIET_POLL: Duration = Duration::from_millis(250);

/// Waits, up to [`VERIFY_QUIET_WAIT`], until no stream is open on `addr`: whole-file decodes
/// sent while another load generator still plays would add their load to its measurement.
async fn wait_until_quiet(addr: &str, key: Option<&str>) {
    let until = tokio::time::Instant::now() + VERIFY_QUIET_WAIT;
    while tokio::time::Instant::now() < until {
        match super::server_stats::live_streams(addr, key).await {
            Some(live) if live > 0.0 => tokio::time::sleep(VERIFY_QUIET_POLL).await,
            _ => return,
        }
    }
}

/// Checks streams against a whole-file decode on the server that served them (stream `s` on
/// `addrs[s % addrs.len()]`).
pub(crate) async fn verify(
    config: &LoadgenConfig,
    addrs: &[String],
    results: &mut [StreamResult],
) -> Verify {
    if config.input != super::LoadInput::Codes || config.pcm != crate::protocol::PcmFormat::F32 {
        return Verify {
            method: "not checked: only f32 PCM of code streams has an exact reference",
            applicable: false,
            ..Verify::default()
        };
    }
    let limit = config.verify_streams.unwrap_or(usize::MAX);
    let chosen: Vec<usize> = (0..results.len())
        .filter(|&s| results[s].completed && !results[s].hashes.is_empty())
        .take(limit)
        .collect();
    for addr in addrs {
        wait_until_quiet(addr, config.api_key.as_deref()).await;
    }
    let gate = Arc::new(Semaphore::new(VERIFY_CONCURRENCY));
    let mut tasks = Vec::with_capacity(chosen.len());
    for &s in &chosen {
        let r = &results[s];
        let mut rng = Rng::for_stream(config.seed, s);
        let mut codes = Vec::with_capacity(r.hashes.len() * config.n_q);
        let mut frame = Vec::with_capacity(config.n_q);
        for _ in 0..r.hashes.len() {
            rng.frame(config.n_q, r.codebook_size, &mut frame);
            codes.extend_from_slice(&frame);
        }
        let body = write_codes(config.n_q, &codes);
        let (addr, gate) = (addrs[s % addrs.len()].clone(), gate.clone());
        let key = config.api_key.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            for _ in 0..VERIFY_BUSY_RETRIES {
                let path = "/v1/decode?format=f32";
                match http_request_keyed(&addr, "POST", path, body.clone(), key.as_deref()).await {
                    Ok((200, pcm)) => return Ok(pcm),
                    Ok((503, _)) => tokio::time::sleep(VERIFY_RETRY_PAUSE).await,
                    Ok((status, _)) => return Err(format!("verify_http_{status}")),
                    Err(_) => return Err("verify_connect".to_string()),
                }
            }
            Err("verify_busy".to_string())
        }));
    }
    let mut v = Verify {
        method: "server whole-file decode (POST /v1/decode?format=f32), 64-bit hash per frame",
        applicable: true,
        ..Verify::default()
    };
    let (mut diff_sq, mut ref_sq) = (0f64, 0f64);
    for (&s, task) in chosen.iter().zip(tasks) {
        let r = &mut results[s];
        let pcm = match task.await {
            Ok(Ok(pcm)) => pcm,
            Ok(Err(e)) => {
                r.errors.push(e);
                continue;
            }
            Err(_) => {
                r.errors.push("verify_task".into());
                continue;
            }
        };
        let samples: Vec<f32> = pcm
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        v.streams_checked += 1;
        let frames = pcm.chunks(chorus_core::FRAME_SAMPLES * std::mem::size_of::<f32>());
        let mut checked = 0u64;
        for (got, offline) in r.hashes.iter().zip(frames) {
            checked += 1;
            if *got != frame_hash(offline) {
                v.frames_mismatched += 1;
            }
        }
        if !r.pcm.is_empty() {
            v.pcm_streams_compared += 1;
            for (a, b) in r.pcm.iter().zip(&samples) {
                let d = (*a as f64 - *b as f64).abs();
                v.max_abs_diff = v.max_abs_diff.max(d);
                diff_sq += d * d;
                ref_sq += (*b as f64) * (*b as f64);
            }
        }
        // Frames the offline decode lacks count as mismatches too.
        v.frames_mismatched += r.hashes.len() as u64 - checked;
        v.frames_checked += r.hashes.len() as u64;
    }
    v.bit_exact = v.frames_checked > 0 && v.frames_mismatched == 0;
    if ref_sq > 0.0 {
        v.rel_l2 = (diff_sq / ref_sq).sqrt();
    }
    v
}
