//! Plain HTTP endpoints: whole-file decode, health, metrics.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_core::{FRAME_MS, FRAME_SAMPLES};
use chorus_engine::{StreamEvent, StreamInput};
use serde::Deserialize;

use crate::npy::read_codes;
use crate::protocol::{ErrorCode, PROTOCOL_VERSION};
use crate::server::AppState;
use crate::stage::MemberStatus;
use crate::wav::{encode_wav, WavFormat};

/// Output of `POST /v1/decode`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DecodeFormat {
    /// 16-bit mono WAV.
    #[default]
    Wav,
    /// Raw little-endian f32 samples, exactly the decoder's output.
    F32,
    /// An Ogg Opus file (RFC 7845), 24 kHz mono, at `bitrate` bits per second.
    Ogg,
}

/// Default bitrate of `format=ogg` (bits per second).
pub(crate) const DEFAULT_OGG_BITRATE: u32 = 64_000;
/// Serial number of the one logical stream of an Ogg Opus answer.
pub(crate) const OGG_SERIAL: u32 = 0x4368_6f72;
/// Longest audio one `POST /v1/decode` answers (3 hours, an f32 answer of about 1 GB): the answer,
/// not the body, is what costs memory, and one-byte codes of one codebook would let an 8 MiB
/// body ask for 64 GB of samples.
pub const MAX_DECODE_SECONDS: usize = 3 * 60 * 60;
/// [`MAX_DECODE_SECONDS`] in frames.
pub const MAX_DECODE_FRAMES: usize = MAX_DECODE_SECONDS * 1000 / FRAME_MS as usize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecodeQuery {
    #[serde(default)]
    format: DecodeFormat,
    /// Opus bitrate of `format=ogg`.
    bitrate: Option<u32>,
}

pub(crate) fn error(
    status: StatusCode,
    state: &AppState,
    code: ErrorCode,
    message: String,
) -> Response {
    state.engine.metrics().errors.inc(code.as_str());
    let body = serde_json::json!({ "code": code.as_str(), "message": message });
    (status, Json(body)).into_response()
}

/// Decodes a whole `.npy` codes file through the engine, like a stream that sends every frame.
/// `pcm` as a whole Ogg Opus file through `w`; a long file is seconds of Opus encoding, so it
/// runs off the async threads that serve streams.
pub(crate) async fn ogg_file(
    mut w: chorus_audio::OggOpusWriter,
    pcm: Vec<f32>,
) -> Result<Vec<u8>, String> {
    tokio::task::spawn_blocking(move || {
        w.push(&pcm).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()))
}

pub(crate) async fn decode(
    State(state): State<AppState>,
    query: Result<Query<DecodeQuery>, QueryRejection>,
    body: Bytes,
) -> Response {
    let engine = &state.engine;
    let info = engine.info();
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &state,
                ErrorCode::BadOpen,
                format!("query: {e} (expected format=wav, f32 or ogg, and bitrate with ogg)"),
            )
        }
    };
    if query.bitrate.is_some() && query.format != DecodeFormat::Ogg {
        return error(
            StatusCode::BAD_REQUEST,
            &state,
            ErrorCode::BadOpen,
            "`bitrate` is for format=ogg".into(),
        );
    }
    let ogg = match query.format {
        DecodeFormat::Ogg => {
            let bitrate = query.bitrate.unwrap_or(DEFAULT_OGG_BITRATE);
            match chorus_audio::OggOpusWriter::new(bitrate, OGG_SERIAL) {
                Ok(w) => Some(w),
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &state,
                        ErrorCode::BadOpen,
                        format!("bitrate: {e}"),
                    )
                }
            }
        }
        _ => None,
    };
    let file = match read_codes(&body, info.codebook_size, info.max_codebooks) {
        Ok(f) => f,
        Err(e @ chorus_core::Error::CodeOutOfRangeAt { .. }) => {
            return error(
                StatusCode::BAD_REQUEST,
                &state,
                ErrorCode::CodeOutOfRange,
                e.to_string(),
            )
        }
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &state,
                ErrorCode::BadFile,
                e.to_string(),
            )
        }
    };
    if file.frames > MAX_DECODE_FRAMES {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &state,
            ErrorCode::TooLarge,
            format!(
                "the file holds {} frames ({} s of audio); one request decodes at most {MAX_DECODE_FRAMES} frames ({MAX_DECODE_SECONDS} s): split it",
                file.frames,
                file.frames * FRAME_MS as usize / 1000
            ),
        );
    }
    let mut stream = match engine.open(StreamInput::Codes { n_q: file.n_q }) {
        Ok(s) => s,
        Err(e) => {
            let code = ErrorCode::from_stream_error(&e);
            let status = match code {
                ErrorCode::Busy | ErrorCode::Draining => StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::BadOpen => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            return error(status, &state, code, e.to_string());
        }
    };
    // Keep within both queue bounds so that this request is never cut off as too fast or slow.
    let window = engine
        .config()
        .max_pending_frames
        .min(engine.config().max_undelivered_frames);
    let frames = file.frames;
    let mut pcm = Vec::with_capacity(frames * FRAME_SAMPLES);
    let (mut sent, mut got) = (0usize, 0usize);
    while got < frames {
        if sent < frames && sent - got < window {
            let n = (window - (sent - got)).min(frames - sent);
            let chunk = &file.codes[sent * file.n_q..(sent + n) * file.n_q];
            if let Err(e) = stream.submit_codes(chunk) {
                let code = ErrorCode::from_stream_error(&e);
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &state,
                    code,
                    e.to_string(),
                );
            }
            sent += n;
        }
        match stream.recv().await {
            StreamEvent::Pcm { samples, .. } => {
                pcm.extend_from_slice(&samples);
                got += 1;
            }
            StreamEvent::Failed(e) => {
                // Counted by the engine already.
                let body = serde_json::json!({
                    "code": ErrorCode::from_stream_error(&e).as_str(),
                    "message": e.to_string(),
                });
                return (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response();
            }
            StreamEvent::ResetDone { .. } | StreamEvent::Finished { .. } => {}
        }
    }
    drop(stream);
    match query.format {
        DecodeFormat::Ogg => {
            let written = match ogg {
                Some(w) => ogg_file(w, pcm).await,
                None => Err("no Ogg writer".to_string()),
            };
            match written {
                Ok(bytes) => ([(header::CONTENT_TYPE, "audio/ogg")], bytes).into_response(),
                Err(e) => error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &state,
                    ErrorCode::Internal,
                    format!("ogg opus: {e}"),
                ),
            }
        }
        DecodeFormat::F32 => {
            let bytes: Vec<u8> = pcm.iter().flat_map(|s| s.to_le_bytes()).collect();
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        DecodeFormat::Wav => match encode_wav(&pcm, WavFormat::Pcm16) {
            Ok(bytes) => ([(header::CONTENT_TYPE, "audio/wav")], bytes).into_response(),
            Err(e) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &state,
                ErrorCode::Internal,
                e.to_string(),
            ),
        },
    }
}

/// Readiness and every device's slots: `200` while at least one device is healthy and the server
/// is not draining, else `503`.
pub(crate) async fn healthz(State(state): State<AppState>) -> Response {
    let pool = &state.engine;
    let st = pool.status();
    let (status, label) = match (st.ready(), st.draining) {
        (true, _) => (StatusCode::OK, "ok"),
        (false, true) => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
        (false, false) => (StatusCode::SERVICE_UNAVAILABLE, "failed"),
    };
    let devices: Vec<serde_json::Value> = st
        .devices
        .iter()
        .map(|d| {
            serde_json::json!({
                "device": d.device,
                "name": d.name,
                "state": if d.healthy() { "ok" } else { "failed" },
                "max_streams": d.max_streams,
                "live_streams": d.live_streams,
                "free_slots": d.free_slots,
                "error": d.failure,
            })
        })
        .collect();
    let body = serde_json::json!({
        "status": label,
        "protocol_version": PROTOCOL_VERSION,
        "decoder": pool.info().description,
        "max_streams": st.max_streams(),
        "live_streams": st.live_streams(),
        "free_slots": st.free_slots(),
        "devices": devices,
        "encoder": state.encode.as_ref().map(|e| serde_json::json!({
            "encoder": e.info().description,
            "max_streams": e.info().max_streams,
            "live_streams": e.live_streams(),
            "devices": devices_json(&e.devices()),
        })),
        "music": state.music.as_ref().map(|m| serde_json::json!({
            "max_songs": m.info().max_songs,
            "devices": devices_json(&m.devices()),
        })),
        "tts": state.tts.as_ref().map(|t| serde_json::json!({
            "max_utterances": t.info().max_utterances,
            "device": t.info().device,
            "devices": devices_json(&t.devices()),
        })),
        "stt": state.stt.as_ref().map(|e| serde_json::json!({
            "max_streams": e.info().max_streams,
            "live_streams": e.active(),
            "device": e.info().device,
            "devices": devices_json(&e.devices()),
        })),
    });
    (status, Json(body)).into_response()
}

/// One stage's devices for `/healthz`.
fn devices_json(devices: &[MemberStatus]) -> Vec<serde_json::Value> {
    devices.iter().map(MemberStatus::to_json).collect()
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let mut text = state.engine.render_metrics();
    state.gate.metrics.render(&mut text);
    if let Some(music) = &state.music {
        music.render_metrics(&mut text);
    }
    if let Some(tts) = &state.tts {
        tts.render_metrics(&mut text);
    }
    if let Some(stt) = &state.stt {
        stt.render_metrics(&mut text);
    }
    if let Some(enc) = &state.encode {
        enc.render_metrics(&mut text);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
