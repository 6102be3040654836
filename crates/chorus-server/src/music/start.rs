//! The fields of `start` (the WebSocket message and the `POST /v1/music` body), each checked on
//! its own so that an error names the field and the problem.

use chorus_music::config::{MAX_SECONDS, MIN_SECONDS};
use chorus_music::song::frames_for_seconds;
use chorus_music::Sampling;
use serde_json::{Map, Value};

use super::error::MusicError;
use crate::stage::fields::{
    known_fields, optional_bool, optional_positive, parse_body, quote, sampling, string,
};

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

/// Parses the body of `POST /v1/music`: the `start` object, its `"type": "start"` optional.
pub fn parse_start_body(body: &[u8]) -> Result<StartRequest, MusicError> {
    parse_body(body, parse_start)
}

/// Parses the fields of `start` (without `type`).
pub fn parse_start(map: &Map<String, Value>) -> Result<StartRequest, MusicError> {
    known_fields(map, &START_FIELDS)?;
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
    if let Some(cap) = optional_positive(map, "max_frames")? {
        frames = frames.min(usize::try_from(cap).unwrap_or(usize::MAX));
    }
    let (sampling, sampling_name, seed) = sampling(map)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::music::MusicErrorCode;

    #[test]
    fn the_http_body_may_omit_type_but_not_change_it() {
        let req = parse_start_body(br#"{"prompt_ids":[1,2,3],"seconds":1}"#).unwrap();
        assert_eq!(req.frames, 25);
        let e = parse_start_body(br#"{"type":"cancel","prompt_ids":[1,2,3],"seconds":1}"#);
        assert_eq!(e.unwrap_err().code, MusicErrorCode::BadRequest);
    }
}
