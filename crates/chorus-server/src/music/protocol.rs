//! The `/v1/music` WebSocket messages: what a client sends and the server's JSON messages.

use chorus_music::song::LEVELS;
use chorus_music::EndReason;
use serde::{Deserialize, Serialize};

use super::error::{MusicError, MusicErrorCode};
use super::start::{parse_start, StartRequest};
use crate::stage::fields::{parse_message, ClientMessage};

/// Client-to-server messages of the WebSocket.
pub type MusicClientMessage = ClientMessage<StartRequest>;

/// Why a song ended, on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MusicEndReason {
    /// The model drew END.
    End,
    /// `max_frames` frames were emitted.
    MaxFrames,
    /// The client cancelled.
    Cancelled,
}

impl From<EndReason> for MusicEndReason {
    fn from(r: EndReason) -> Self {
        match r {
            EndReason::End => Self::End,
            // The server never forces codes, so `ForcedDone` cannot happen; it is a length cap too.
            EndReason::MaxFrames | EndReason::ForcedDone => Self::MaxFrames,
            EndReason::Cancelled => Self::Cancelled,
        }
    }
}

impl MusicEndReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::End => "end",
            Self::MaxFrames => "max_frames",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Server-to-client JSON messages of the WebSocket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MusicServerMessage {
    Started {
        song: u64,
        max_frames: usize,
        prompt_tokens: usize,
        /// Codes per frame (8).
        levels: usize,
        /// The LM's hidden size: a hiddens message holds `levels * hidden_size` bf16 values.
        hidden_size: usize,
        hiddens: bool,
    },
    Frame {
        index: usize,
        codes: [u32; LEVELS],
    },
    End {
        reason: MusicEndReason,
        frames: usize,
    },
    Error {
        code: MusicErrorCode,
        message: String,
    },
}

/// Parses one WebSocket text message.
pub fn parse_music_message(text: &str) -> Result<MusicClientMessage, MusicError> {
    parse_message(text, parse_start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::music::start::PromptSource;
    use chorus_music::Sampling;

    fn err(text: &str) -> (MusicErrorCode, String) {
        let e = parse_music_message(text).unwrap_err();
        (e.code, e.message)
    }

    #[test]
    fn start_parses_both_prompt_shapes_and_defaults() {
        let one = r#"{"type":"start","prompt_ids":[1,2,3],"seconds":2}"#;
        let MusicClientMessage::Start(req) = parse_music_message(one).unwrap() else {
            panic!("expected start")
        };
        assert_eq!(req.frames, 50);
        assert_eq!(req.sampling, Sampling::Seeded(0));
        assert!(req.allow_end && req.hiddens.is_none());
        let two = r#"{"type":"start","prompt_ids":[[1,2,3],[1,9,3]],"seconds":360,
            "max_frames":7,"sampling":"greedy","allow_end":false,"hiddens":true}"#;
        let MusicClientMessage::Start(req) = parse_music_message(two).unwrap() else {
            panic!("expected start")
        };
        assert_eq!(
            req.prompt,
            PromptSource::Ids {
                cond: vec![1, 2, 3],
                uncond: Some(vec![1, 9, 3])
            }
        );
        assert_eq!((req.frames, req.sampling), (7, Sampling::Greedy));
        assert_eq!(
            parse_music_message(r#"{"type":"cancel"}"#).unwrap(),
            MusicClientMessage::Cancel
        );
    }

    #[test]
    fn errors_name_the_field_and_the_problem() {
        let cases: [(&str, MusicErrorCode, &str); 11] = [
            ("{oops", MusicErrorCode::BadJson, "malformed JSON"),
            ("[1]", MusicErrorCode::BadJson, "object"),
            (r#"{"type":"sing"}"#, MusicErrorCode::UnknownMessage, "sing"),
            (
                r#"{"type":"cancel","now":1}"#,
                MusicErrorCode::BadJson,
                "cancel",
            ),
            (
                r#"{"type":"start","prompt_ids":[1,2,3],"seconds":0}"#,
                MusicErrorCode::BadRequest,
                "`seconds` is 0",
            ),
            (
                r#"{"type":"start","prompt_ids":[1,2,3]}"#,
                MusicErrorCode::BadRequest,
                "seconds",
            ),
            (
                r#"{"type":"start","prompt_ids":[1,-2,3],"seconds":1}"#,
                MusicErrorCode::BadRequest,
                "position 1",
            ),
            (
                r#"{"type":"start","prompt_ids":[1,2,3],"seconds":1,"sampling":"top_p"}"#,
                MusicErrorCode::BadRequest,
                "top_p",
            ),
            (
                r#"{"type":"start","prompt_ids":[1,2,3],"seconds":1,"colour":1}"#,
                MusicErrorCode::BadRequest,
                "`colour`",
            ),
            (
                r#"{"type":"start","caption":"x","seconds":1}"#,
                MusicErrorCode::BadRequest,
                "`lyrics`",
            ),
            (
                r#"{"type":"start","prompt_ids":[[1],[2],[3]],"seconds":1}"#,
                MusicErrorCode::BadRequest,
                "3 rows",
            ),
        ];
        for (text, code, needle) in cases {
            let (c, m) = err(text);
            assert_eq!(c, code, "{text}: {m}");
            assert!(m.contains(needle), "{text}: {m}");
        }
    }
}
