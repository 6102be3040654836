//! The `/v1/tts` WebSocket's JSON messages from the server (audio goes as binary messages: a u32
//! LE frame index, then the frame's samples or its Opus packet).

use serde::{Deserialize, Serialize};

use super::job::TtsEndReason;
use super::TtsErrorCode;
use crate::protocol::PcmFormat;

/// Server-to-client JSON messages of the WebSocket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TtsServerMessage {
    Started {
        utterance: u64,
        max_frames: usize,
        prompt_frames: usize,
        sample_rate: u32,
        /// Samples per frame (1,920: 80 ms).
        frame_samples: usize,
        format: PcmFormat,
    },
    End {
        reason: TtsEndReason,
        frames: usize,
        /// Milliseconds from the accepted `start` to the first frame's audio (absent when no
        /// frame was made).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_audio_ms: Option<f64>,
    },
    Error {
        code: TtsErrorCode,
        message: String,
    },
}
