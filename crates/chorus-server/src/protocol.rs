//! Wire protocol v1 (specified in `docs/protocol.md`): JSON control messages, binary frames.

use serde::{Deserialize, Serialize};

use chorus_core::FRAME_SAMPLES;

/// The protocol version this server speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Bytes before the samples of a binary PCM message: the frame index, u32 little-endian.
pub const PCM_HEADER_BYTES: usize = 4;
/// Bytes of one code on the wire (u16 little-endian).
pub const CODE_BYTES: usize = 2;
/// Bytes of one latent value on the wire (f32 little-endian).
pub const LATENT_BYTES: usize = 4;

/// WebSocket close codes (RFC 6455 section 7.4.1).
pub mod close_code {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const POLICY: u16 = 1008;
    pub const TOO_BIG: u16 = 1009;
    pub const INTERNAL: u16 = 1011;
    pub const TRY_LATER: u16 = 1013;
}

/// What a stream sends: codes or latents to decode, or audio to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    Codes,
    Latents,
    /// Audio in, codes out (an encode stream).
    Pcm,
}

/// PCM sample format sent back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PcmFormat {
    /// Signed 16-bit little-endian, `round(clamp(x, -1, 1) * 32767)`.
    #[default]
    S16,
    /// IEEE float 32-bit little-endian, exactly the decoder's output.
    F32,
    /// One 80 ms Opus packet per frame (decode streams), or Opus packets in (encode streams).
    Opus,
}

impl PcmFormat {
    /// Bytes per sample.
    pub fn sample_bytes(self) -> usize {
        match self {
            Self::S16 => 2,
            // Opus packets have no fixed size; f32 is what the decoder hands the encoder.
            Self::F32 | Self::Opus => 4,
        }
    }
}

/// Client-to-server control messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMessage {
    Open {
        version: u32,
        input: InputKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n_q: Option<usize>,
        #[serde(default)]
        pcm: PcmFormat,
        /// Encode streams: also send each frame's pre-quantisation latent.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        latents: bool,
        /// Decode streams with `pcm: "opus"`: the Opus bitrate in bits per second.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        opus_bitrate: Option<u32>,
    },
    Reset,
    Close,
}

/// Server-to-client control messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Opened {
        version: u32,
        stream_id: u64,
        input: InputKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        n_q: Option<usize>,
        pcm: PcmFormat,
        sample_rate: u32,
        frame_samples: usize,
        codebook_size: usize,
        latent_dim: usize,
        max_pending_frames: usize,
        max_frames_per_message: usize,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        latents: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        opus_bitrate: Option<u32>,
    },
    ResetDone {
        next_frame: u64,
    },
    Closed {
        frames: u64,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}

/// Machine-readable error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadJson,
    BadFile,
    UnknownMessage,
    UnsupportedVersion,
    BadOpen,
    NotOpen,
    AlreadyOpen,
    OpenTimeout,
    BadFrameSize,
    CodeOutOfRange,
    BadLatent,
    QueueFull,
    SlowConsumer,
    Busy,
    Draining,
    DecodeFailed,
    BadAudio,
    EncodeFailed,
    NotEnabled,
    /// A missing or wrong API key (HTTP 401).
    Unauthorized,
    /// A request body over its endpoint's limit (HTTP 413).
    TooLarge,
    /// A request body that did not arrive in time (HTTP 408).
    Timeout,
    /// A WebSocket message over `--max-ws-message` (close 1009).
    MessageTooBig,
    Internal,
}

impl ErrorCode {
    /// The wire name (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadJson => "bad_json",
            Self::BadFile => "bad_file",
            Self::UnknownMessage => "unknown_message",
            Self::UnsupportedVersion => "unsupported_version",
            Self::BadOpen => "bad_open",
            Self::NotOpen => "not_open",
            Self::AlreadyOpen => "already_open",
            Self::OpenTimeout => "open_timeout",
            Self::BadFrameSize => "bad_frame_size",
            Self::CodeOutOfRange => "code_out_of_range",
            Self::BadLatent => "bad_latent",
            Self::QueueFull => "queue_full",
            Self::SlowConsumer => "slow_consumer",
            Self::Busy => "busy",
            Self::Draining => "draining",
            Self::DecodeFailed => "decode_failed",
            Self::BadAudio => "bad_audio",
            Self::EncodeFailed => "encode_failed",
            Self::NotEnabled => "not_enabled",
            Self::Unauthorized => "unauthorized",
            Self::TooLarge => "too_large",
            Self::Timeout => "timeout",
            Self::MessageTooBig => "message_too_big",
            Self::Internal => "internal",
        }
    }

    /// The code for an engine outcome.
    pub fn from_stream_error(e: &chorus_engine::StreamError) -> Self {
        use chorus_engine::StreamError as S;
        match e {
            S::Busy { .. } => Self::Busy,
            S::Draining => Self::Draining,
            S::QueueFull { .. } => Self::QueueFull,
            S::SlowConsumer { .. } => Self::SlowConsumer,
            S::InvalidFrame(_) => Self::BadOpen,
            S::DecodeFailed(_) => Self::DecodeFailed,
            S::Stopped | S::Finished => Self::Internal,
        }
    }

    /// The WebSocket close code that follows the error message.
    pub fn close_code(self) -> u16 {
        match self {
            Self::Busy => close_code::TRY_LATER,
            Self::Draining => close_code::GOING_AWAY,
            Self::MessageTooBig => close_code::TOO_BIG,
            Self::DecodeFailed | Self::EncodeFailed | Self::Internal => close_code::INTERNAL,
            _ => close_code::POLICY,
        }
    }
}

/// A protocol violation: the code and a human-readable message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub message: String,
}

impl ProtocolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Parses a control message; unknown `type`s and malformed JSON get distinct codes.
pub fn parse_client_message(text: &str) -> Result<ClientMessage, ProtocolError> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| ProtocolError::new(ErrorCode::BadJson, format!("malformed JSON: {e}")))?;
    let kind = value
        .get("type")
        .and_then(|t| t.as_str())
        .map(str::to_owned)
        .ok_or_else(|| {
            ProtocolError::new(ErrorCode::BadJson, "message has no string field `type`")
        })?;
    if !matches!(kind.as_str(), "open" | "reset" | "close") {
        return Err(ProtocolError::new(
            ErrorCode::UnknownMessage,
            format!("unknown message type `{kind}` (expected open, reset or close)"),
        ));
    }
    let fields = value.as_object().map_or(0, |o| o.len());
    if kind != "open" && fields != 1 {
        return Err(ProtocolError::new(
            ErrorCode::BadJson,
            format!("`{kind}` takes no fields besides `type`"),
        ));
    }
    serde_json::from_value(value).map_err(|e| {
        let code = if kind == "open" {
            ErrorCode::BadOpen
        } else {
            ErrorCode::BadJson
        };
        ProtocolError::new(code, format!("invalid `{kind}` message: {e}"))
    })
}

/// Decodes a binary codes message into `out` (cleared first): `frames * n_q` little-endian u16,
/// codebook order within a frame, each below `codebook_size`.
pub fn parse_codes(
    bytes: &[u8],
    n_q: usize,
    codebook_size: usize,
    max_frames: usize,
    out: &mut Vec<u32>,
) -> Result<(), ProtocolError> {
    let frame_bytes = n_q * CODE_BYTES;
    check_size(bytes.len(), frame_bytes, max_frames, "codes")?;
    out.clear();
    out.extend(
        bytes
            .chunks_exact(CODE_BYTES)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as u32),
    );
    if let Some(pos) = out.iter().position(|&c| c as usize >= codebook_size) {
        return Err(ProtocolError::new(
            ErrorCode::CodeOutOfRange,
            format!(
                "code {} at frame {} of the message, codebook {}, is outside [0, {codebook_size})",
                out[pos],
                pos / n_q,
                pos % n_q
            ),
        ));
    }
    Ok(())
}

/// Decodes a binary latents message into `out`: `frames * latent_dim` little-endian f32, finite.
pub fn parse_latents(
    bytes: &[u8],
    latent_dim: usize,
    max_frames: usize,
    out: &mut Vec<f32>,
) -> Result<(), ProtocolError> {
    check_size(
        bytes.len(),
        latent_dim * LATENT_BYTES,
        max_frames,
        "latents",
    )?;
    out.clear();
    out.extend(
        bytes
            .chunks_exact(LATENT_BYTES)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    );
    if let Some(pos) = out.iter().position(|v| !v.is_finite()) {
        return Err(ProtocolError::new(
            ErrorCode::BadLatent,
            format!("latent value {pos} of the message is {}", out[pos]),
        ));
    }
    Ok(())
}

fn check_size(
    len: usize,
    frame_bytes: usize,
    max_frames: usize,
    what: &str,
) -> Result<(), ProtocolError> {
    if len == 0 || !len.is_multiple_of(frame_bytes) {
        return Err(ProtocolError::new(
            ErrorCode::BadFrameSize,
            format!(
                "{what} message of {len} bytes is not a whole number of {frame_bytes}-byte frames"
            ),
        ));
    }
    if len / frame_bytes > max_frames {
        return Err(ProtocolError::new(
            ErrorCode::BadFrameSize,
            format!(
                "{what} message holds {} frames, more than the {max_frames} allowed per message",
                len / frame_bytes
            ),
        ));
    }
    Ok(())
}

/// Encodes one PCM frame: u32 LE frame index, then the samples in `format`.
pub fn encode_pcm(index: u64, samples: &[f32], format: PcmFormat) -> Vec<u8> {
    let width = format.sample_bytes();
    let mut out = vec![0u8; PCM_HEADER_BYTES + samples.len() * width];
    // Indices wrap after 2^32 frames (about 10.9 years of audio at 12.5 frames/s).
    out[..PCM_HEADER_BYTES].copy_from_slice(&(index as u32).to_le_bytes());
    // Fixed-width chunks of a presized buffer: the loops compile to straight vector stores, where
    // pushing sample by sample re-checked the capacity each time (a server hot spot).
    let body = &mut out[PCM_HEADER_BYTES..];
    match format {
        PcmFormat::S16 => {
            for (d, &s) in body.chunks_exact_mut(2).zip(samples) {
                d.copy_from_slice(&to_s16(s).to_le_bytes());
            }
        }
        // Opus messages are made by the connection's encoder; f32 is the lossless fallback.
        PcmFormat::F32 | PcmFormat::Opus => {
            for (d, &s) in body.chunks_exact_mut(4).zip(samples) {
                d.copy_from_slice(&s.to_le_bytes());
            }
        }
    }
    out
}

/// Float sample to 16-bit: clamp to [-1, 1], scale by 32767, round half away from zero.
pub fn to_s16(s: f32) -> i16 {
    (s.clamp(-1.0, 1.0) * i16::MAX as f32).round() as i16
}

/// A decoded binary PCM message.
#[derive(Clone, Debug, PartialEq)]
pub struct PcmMessage {
    pub index: u32,
    pub samples: Vec<f32>,
}

/// Decodes a binary PCM message of `format` (s16 samples are returned divided by 32767).
pub fn decode_pcm(bytes: &[u8], format: PcmFormat) -> Option<PcmMessage> {
    let expected = PCM_HEADER_BYTES + FRAME_SAMPLES * format.sample_bytes();
    if bytes.len() != expected {
        return None;
    }
    let index = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let body = &bytes[PCM_HEADER_BYTES..];
    let samples = match format {
        PcmFormat::S16 => body
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / i16::MAX as f32)
            .collect(),
        PcmFormat::F32 | PcmFormat::Opus => body
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    };
    Some(PcmMessage { index, samples })
}

/// Encodes codes frames (`frames * n_q`, codebook order) as a binary message.
pub fn encode_codes(codes: &[u32]) -> Vec<u8> {
    // Codes are below the codebook size (2048 for Mimi), so u16 holds them.
    codes
        .iter()
        .flat_map(|&c| (c as u16).to_le_bytes())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip_and_errors_are_classified() {
        let open = r#"{"type":"open","version":1,"input":"codes","n_q":8,"pcm":"f32"}"#;
        assert_eq!(
            parse_client_message(open).unwrap(),
            ClientMessage::Open {
                version: 1,
                input: InputKind::Codes,
                n_q: Some(8),
                pcm: PcmFormat::F32,
                latents: false,
                opus_bitrate: None,
            }
        );
        let open =
            r#"{"type":"open","version":1,"input":"pcm","n_q":8,"pcm":"opus","latents":true}"#;
        assert!(matches!(
            parse_client_message(open).unwrap(),
            ClientMessage::Open {
                input: InputKind::Pcm,
                pcm: PcmFormat::Opus,
                latents: true,
                ..
            }
        ));
        assert_eq!(
            parse_client_message(r#"{"type":"reset"}"#).unwrap(),
            ClientMessage::Reset
        );
        let code = |t: &str| parse_client_message(t).unwrap_err().code;
        assert_eq!(code("{nope"), ErrorCode::BadJson);
        assert_eq!(code(r#"{"kind":"open"}"#), ErrorCode::BadJson);
        assert_eq!(code(r#"{"type":"dance"}"#), ErrorCode::UnknownMessage);
        assert_eq!(code(r#"{"type":"reset","now":true}"#), ErrorCode::BadJson);
        assert_eq!(
            code(r#"{"type":"open","version":1,"input":"codes","n_q":2,"extra":0}"#),
            ErrorCode::BadOpen
        );
        assert_eq!(
            code(r#"{"type":"open","version":1,"input":"codes","n_q":2,"pcm":"u8"}"#),
            ErrorCode::BadOpen
        );
        assert_eq!(
            code(r#"{"type":"open","version":1,"input":"pixels"}"#),
            ErrorCode::BadOpen
        );
        let opened = ServerMessage::Error {
            code: ErrorCode::CodeOutOfRange,
            message: "m".into(),
        };
        let text = serde_json::to_string(&opened).unwrap();
        assert_eq!(
            text,
            r#"{"type":"error","code":"code_out_of_range","message":"m"}"#
        );
    }

    #[test]
    fn codes_are_checked_for_size_count_and_range() {
        let mut out = Vec::new();
        parse_codes(&encode_codes(&[1, 2, 3, 4]), 2, 2048, 4, &mut out).unwrap();
        assert_eq!(out, vec![1, 2, 3, 4]);
        let err = |b: &[u8], max| {
            parse_codes(b, 2, 2048, max, &mut Vec::new())
                .unwrap_err()
                .code
        };
        assert_eq!(err(&[1, 0, 2], 4), ErrorCode::BadFrameSize);
        assert_eq!(err(&[], 4), ErrorCode::BadFrameSize);
        assert_eq!(err(&encode_codes(&[1; 6]), 2), ErrorCode::BadFrameSize);
        assert_eq!(err(&encode_codes(&[1, 2048]), 4), ErrorCode::CodeOutOfRange);
    }

    #[test]
    fn latents_must_be_whole_and_finite() {
        let bytes: Vec<u8> = [0.5f32, f32::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let e = parse_latents(&bytes, 2, 4, &mut Vec::new()).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadLatent);
        assert_eq!(
            parse_latents(&bytes[..4], 2, 4, &mut Vec::new())
                .unwrap_err()
                .code,
            ErrorCode::BadFrameSize
        );
    }

    #[test]
    fn pcm_encoding_round_trips() {
        let samples: Vec<f32> = (0..FRAME_SAMPLES)
            .map(|i| (i as f32 / 960.0) - 1.0)
            .collect();
        let f = decode_pcm(&encode_pcm(7, &samples, PcmFormat::F32), PcmFormat::F32).unwrap();
        assert_eq!(f.index, 7);
        assert_eq!(f.samples, samples);
        let s = decode_pcm(&encode_pcm(9, &samples, PcmFormat::S16), PcmFormat::S16).unwrap();
        assert_eq!(s.index, 9);
        assert!(s
            .samples
            .iter()
            .zip(&samples)
            .all(|(a, b)| (a - b).abs() < 1e-4));
        assert_eq!(to_s16(2.0), i16::MAX);
        assert_eq!(to_s16(-2.0), -i16::MAX);
    }
}
