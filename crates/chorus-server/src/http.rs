//! Plain HTTP endpoints: whole-file decode, health, metrics.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_core::FRAME_SAMPLES;
use chorus_engine::{StreamEvent, StreamInput};
use serde::Deserialize;

use crate::npy::read_codes;
use crate::protocol::{ErrorCode, PROTOCOL_VERSION};
use crate::server::AppState;
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
}

#[derive(Debug, Deserialize)]
pub(crate) struct DecodeQuery {
    #[serde(default)]
    format: DecodeFormat,
}

fn error(status: StatusCode, state: &AppState, code: ErrorCode, message: String) -> Response {
    state.engine.metrics().errors.inc(code.as_str());
    let body = serde_json::json!({ "code": code.as_str(), "message": message });
    (status, Json(body)).into_response()
}

/// Decodes a whole `.npy` codes file through the engine, like a stream that sends every frame.
pub(crate) async fn decode(
    State(state): State<AppState>,
    Query(query): Query<DecodeQuery>,
    body: Bytes,
) -> Response {
    let engine = &state.engine;
    let info = engine.info();
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

pub(crate) async fn healthz(State(state): State<AppState>) -> Response {
    let engine = &state.engine;
    let st = engine.status();
    let status = if st.draining || st.stopped {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = serde_json::json!({
        "status": if st.stopped { "stopped" } else if st.draining { "draining" } else { "ok" },
        "protocol_version": PROTOCOL_VERSION,
        "decoder": engine.info().description,
        "max_streams": engine.info().max_slots,
        "live_streams": st.live_streams,
        "free_slots": st.free_slots,
    });
    (status, Json(body)).into_response()
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let st = state.engine.status();
    let mut text = state
        .engine
        .metrics()
        .render(st.live_streams, st.free_slots);
    if let Some(music) = &state.music {
        music.metrics().render(&mut text);
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
