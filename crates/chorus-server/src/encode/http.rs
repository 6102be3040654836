//! `POST /v1/encode`: a whole audio file (WAV, FLAC, MP3, Ogg Vorbis or Ogg Opus, any rate and
//! channel count) to `[n_q, T]` int64 codes in `.npy`, through the same engine as encode streams.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use chorus_audio::DecodeOptions;
use chorus_core::FRAME_SAMPLES;
use serde::Deserialize;

use super::engine::{EncodeError, EncodeEvent};
use super::metrics::error_code;
use crate::http::error;
use crate::protocol::ErrorCode;
use crate::server::AppState;

/// Codebooks of a request that names none (or the model's count, when smaller).
const DEFAULT_N_Q: usize = 8;
/// Longest audio one request may hold once decoded (about 170 MB of f32 samples); enforced while
/// decoding, in source frames.
pub const MAX_ENCODE_SECONDS: usize = 30 * 60;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EncodeQuery {
    n_q: Option<usize>,
    /// Accept a file that is cut short, encoding what decoded.
    #[serde(default)]
    allow_truncated: bool,
}

fn status_of(e: &EncodeError) -> (StatusCode, ErrorCode) {
    match error_code(e) {
        "busy" => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Busy),
        "draining" => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Draining),
        "encode_failed" => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::EncodeFailed),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
    }
}

pub(crate) async fn encode(
    State(state): State<AppState>,
    query: Result<Query<EncodeQuery>, QueryRejection>,
    body: Bytes,
) -> Response {
    let Some(engine) = state.encode.clone() else {
        return error(
            StatusCode::NOT_FOUND,
            &state,
            ErrorCode::NotEnabled,
            "this server does not encode (started with --encode-streams 0, or its checkpoint has no encoder)".into(),
        );
    };
    let Query(query) = match query {
        Ok(q) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &state,
                ErrorCode::BadOpen,
                format!("query: {e} (expected n_q and allow_truncated=true|false)"),
            )
        }
    };
    let info = engine.info().clone();
    let n_q = query.n_q.unwrap_or(DEFAULT_N_Q.min(info.max_codebooks));
    if n_q == 0 || n_q > info.max_codebooks {
        return error(
            StatusCode::BAD_REQUEST,
            &state,
            ErrorCode::BadOpen,
            format!("n_q {n_q} is outside 1..={}", info.max_codebooks),
        );
    }
    // The slot first: at most `--encode-streams` files are decoded at once.
    let mut stream = match engine.open(n_q, false) {
        Ok(s) => s,
        Err(e) => {
            let (status, code) = status_of(&e);
            return error(status, &state, code, e.to_string());
        }
    };
    let len = body.len();
    // The length limit is checked as packets decode: a small file that expands to hours (a FLAC
    // of silence, a header that lies) stops there instead of filling memory.
    let options = DecodeOptions::max_seconds(MAX_ENCODE_SECONDS as f64);
    // Decoding a file is CPU work of its own: off the async threads.
    let decoded = tokio::task::spawn_blocking(move || {
        chorus_audio::read_audio_bytes_with(body.to_vec(), None, &options)
    })
    .await;
    let audio = match decoded {
        Ok(Ok(a)) => a,
        Ok(Err(e @ chorus_audio::Error::TooLong { .. })) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &state,
                ErrorCode::BadAudio,
                format!(
                    "request body ({len} bytes): {e}: one request encodes at most {MAX_ENCODE_SECONDS} s"
                ),
            )
        }
        Ok(Err(e)) => {
            return error(
                StatusCode::BAD_REQUEST,
                &state,
                ErrorCode::BadAudio,
                format!("request body ({len} bytes): {e}"),
            )
        }
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &state,
                ErrorCode::Internal,
                e.to_string(),
            )
        }
    };
    if let Some(missing) = &audio.incomplete {
        if !query.allow_truncated {
            return error(
                StatusCode::BAD_REQUEST,
                &state,
                ErrorCode::BadAudio,
                format!("the audio is cut short or damaged ({missing}); pass allow_truncated=true to encode the {:.2} s that decoded", audio.duration_secs()),
            );
        }
    }
    if let Some(i) = audio.samples.iter().position(|v| !v.is_finite()) {
        return error(
            StatusCode::BAD_REQUEST,
            &state,
            ErrorCode::BadAudio,
            format!("sample {i} of the decoded audio is not finite"),
        );
    }
    let mut samples = audio.samples;
    let frames = samples.len().div_ceil(FRAME_SAMPLES);
    samples.resize(frames * FRAME_SAMPLES, 0.0);
    // Within both queue bounds, so that this request is never refused as too fast or too slow.
    let window = engine
        .config()
        .max_pending_frames
        .min(engine.config().max_undelivered)
        .max(1);
    let mut codes = vec![0i64; n_q * frames];
    let (mut sent, mut got) = (0usize, 0usize);
    while got < frames {
        if sent < frames && sent - got < window {
            let n = (window - (sent - got)).min(frames - sent);
            if let Err(e) =
                stream.submit(&samples[sent * FRAME_SAMPLES..(sent + n) * FRAME_SAMPLES])
            {
                let (status, code) = status_of(&e);
                return error(status, &state, code, e.to_string());
            }
            sent += n;
        }
        match stream.recv().await {
            EncodeEvent::Codes {
                index, codes: c, ..
            } => {
                let t = index as usize;
                for (q, &v) in c.iter().enumerate() {
                    codes[q * frames + t] = i64::from(v);
                }
                got += 1;
            }
            EncodeEvent::Failed(e) => {
                let (status, code) = status_of(&e);
                return error(status, &state, code, e.to_string());
            }
            EncodeEvent::ResetDone { .. } | EncodeEvent::Finished { .. } => {}
        }
    }
    drop(stream);
    let bytes = chorus_core::npy::write_npy_i64(&[n_q, frames], &codes);
    ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
}
