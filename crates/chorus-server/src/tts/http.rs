//! `POST /v1/tts`: one whole utterance, as a WAV file (16-bit or float) or an Ogg Opus file.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::engine::TtsEngine;
use super::job::{TtsEndReason, TtsEvent, TtsJob, TtsOutcome, TtsUpdate};
use super::start::parse_tts_body;
use super::{TtsError, TtsErrorCode};
use crate::http::{ogg_file, DEFAULT_OGG_BITRATE, OGG_SERIAL};
use crate::server::AppState;
use crate::stage::error::error_response;
use crate::wav::{encode_wav, WavFormat};

/// Media types that ask for Ogg Opus in `Accept`.
const OPUS_MEDIA_TYPES: [&str; 2] = ["audio/ogg", "audio/opus"];

/// What `POST /v1/tts` returns.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum TtsFileFormat {
    /// 16-bit PCM WAV, 24 kHz mono (the stream's s16 conversion).
    Wav,
    /// 32-bit float WAV: exactly the decoder's samples.
    WavF32,
    /// Ogg Opus (RFC 7845), 24 kHz mono.
    Opus,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TtsQuery {
    format: Option<TtsFileFormat>,
    /// Opus bitrate in bits per second, with format=opus.
    bitrate: Option<u32>,
}

/// A finished utterance.
struct Speech {
    id: u64,
    pcm: Vec<f32>,
    frames: usize,
    reason: TtsEndReason,
    first_audio_ms: Option<f64>,
}

/// The answer of `/v1/tts` on a server without a speech model.
pub(crate) fn not_enabled() -> Response {
    error_response(&TtsError::new(
        TtsErrorCode::NotEnabled,
        "this server runs without a speech model (start it with --tts-model)",
    ))
}

pub(crate) async fn generate(
    State(state): State<AppState>,
    query: Result<Query<TtsQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(tts) = state.tts.clone() else {
        return not_enabled();
    };
    let (job, format, bitrate) = match submit(&state, &tts, query, &headers, &body) {
        Ok(s) => s,
        Err(e) => {
            tts.metrics().refused(e.code);
            return error_response(&e);
        }
    };
    let speech = match collect(job, &tts).await {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let mut meta = vec![
        ("x-chorus-utterance", speech.id.to_string()),
        ("x-chorus-frames", speech.frames.to_string()),
        ("x-chorus-end-reason", speech.reason.as_str().to_string()),
    ];
    if let Some(ms) = speech.first_audio_ms {
        meta.push(("x-chorus-first-audio-ms", format!("{ms:.1}")));
    }
    let file = match format {
        TtsFileFormat::Wav | TtsFileFormat::WavF32 => {
            let wav = match format {
                TtsFileFormat::Wav => WavFormat::Pcm16,
                _ => WavFormat::Float32,
            };
            encode_wav(&speech.pcm, wav)
                .map(|b| ("audio/wav", b))
                .map_err(|e| e.to_string())
        }
        TtsFileFormat::Opus => match chorus_audio::OggOpusWriter::new(bitrate, OGG_SERIAL) {
            Ok(w) => ogg_file(w, speech.pcm).await.map(|b| ("audio/ogg", b)),
            Err(e) => Err(e.to_string()),
        },
    };
    match file {
        Ok((content_type, bytes)) => {
            let mut res = ([(header::CONTENT_TYPE, content_type)], bytes).into_response();
            for (name, value) in meta {
                if let Ok(v) = header::HeaderValue::from_str(&value) {
                    res.headers_mut().insert(name, v);
                }
            }
            res
        }
        Err(e) => error_response(&TtsError::internal(format!("writing the audio file: {e}"))),
    }
}

/// Parses and checks the request, then hands the utterance to the engine.
fn submit(
    state: &AppState,
    tts: &TtsEngine,
    query: Result<Query<TtsQuery>, QueryRejection>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(TtsJob, TtsFileFormat, u32), TtsError> {
    if *state.shutdown.borrow() {
        return Err(TtsError::new(
            TtsErrorCode::Draining,
            "the server is shutting down and starts no new utterances",
        ));
    }
    let Query(query) = query.map_err(|e| {
        TtsError::bad_request(format!(
            "query: {e} (expected format=wav, wav_f32 or opus, and bitrate with opus)"
        ))
    })?;
    let format = query.format.unwrap_or_else(|| {
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if OPUS_MEDIA_TYPES.iter().any(|t| accept.contains(t)) {
            TtsFileFormat::Opus
        } else {
            TtsFileFormat::Wav
        }
    });
    if query.bitrate.is_some() && format != TtsFileFormat::Opus {
        return Err(TtsError::bad_request("`bitrate` is for format=opus"));
    }
    let bitrate = query.bitrate.unwrap_or(DEFAULT_OGG_BITRATE);
    if let Err(e) = chorus_audio::OggOpusWriter::new(bitrate, OGG_SERIAL) {
        return Err(TtsError::bad_request(format!("bitrate: {e}")));
    }
    let req = parse_tts_body(body)?;
    if req.format.is_some() || req.opus_bitrate.is_some() {
        return Err(TtsError::bad_request(
            "`format` and `opus_bitrate` are for the WebSocket: POST /v1/tts takes \
             ?format=wav|wav_f32|opus (or Accept: audio/ogg) and ?bitrate=",
        ));
    }
    let spec = tts.prepare(&req)?;
    Ok((tts.submit(spec)?, format, bitrate))
}

/// Reads the whole utterance.
async fn collect(mut job: TtsJob, tts: &TtsEngine) -> Result<Speech, TtsError> {
    let mut speech = Speech {
        id: 0,
        pcm: Vec::new(),
        frames: 0,
        reason: TtsEndReason::End,
        first_audio_ms: None,
    };
    let mut started = false;
    loop {
        match job.next().await {
            TtsUpdate::Event(TtsEvent::Started(s)) => {
                started = true;
                speech.id = s.utterance;
                speech
                    .pcm
                    .reserve(s.max_frames * chorus_core::FRAME_SAMPLES);
            }
            TtsUpdate::Event(TtsEvent::Frame(f)) => speech.pcm.extend_from_slice(&f.pcm),
            TtsUpdate::Done(TtsOutcome::Ended {
                reason,
                frames,
                first_audio,
            }) => {
                speech.reason = reason;
                speech.frames = frames;
                speech.first_audio_ms = first_audio.map(|d| d.as_secs_f64() * 1e3);
                return Ok(speech);
            }
            TtsUpdate::Done(TtsOutcome::Failed(e)) => {
                if !started {
                    tts.metrics().refused(e.code);
                }
                return Err(e);
            }
        }
    }
}
