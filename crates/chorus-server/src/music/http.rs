//! `POST /v1/music`: one whole song, as a safetensors file or JSON codes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chorus_music::config::FRAME_RATE;
use chorus_music::song::LEVELS;
use chorus_music::SongId;
use serde::Deserialize;

use super::engine::MusicEngine;
use super::error::{MusicError, MusicErrorCode};
use super::job::{JobUpdate, MusicEvent, MusicJob, Outcome};
use super::protocol::MusicEndReason;
use super::safetensors::song_safetensors;
use super::start::{parse_start_body, StartRequest};
use crate::server::AppState;
use crate::stage::error::error_response;

/// What `POST /v1/music` returns.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum MusicFormat {
    /// `codes` int32 `[T, 8]` and `frame_hiddens` bf16 `[T, 8 * hidden]`.
    #[default]
    Safetensors,
    /// `{"song", "prompt_tokens", "frames", "reason", "codes": [[8 ints], ...]}`.
    Json,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MusicQuery {
    #[serde(default)]
    format: MusicFormat,
}

/// A finished song.
struct Song {
    id: SongId,
    prompt_tokens: usize,
    codes: Vec<i32>,
    /// bf16 bits, when requested.
    hiddens: Vec<u16>,
    reason: MusicEndReason,
}

/// The answer of `/v1/music` on a server without a music model.
pub(crate) fn not_enabled() -> Response {
    error_response(&MusicError::new(
        MusicErrorCode::NotEnabled,
        "this server runs without a music model (start it with --music-model)",
    ))
}

pub(crate) async fn generate(
    State(state): State<AppState>,
    query: Result<Query<MusicQuery>, QueryRejection>,
    body: Bytes,
) -> Response {
    let Some(music) = state.music.clone() else {
        return not_enabled();
    };
    let (job, format, req) = match submit(&state, &music, query, &body) {
        Ok(s) => s,
        Err(e) => {
            music.metrics().refused(e.code);
            return error_response(&e);
        }
    };
    let hidden_width = LEVELS * music.info().hidden_size;
    let with_hiddens = job.hiddens();
    let song = match collect(job, &music).await {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let frames = song.codes.len() / LEVELS;
    let headers = [
        ("x-chorus-song", song.id.to_string()),
        ("x-chorus-frames", frames.to_string()),
        ("x-chorus-end-reason", song.reason.as_str().to_string()),
        ("x-chorus-prompt-tokens", song.prompt_tokens.to_string()),
    ];
    match format {
        MusicFormat::Json => {
            let codes: Vec<&[i32]> = song.codes.chunks_exact(LEVELS).collect();
            let body = serde_json::json!({
                "song": song.id,
                "prompt_tokens": song.prompt_tokens,
                "frames": frames,
                "reason": song.reason.as_str(),
                "codes": codes,
            });
            (headers, Json(body)).into_response()
        }
        MusicFormat::Safetensors => {
            let meta = [
                ("seed", req.seed.to_string()),
                ("sampling", req.sampling_name.clone()),
                ("frame_rate", FRAME_RATE.to_string()),
                ("end_reason", song.reason.as_str().to_string()),
                ("prompt_tokens", song.prompt_tokens.to_string()),
            ];
            let hiddens = with_hiddens.then_some((song.hiddens.as_slice(), hidden_width));
            let bytes = song_safetensors(&song.codes, hiddens, &meta);
            let content_type = [(header::CONTENT_TYPE, "application/octet-stream")];
            (content_type, headers, bytes).into_response()
        }
    }
}

/// Parses and checks the request, then hands the song to the engine.
fn submit(
    state: &AppState,
    music: &MusicEngine,
    query: Result<Query<MusicQuery>, QueryRejection>,
    body: &[u8],
) -> Result<(MusicJob, MusicFormat, StartRequest), MusicError> {
    if *state.shutdown.borrow() {
        return Err(MusicError::new(
            MusicErrorCode::Draining,
            "the server is shutting down and starts no new songs",
        ));
    }
    let Query(query) = query.map_err(|e| {
        MusicError::bad_request(format!(
            "query: {e} (expected format=safetensors or format=json)"
        ))
    })?;
    let req = parse_start_body(body)?;
    let hiddens = match (query.format, req.hiddens) {
        (MusicFormat::Json, Some(true)) => {
            return Err(MusicError::bad_request(
                "`hiddens` needs format=safetensors: format=json carries codes only",
            ))
        }
        (MusicFormat::Json, _) => false,
        (MusicFormat::Safetensors, h) => h.unwrap_or(true),
    };
    let spec = music.prepare(&req, hiddens)?;
    Ok((music.submit(spec)?, query.format, req))
}

/// Reads the whole song.
async fn collect(mut job: MusicJob, music: &Arc<MusicEngine>) -> Result<Song, MusicError> {
    let mut song = Song {
        id: 0,
        prompt_tokens: 0,
        codes: Vec::new(),
        hiddens: Vec::new(),
        reason: MusicEndReason::End,
    };
    let mut started = false;
    loop {
        match job.next().await {
            JobUpdate::Event(MusicEvent::Started(s)) => {
                started = true;
                song.id = s.song;
                song.prompt_tokens = s.prompt_tokens;
                song.codes.reserve(s.max_frames * LEVELS);
            }
            JobUpdate::Event(MusicEvent::Frame(f)) => {
                song.codes.extend(f.codes.iter().map(|&c| c as i32));
                if let Some(h) = f.hidden {
                    song.hiddens
                        .extend(h.iter().map(|&x| half::bf16::from_f32(x).to_bits()));
                }
            }
            JobUpdate::Done(Outcome::Ended { reason, .. }) => {
                song.reason = reason.into();
                return Ok(song);
            }
            JobUpdate::Done(Outcome::Failed(e)) => {
                if !started {
                    music.metrics().refused(e.code);
                }
                return Err(e);
            }
        }
    }
}
