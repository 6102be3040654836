//! The fields of `start` (the WebSocket message and the `POST /v1/music` body), each checked on
//! its own so that an error names the field and the problem.

use chorus_music::config::{MAX_SECONDS, MIN_SECONDS};
use chorus_music::song::frames_for_seconds;
use chorus_music::Sampling;
use serde_json::{Map, Value};

use super::error::{MusicError, MusicErrorCode};

/// Fields `start` accepts (besides `type`).
const START_FIELDS: [&str; 9] = [
    "prompt_ids",
    "caption",
    "lyrics",
    "seconds",
    "max_frames",
    "seed",
    "sampling",
    "allow_end",
    "hiddens",
];
/// Longest rendering of a JSON value quoted in an error message.
const MAX_QUOTED_CHARS: usize = 40;

/// Where a song's prompt comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptSource {
    /// Ready ids: the conditional row, and the CFG row when given (else derived).
    Ids {
        cond: Vec<u32>,
        uncond: Option<Vec<u32>>,
    },
    /// Text for the server's tokenizer.
    Text { caption: String, lyrics: String },
}

/// A parsed `start` (or `POST /v1/music` body), every field checked on its own.
#[derive(Clone, Debug, PartialEq)]
pub struct StartRequest {
    pub prompt: PromptSource,
    /// Frames to emit at most: `min(seconds * 25, 9000, max_frames)`.
    pub frames: usize,
    pub sampling: Sampling,
    /// The mode's name and seed as sent (recorded in the HTTP file's metadata).
    pub sampling_name: String,
    pub seed: u64,
    pub allow_end: bool,
    /// `None`: the endpoint's default (WebSocket: no hiddens; HTTP safetensors: hiddens).
    pub hiddens: Option<bool>,
}

pub(super) fn bad_json(message: impl Into<String>) -> MusicError {
    MusicError::new(MusicErrorCode::BadJson, message)
}

/// Parses the body of `POST /v1/music`: the `start` object, its `"type": "start"` optional.
pub fn parse_start_body(body: &[u8]) -> Result<StartRequest, MusicError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad_json(format!("malformed JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(bad_json("the body must be a JSON object"));
    };
    match map.remove("type") {
        None => {}
        Some(Value::String(s)) if s == "start" => {}
        Some(other) => {
            return Err(MusicError::bad_request(format!(
                "`type` is {}: the body is a `start` request",
                quote(&other)
            )))
        }
    }
    parse_start(&map)
}

/// Parses the fields of `start` (without `type`).
pub fn parse_start(map: &Map<String, Value>) -> Result<StartRequest, MusicError> {
    if let Some(k) = map.keys().find(|k| !START_FIELDS.contains(&k.as_str())) {
        return Err(MusicError::bad_request(format!(
            "unknown field `{k}` (expected {})",
            START_FIELDS.join(", ")
        )));
    }
    let prompt = match (map.get("prompt_ids"), map.get("caption"), map.get("lyrics")) {
        (Some(ids), None, None) => prompt_ids(ids)?,
        (None, Some(c), Some(l)) => PromptSource::Text {
            caption: string(c, "caption")?,
            lyrics: string(l, "lyrics")?,
        },
        (Some(_), _, _) => {
            return Err(MusicError::bad_request(
                "give either `prompt_ids` or `caption` and `lyrics`, not both",
            ))
        }
        (None, None, None) => {
            return Err(MusicError::bad_request(
                "no prompt: give `prompt_ids`, or `caption` and `lyrics`",
            ))
        }
        (None, _, _) => {
            return Err(MusicError::bad_request(
                "`caption` and `lyrics` go together: give both",
            ))
        }
    };
    let seconds = match map.get("seconds") {
        Some(v) => v.as_f64().ok_or_else(|| {
            MusicError::bad_request(format!("`seconds` must be a number, got {}", quote(v)))
        })?,
        None => return Err(MusicError::bad_request("missing field `seconds`")),
    };
    let mut frames = frames_for_seconds(seconds).map_err(|_| {
        MusicError::bad_request(format!(
            "`seconds` is {seconds}: must be within {MIN_SECONDS}..={MAX_SECONDS}"
        ))
    })?;
    if let Some(v) = map.get("max_frames") {
        let cap = v.as_u64().filter(|&c| c >= 1).ok_or_else(|| {
            MusicError::bad_request(format!(
                "`max_frames` must be a positive integer, got {}",
                quote(v)
            ))
        })?;
        frames = frames.min(usize::try_from(cap).unwrap_or(usize::MAX));
    }
    let seed = match map.get("seed") {
        Some(v) => v.as_u64().ok_or_else(|| {
            MusicError::bad_request(format!(
                "`seed` must be a non-negative integer below 2^64, got {}",
                quote(v)
            ))
        })?,
        None => 0,
    };
    let sampling_name = match map.get("sampling") {
        Some(v) => string(v, "sampling")?,
        None => "seeded".to_string(),
    };
    let sampling = Sampling::parse(&sampling_name, seed).map_err(|_| {
        MusicError::bad_request(format!(
            "unknown `sampling` `{sampling_name}` (expected seeded, greedy or noise)"
        ))
    })?;
    Ok(StartRequest {
        prompt,
        frames,
        sampling,
        sampling_name,
        seed,
        allow_end: optional_bool(map, "allow_end")?.unwrap_or(true),
        hiddens: optional_bool(map, "hiddens")?,
    })
}

/// `[ids]` (the conditional row) or `[[cond], [uncond]]`.
fn prompt_ids(v: &Value) -> Result<PromptSource, MusicError> {
    let shape_error = || {
        MusicError::bad_request(
            "`prompt_ids` must be an array of token ids [P] or two rows [[cond], [uncond]]",
        )
    };
    let Value::Array(items) = v else {
        return Err(shape_error());
    };
    if items.iter().all(Value::is_array) && !items.is_empty() {
        let [cond, uncond] = items.as_slice() else {
            return Err(MusicError::bad_request(format!(
                "`prompt_ids` has {} rows: give one row [P] or two [[cond], [uncond]]",
                items.len()
            )));
        };
        return Ok(PromptSource::Ids {
            cond: id_row(cond, "row 0 of `prompt_ids`")?,
            uncond: Some(id_row(uncond, "row 1 of `prompt_ids`")?),
        });
    }
    if items.iter().any(Value::is_array) {
        return Err(shape_error());
    }
    Ok(PromptSource::Ids {
        cond: id_row(v, "`prompt_ids`")?,
        uncond: None,
    })
}

fn id_row(v: &Value, what: &str) -> Result<Vec<u32>, MusicError> {
    let Value::Array(items) = v else {
        return Err(MusicError::bad_request(format!("{what} must be an array")));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    MusicError::bad_request(format!(
                        "{what}: {} at position {i} is not a token id (an integer in 0..2^32)",
                        quote(x)
                    ))
                })
        })
        .collect()
}

fn string(v: &Value, field: &str) -> Result<String, MusicError> {
    v.as_str().map(str::to_owned).ok_or_else(|| {
        MusicError::bad_request(format!("`{field}` must be a string, got {}", quote(v)))
    })
}

fn optional_bool(map: &Map<String, Value>, field: &str) -> Result<Option<bool>, MusicError> {
    map.get(field)
        .map(|v| {
            v.as_bool().ok_or_else(|| {
                MusicError::bad_request(format!(
                    "`{field}` must be true or false, got {}",
                    quote(v)
                ))
            })
        })
        .transpose()
}

/// A JSON value for an error message, cut short.
fn quote(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_body_may_omit_type_but_not_change_it() {
        let req = parse_start_body(br#"{"prompt_ids":[1,2,3],"seconds":1}"#).unwrap();
        assert_eq!(req.frames, 25);
        let e = parse_start_body(br#"{"type":"cancel","prompt_ids":[1,2,3],"seconds":1}"#);
        assert_eq!(e.unwrap_err().code, MusicErrorCode::BadRequest);
    }
}
