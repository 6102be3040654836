//! `/v1/stt`'s JSON messages (specified in `docs/protocol.md`, "Speech to text"): what the client
//! sends (`start`, `flush`, `reset`, `end`, `cancel`) parsed field by field, and what the server
//! sends.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::protocol::PcmFormat;
use crate::stage::conn::Parse;
use crate::stage::error::{StageError, StageErrorCode};
use crate::stage::fields::{bad_json, known_fields, string, ClientMessage};

/// Fields `start` accepts (besides `type`).
const START_FIELDS: [&str; 1] = ["format"];

/// A parsed `start`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SttStart {
    /// The binary messages' audio (default s16).
    pub format: PcmFormat,
}

/// Client-to-server text messages of `/v1/stt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SttClientMessage {
    Start(SttStart),
    Flush,
    Reset,
    End,
    Cancel,
}

/// Parses one text message.
pub fn parse_stt_message(text: &str) -> Result<SttClientMessage, StageError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| bad_json(format!("malformed JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(bad_json("a message must be a JSON object"));
    };
    let kind = match map.remove("type") {
        Some(Value::String(s)) => s,
        _ => return Err(bad_json("message has no string field `type`")),
    };
    let bare = |m: SttClientMessage| {
        if map.is_empty() {
            Ok(m)
        } else {
            Err(bad_json(format!("`{kind}` takes no fields besides `type`")))
        }
    };
    match kind.as_str() {
        "start" => Ok(SttClientMessage::Start(parse_start(&map)?)),
        "flush" => bare(SttClientMessage::Flush),
        "reset" => bare(SttClientMessage::Reset),
        "end" => bare(SttClientMessage::End),
        "cancel" => bare(SttClientMessage::Cancel),
        other => Err(StageError::new(
            StageErrorCode::UnknownMessage,
            format!("unknown message type `{other}` (expected start, flush, reset, end or cancel)"),
        )),
    }
}

/// The parser the shared `start` wait takes: a stream's other messages before `start` are
/// `not_started`.
pub(crate) const PARSE_START: Parse<SttStart> = |text| match parse_stt_message(text)? {
    SttClientMessage::Start(s) => Ok(ClientMessage::Start(Box::new(s))),
    SttClientMessage::Cancel => Ok(ClientMessage::Cancel),
    m => Err(StageError::new(
        StageErrorCode::NotStarted,
        format!("{} before `start`", name(&m)),
    )),
};

fn name(m: &SttClientMessage) -> &'static str {
    match m {
        SttClientMessage::Start(_) => "`start`",
        SttClientMessage::Flush => "`flush`",
        SttClientMessage::Reset => "`reset`",
        SttClientMessage::End => "`end`",
        SttClientMessage::Cancel => "`cancel`",
    }
}

fn parse_start(map: &Map<String, Value>) -> Result<SttStart, StageError> {
    known_fields(map, &START_FIELDS)?;
    let format = match map.get("format") {
        None => PcmFormat::S16,
        Some(v) => match string(v, "format")?.as_str() {
            "s16" => PcmFormat::S16,
            "f32" => PcmFormat::F32,
            "opus" => PcmFormat::Opus,
            other => {
                return Err(StageError::bad_request(format!(
                    "unknown `format` `{other}` (expected s16, f32 or opus)"
                )))
            }
        },
    };
    Ok(SttStart { format })
}

/// Server-to-client text messages of `/v1/stt`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SttServerMessage {
    Started {
        stream: u64,
        sample_rate: u32,
        frame_samples: usize,
        format: PcmFormat,
        /// Steps between a word's audio and its text (the model's delay).
        text_delay_frames: usize,
        /// Silence the model expects before speech (the 2.6B: 1 s); the client sends it.
        silence_prefix_seconds: f32,
        /// VAD heads reported in `step` (0: none).
        vad_heads: usize,
        /// Frames of silence a flush adds.
        flush_frames: usize,
        /// Frames one stream may send in its life.
        max_frames: usize,
    },
    Step {
        position: usize,
        token: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        vad: Option<Vec<f32>>,
        buffered_samples: usize,
    },
    Word {
        text: String,
        tokens: Vec<u32>,
        start: f32,
    },
    EndWord {
        stop: f32,
    },
    EndOfTurn {
        position: usize,
        probability: f32,
    },
    Flushed {
        position: usize,
    },
    ResetDone,
    End {
        reason: &'static str,
        positions: usize,
        words: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_parses_and_start_takes_a_format() {
        let m = |t: &str| parse_stt_message(t).unwrap();
        assert_eq!(
            m(r#"{"type":"start"}"#),
            SttClientMessage::Start(SttStart {
                format: PcmFormat::S16
            })
        );
        assert_eq!(
            m(r#"{"type":"start","format":"opus"}"#),
            SttClientMessage::Start(SttStart {
                format: PcmFormat::Opus
            })
        );
        assert_eq!(m(r#"{"type":"flush"}"#), SttClientMessage::Flush);
        assert_eq!(m(r#"{"type":"reset"}"#), SttClientMessage::Reset);
        assert_eq!(m(r#"{"type":"end"}"#), SttClientMessage::End);
        assert_eq!(m(r#"{"type":"cancel"}"#), SttClientMessage::Cancel);
    }

    #[test]
    fn bad_messages_are_named() {
        let cases = [
            ("[1]", StageErrorCode::BadJson, "object"),
            (
                r#"{"type":"stop"}"#,
                StageErrorCode::UnknownMessage,
                "`stop`",
            ),
            (
                r#"{"type":"flush","now":1}"#,
                StageErrorCode::BadJson,
                "no fields",
            ),
            (
                r#"{"type":"start","format":"mp3"}"#,
                StageErrorCode::BadRequest,
                "`mp3`",
            ),
            (
                r#"{"type":"start","rate":16000}"#,
                StageErrorCode::BadRequest,
                "unknown field `rate`",
            ),
        ];
        for (text, code, needle) in cases {
            let e = parse_stt_message(text).unwrap_err();
            assert_eq!(e.code, code, "{text}");
            assert!(e.message.contains(needle), "{text}: {}", e.message);
        }
        let e = PARSE_START(r#"{"type":"flush"}"#).unwrap_err();
        assert_eq!(e.code, StageErrorCode::NotStarted);
    }
}
