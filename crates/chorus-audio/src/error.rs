//! The crate's error type: every variant names the operation and what was wrong with what.

/// Errors carry the operation (`op`), the source (file path or a description of in-memory
/// bytes), the format, and where in the stream things went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{op}: {source_name}: unsupported audio: {reason}")]
    Unsupported {
        op: &'static str,
        source_name: String,
        reason: String,
    },
    #[error("{op}: {source_name} ({format}): malformed at {location}: {reason}")]
    Malformed {
        op: &'static str,
        source_name: String,
        format: String,
        location: String,
        reason: String,
    },
    #[error("{op}: {source_name} ({format}) holds no audio samples")]
    Empty {
        op: &'static str,
        source_name: String,
        format: String,
    },
    #[error(
        "{op}: {source_name} ({format}) is longer than the {max_seconds} s limit \
         (decoding stopped at {decoded_seconds:.2} s)"
    )]
    TooLong {
        op: &'static str,
        source_name: String,
        format: String,
        /// The caller's limit (`DecodeOptions::max_seconds`).
        max_seconds: f64,
        /// Audio decoded when the limit was reached.
        decoded_seconds: f64,
    },
    #[error("{op}: {source_name} ({format}): {what} changes mid-stream from {from} to {to}")]
    StreamChange {
        op: &'static str,
        source_name: String,
        format: String,
        what: &'static str,
        from: u32,
        to: u32,
    },
    #[error("{op}: sample rate {from} Hz -> {to} Hz: {reason}")]
    Resample {
        op: &'static str,
        from: u32,
        to: u32,
        reason: String,
    },
    #[error("{op}: bitrate {bitrate_bps} bps is outside [{min}, {max}] bps")]
    Bitrate {
        op: &'static str,
        bitrate_bps: u32,
        min: u32,
        max: u32,
    },
    #[error("{op}: got {found} samples, expected exactly {expected} (one 80 ms frame at 24 kHz)")]
    FrameLength {
        op: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("{op}: libopus error {code}: {message}")]
    Opus {
        op: &'static str,
        code: i32,
        message: String,
    },
    #[error("{op}: invalid input: {reason}")]
    Input { op: &'static str, reason: String },
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
