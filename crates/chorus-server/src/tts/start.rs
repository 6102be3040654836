//! The fields of `start` (the WebSocket message and the `POST /v1/tts` body), each checked on
//! its own so that an error names the field and the problem.

use chorus_csm::MAX_TOP_K;
use chorus_lm::Sampling;
use serde_json::{Map, Value};

use super::TtsError;
use crate::protocol::PcmFormat;
use crate::stage::fields::{
    known_fields, optional_positive, parse_body, parse_message, quote, sampling, string,
    ClientMessage,
};

/// Fields `start` accepts (besides `type`).
const START_FIELDS: [&str; 11] = [
    "text",
    "speaker",
    "context",
    "prompt_ids",
    "sampling",
    "seed",
    "temperature",
    "top_k",
    "max_frames",
    "format",
    "opus_bitrate",
];
/// Fields of one context turn.
const TURN_FIELDS: [&str; 3] = ["speaker", "text", "codes"];

/// An earlier turn of the conversation: who said what, as Mimi codes `[T][codebooks]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextTurn {
    pub speaker: u32,
    pub text: String,
    pub codes: Vec<Vec<u32>>,
}

/// What to say: text for the server's tokenizer, or the ready ids of the whole text segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TtsText {
    Text(String),
    Ids(Vec<u32>),
}

/// A parsed `start` (or `POST /v1/tts` body), every field checked on its own; what depends on
/// the model (speaker ids, lengths, codes) is checked by [`super::TtsEngine::prepare`].
#[derive(Clone, Debug, PartialEq)]
pub struct TtsStart {
    pub text: TtsText,
    pub speaker: u32,
    pub context: Vec<ContextTurn>,
    pub sampling: Sampling,
    /// This utterance's draws (`temperature` 0 is greedy, `top_k` in 1..=[`MAX_TOP_K`]);
    /// `None`: the server's (`--tts-temperature`, `--tts-top-k`).
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    /// `None`: the server's default.
    pub max_frames: Option<usize>,
    /// The WebSocket's audio messages (`None`: s16).
    pub format: Option<PcmFormat>,
    pub opus_bitrate: Option<u32>,
}

/// Parses one WebSocket text message.
pub fn parse_tts_message(text: &str) -> Result<ClientMessage<TtsStart>, TtsError> {
    parse_message(text, parse_start)
}

/// Parses the body of `POST /v1/tts`: the `start` object, its `"type": "start"` optional.
pub fn parse_tts_body(body: &[u8]) -> Result<TtsStart, TtsError> {
    parse_body(body, parse_start)
}

/// Parses the fields of `start` (without `type`).
pub fn parse_start(map: &Map<String, Value>) -> Result<TtsStart, TtsError> {
    known_fields(map, &START_FIELDS)?;
    let text = match (map.get("text"), map.get("prompt_ids")) {
        (Some(t), None) => TtsText::Text(string(t, "text")?),
        (None, Some(ids)) => TtsText::Ids(id_list(ids, "`prompt_ids`")?),
        (Some(_), Some(_)) => {
            return Err(TtsError::bad_request(
                "give either `text` or `prompt_ids`, not both",
            ))
        }
        (None, None) => {
            return Err(TtsError::bad_request(
                "missing field `text` (the text to say)",
            ))
        }
    };
    let speaker = match map.get("speaker") {
        Some(v) => speaker(v, "`speaker`")?,
        None => 0,
    };
    let context = match map.get("context") {
        None => Vec::new(),
        Some(Value::Array(turns)) => turns
            .iter()
            .enumerate()
            .map(|(i, t)| context_turn(t, i))
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(TtsError::bad_request(format!(
                "`context` must be an array of turns {{speaker, text, codes}}, got {}",
                quote(v)
            )))
        }
    };
    let (sampling, _, _) = sampling(map)?;
    let temperature = match map.get("temperature") {
        None => None,
        Some(v) => Some(
            v.as_f64()
                .map(|t| t as f32)
                .filter(|t| t.is_finite() && *t >= 0.0)
                .ok_or_else(|| {
                    TtsError::bad_request(format!(
                        "`temperature` must be a number >= 0 (0 draws greedily), got {}",
                        quote(v)
                    ))
                })?,
        ),
    };
    let top_k = optional_positive(map, "top_k")?.map(|k| usize::try_from(k).unwrap_or(usize::MAX));
    if let Some(k) = top_k.filter(|&k| k > MAX_TOP_K) {
        return Err(TtsError::bad_request(format!(
            "`top_k` is {k}: it must be in 1..={MAX_TOP_K} (the model's audio vocabulary)"
        )));
    }
    let max_frames =
        optional_positive(map, "max_frames")?.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let format = match map.get("format") {
        None => None,
        Some(v) => Some(match string(v, "format")?.as_str() {
            "s16" => PcmFormat::S16,
            "f32" => PcmFormat::F32,
            "opus" => PcmFormat::Opus,
            other => {
                return Err(TtsError::bad_request(format!(
                    "unknown `format` `{other}` (expected s16, f32 or opus)"
                )))
            }
        }),
    };
    let opus_bitrate =
        optional_positive(map, "opus_bitrate")?.map(|b| u32::try_from(b).unwrap_or(u32::MAX));
    if opus_bitrate.is_some() && format != Some(PcmFormat::Opus) {
        return Err(TtsError::bad_request(
            "`opus_bitrate` needs `format: \"opus\"`",
        ));
    }
    Ok(TtsStart {
        text,
        speaker,
        context,
        sampling,
        temperature,
        top_k,
        max_frames,
        format,
        opus_bitrate,
    })
}

fn speaker(v: &Value, what: &str) -> Result<u32, TtsError> {
    v.as_u64()
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| {
            TtsError::bad_request(format!(
                "{what} must be a speaker id (a non-negative integer), got {}",
                quote(v)
            ))
        })
}

fn context_turn(v: &Value, i: usize) -> Result<ContextTurn, TtsError> {
    let what = format!("context turn {i}");
    let Value::Object(map) = v else {
        return Err(TtsError::bad_request(format!(
            "{what} must be an object {{speaker, text, codes}}, got {}",
            quote(v)
        )));
    };
    if let Some(k) = map.keys().find(|k| !TURN_FIELDS.contains(&k.as_str())) {
        return Err(TtsError::bad_request(format!(
            "{what}: unknown field `{k}` (expected speaker, text, codes: the turn's audio as Mimi codes)"
        )));
    }
    let field = |name: &str| {
        map.get(name)
            .ok_or_else(|| TtsError::bad_request(format!("{what} has no `{name}`")))
    };
    let speaker = speaker(field("speaker")?, &format!("{what}: `speaker`"))?;
    let text = string(field("text")?, &format!("context[{i}].text"))?;
    let Value::Array(rows) = field("codes")? else {
        return Err(TtsError::bad_request(format!(
            "{what}: `codes` must be an array of frames [[codes of one frame], ...]"
        )));
    };
    let codes = rows
        .iter()
        .enumerate()
        .map(|(f, r)| id_list(r, &format!("{what}, frame {f} of `codes`")))
        .collect::<Result<_, _>>()?;
    Ok(ContextTurn {
        speaker,
        text,
        codes,
    })
}

/// An array of integers in 0..2^32.
fn id_list(v: &Value, what: &str) -> Result<Vec<u32>, TtsError> {
    let Value::Array(items) = v else {
        return Err(TtsError::bad_request(format!(
            "{what} must be an array of integers, got {}",
            quote(v)
        )));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    TtsError::bad_request(format!(
                        "{what}: {} at position {i} is not an integer in 0..2^32",
                        quote(x)
                    ))
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(text: &str) -> TtsStart {
        match parse_tts_message(text).unwrap() {
            ClientMessage::Start(s) => *s,
            ClientMessage::Cancel => panic!("expected start"),
        }
    }

    #[test]
    fn start_parses_every_field_and_the_defaults() {
        let s = start(r#"{"type":"start","text":"Hi"}"#);
        assert_eq!(s.text, TtsText::Text("Hi".into()));
        assert_eq!((s.speaker, s.sampling), (0, Sampling::Seeded(0)));
        assert!(s.context.is_empty() && s.max_frames.is_none() && s.format.is_none());
        let s = start(
            r#"{"type":"start","text":"Yes.","speaker":1,"sampling":"greedy","seed":4,
            "temperature":0.9,"top_k":50,"max_frames":12,"format":"opus","opus_bitrate":24000,
            "context":[{"speaker":0,"text":"Hello?","codes":[[1,2],[3,4]]}]}"#,
        );
        assert_eq!(
            (s.speaker, s.sampling, s.max_frames),
            (1, Sampling::Greedy, Some(12))
        );
        assert_eq!((s.temperature, s.top_k), (Some(0.9), Some(50)));
        assert_eq!(
            (s.format, s.opus_bitrate),
            (Some(PcmFormat::Opus), Some(24_000))
        );
        assert_eq!(
            s.context,
            vec![ContextTurn {
                speaker: 0,
                text: "Hello?".into(),
                codes: vec![vec![1, 2], vec![3, 4]],
            }]
        );
        let s = start(r#"{"type":"start","prompt_ids":[1,9,3]}"#);
        assert_eq!(s.text, TtsText::Ids(vec![1, 9, 3]));
        assert_eq!(
            parse_tts_message(r#"{"type":"cancel"}"#).unwrap(),
            ClientMessage::Cancel
        );
        assert!(parse_tts_body(br#"{"text":"Hi"}"#).is_ok());
    }

    #[test]
    fn field_errors_name_the_field() {
        let cases = [
            (r#"{"type":"start","text":5}"#, "`text` must be a string"),
            (
                r#"{"type":"start","text":"a","context":{}}"#,
                "`context` must be an array",
            ),
            (
                r#"{"type":"start","text":"a","context":[1]}"#,
                "context turn 0 must be an object",
            ),
            (
                r#"{"type":"start","text":"a","context":[{"speaker":0,"text":"b","codes":[[1,-2]]}]}"#,
                "frame 0 of `codes`: -2 at position 1",
            ),
            (
                r#"{"type":"start","text":"a","context":[{"speaker":0,"text":"b","codes":[],"audio":1}]}"#,
                "unknown field `audio`",
            ),
            (
                r#"{"type":"start","text":"a","temperature":"hot"}"#,
                "`temperature`",
            ),
            (
                r#"{"type":"start","text":"a","temperature":-0.1}"#,
                "`temperature` must be a number >= 0",
            ),
            (
                r#"{"type":"start","text":"a","top_k":0}"#,
                "`top_k` must be a positive integer",
            ),
            (
                r#"{"type":"start","text":"a","top_k":2052}"#,
                "`top_k` is 2052: it must be in 1..=2051",
            ),
            (
                r#"{"type":"start","text":"a","format":"f32","opus_bitrate":1}"#,
                "opus_bitrate",
            ),
        ];
        for (text, needle) in cases {
            let e = parse_tts_message(text).unwrap_err();
            assert_eq!(e.code, crate::tts::TtsErrorCode::BadRequest, "{text}");
            assert!(e.message.contains(needle), "{text}: {}", e.message);
        }
    }
}
