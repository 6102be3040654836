//! The client side of the model endpoints' protocol: `start`/`cancel` text messages and the
//! `POST` body, and the field readers every endpoint's `start` uses, each naming the field and
//! the problem in its error.

use chorus_lm::Sampling;
use serde_json::{Map, Value};

use super::error::{StageError, StageErrorCode};

/// Longest rendering of a JSON value quoted in an error message.
const MAX_QUOTED_CHARS: usize = 40;

/// Client-to-server messages of a model endpoint's WebSocket.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientMessage<T> {
    Start(Box<T>),
    Cancel,
}

pub(crate) fn bad_json(message: impl Into<String>) -> StageError {
    StageError::new(StageErrorCode::BadJson, message)
}

/// Parses one WebSocket text message; `start` reads the fields of a `start` (without `type`).
pub(crate) fn parse_message<T>(
    text: &str,
    start: impl FnOnce(&Map<String, Value>) -> Result<T, StageError>,
) -> Result<ClientMessage<T>, StageError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| bad_json(format!("malformed JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(bad_json("a message must be a JSON object"));
    };
    let kind = match map.remove("type") {
        Some(Value::String(s)) => s,
        _ => return Err(bad_json("message has no string field `type`")),
    };
    match kind.as_str() {
        "start" => Ok(ClientMessage::Start(Box::new(start(&map)?))),
        "cancel" if map.is_empty() => Ok(ClientMessage::Cancel),
        "cancel" => Err(bad_json("`cancel` takes no fields besides `type`")),
        other => Err(StageError::new(
            StageErrorCode::UnknownMessage,
            format!("unknown message type `{other}` (expected start or cancel)"),
        )),
    }
}

/// Parses a `POST` body: the `start` object, its `"type": "start"` optional.
pub(crate) fn parse_body<T>(
    body: &[u8],
    start: impl FnOnce(&Map<String, Value>) -> Result<T, StageError>,
) -> Result<T, StageError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| bad_json(format!("malformed JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(bad_json("the body must be a JSON object"));
    };
    match map.remove("type") {
        None => {}
        Some(Value::String(s)) if s == "start" => {}
        Some(other) => {
            return Err(StageError::bad_request(format!(
                "`type` is {}: the body is a `start` request",
                quote(&other)
            )))
        }
    }
    start(&map)
}

/// Refuses a field not in `allowed`.
pub(crate) fn known_fields(map: &Map<String, Value>, allowed: &[&str]) -> Result<(), StageError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(StageError::bad_request(format!(
            "unknown field `{k}` (expected {})",
            allowed.join(", ")
        ))),
        None => Ok(()),
    }
}

pub(crate) fn string(v: &Value, field: &str) -> Result<String, StageError> {
    v.as_str().map(str::to_owned).ok_or_else(|| {
        StageError::bad_request(format!("`{field}` must be a string, got {}", quote(v)))
    })
}

pub(crate) fn optional_bool(
    map: &Map<String, Value>,
    field: &str,
) -> Result<Option<bool>, StageError> {
    map.get(field)
        .map(|v| {
            v.as_bool().ok_or_else(|| {
                StageError::bad_request(format!(
                    "`{field}` must be true or false, got {}",
                    quote(v)
                ))
            })
        })
        .transpose()
}

/// An optional positive integer field.
pub(crate) fn optional_positive(
    map: &Map<String, Value>,
    field: &str,
) -> Result<Option<u64>, StageError> {
    map.get(field)
        .map(|v| {
            v.as_u64().filter(|&n| n >= 1).ok_or_else(|| {
                StageError::bad_request(format!(
                    "`{field}` must be a positive integer, got {}",
                    quote(v)
                ))
            })
        })
        .transpose()
}

/// `sampling` (seeded, greedy or noise; default seeded) with `seed` (default 0): the mode and
/// the name as sent.
pub(crate) fn sampling(map: &Map<String, Value>) -> Result<(Sampling, String, u64), StageError> {
    let seed = match map.get("seed") {
        Some(v) => v.as_u64().ok_or_else(|| {
            StageError::bad_request(format!(
                "`seed` must be a non-negative integer below 2^64, got {}",
                quote(v)
            ))
        })?,
        None => 0,
    };
    let name = match map.get("sampling") {
        Some(v) => string(v, "sampling")?,
        None => "seeded".to_string(),
    };
    let mode = Sampling::parse(&name, seed).map_err(|_| {
        StageError::bad_request(format!(
            "unknown `sampling` `{name}` (expected seeded, greedy or noise)"
        ))
    })?;
    Ok((mode, name, seed))
}

/// A JSON value for an error message, cut short.
pub(crate) fn quote(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}
