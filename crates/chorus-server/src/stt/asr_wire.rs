//! moshi-server's ASR streaming messages (`KYUTAI_STT.md` §4.2): MessagePack maps in binary
//! WebSocket messages, tagged by a `"type"` field, field names as map keys.

use serde::{Deserialize, Serialize};

/// Client to server.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type")]
pub enum AsrIn {
    /// Sent by moshi-server to itself on connect; accepted and ignored.
    Init,
    /// Echoed once the stream has stepped past the audio sent so far and the text delay.
    Marker { id: i64 },
    /// 24 kHz mono samples in [-1, 1], any number (float32 or float64 on the wire).
    Audio { pcm: Vec<f32> },
    /// Ogg Opus pages: not served here (the payload is skipped unread).
    OggOpus { data: serde::de::IgnoredAny },
}

/// Server to client.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum AsrOut {
    Word {
        text: String,
        start_time: f64,
    },
    EndWord {
        stop_time: f64,
    },
    Marker {
        id: i64,
    },
    /// Every step of a model with VAD heads: the class-0 probability of each head.
    Step {
        step_idx: usize,
        prs: Vec<f32>,
        buffered_pcm: usize,
    },
    Error {
        message: String,
    },
    Ready,
}

/// Reads one client message.
pub fn decode_in(bytes: &[u8]) -> Result<AsrIn, String> {
    rmp_serde::from_slice(bytes).map_err(|e| {
        format!(
            "not a message of this protocol ({e}): expected a MessagePack map with `type` Audio \
             {{pcm}}, Marker {{id}} or Init"
        )
    })
}

/// Writes one server message (maps with field names, as moshi-server writes them).
pub fn encode_out(msg: &AsrOut) -> Vec<u8> {
    // Serializing these plain types into a Vec cannot fail.
    rmp_serde::to_vec_named(msg).unwrap_or_default()
}
