//! Audio input and output for Chorus, whose models run on 24 kHz mono audio in 80 ms frames.
//!
//! Design:
//! - Decoding (`read_audio_file`, `read_audio_bytes`): WAV, FLAC, MP3 and Ogg Vorbis through
//!   symphonia (pure Rust); Ogg Opus through the `ogg` demuxer and libopus. Every source is mixed
//!   to mono (mean of channels) and resampled to 24 kHz while it is decoded, so memory follows
//!   the output, not the source. `read_audio_file_with` / `read_audio_bytes_with` take
//!   `DecodeOptions::max_seconds`: a longer source stops decoding there with `Error::TooLong`.
//! - Resampling (`resample`): rubato's band-limited FFT resampler, delay-compensated, exact length.
//! - Opus (`OpusFrameEncoder`, `OpusFrameDecoder`): one packet per 80 ms frame, per-stream state.
//! - Ogg Opus files (`OggOpusWriter`): RFC 7845 pages, whole-file or streamed page by page.
//! - libopus is vendored C source (`libopus/`) compiled by `build.rs` with `cc` and linked
//!   statically: no cmake, pkg-config or system libopus is needed to build or to run.
//!
//! Damaged input policy: a stream cut short decodes to its valid prefix and says what is missing
//! in `DecodedAudio::incomplete`; data corrupt where it stands (bad Ogg Opus CRC, undecodable
//! packet with more after it, broken header) is an error naming the packet or byte offset; empty
//! audio is an error naming the source. Per-format details: `symphonia_read`, `ogg_opus_read`.

mod decode;
mod error;
mod mix;
mod ogg_opus;
mod ogg_opus_read;
mod opus;
mod opus_ffi;
mod resample;
mod source;
mod symphonia_read;

pub use decode::{
    read_audio_bytes, read_audio_bytes_with, read_audio_file, read_audio_file_with, DecodeOptions,
    DecodedAudio, Progress,
};
pub use error::{Error, Result};
pub use ogg_opus::{OggOpusWriter, OPUS_VENDOR};
pub use opus::{
    libopus_version, OpusApplication, OpusFrameDecoder, OpusFrameEncoder, OPUS_MAX_BITRATE_BPS,
    OPUS_MAX_COMPLEXITY, OPUS_MAX_PACKET_BYTES, OPUS_MAX_PACKET_SAMPLES, OPUS_MIN_BITRATE_BPS,
    OPUS_MIN_FRAME_SAMPLES,
};
pub use resample::{resample, resampled_len, MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};

/// The sample rate of every model-side signal (Mimi codec).
pub const SAMPLE_RATE: u32 = 24_000;
/// One model frame: 80 ms at 24 kHz.
pub const FRAME_SAMPLES: usize = 1920;
/// One model frame in milliseconds.
pub const FRAME_MS: u32 = 80;
// The frame is exactly 80 ms at 24 kHz.
const _: () = assert!(FRAME_SAMPLES == SAMPLE_RATE as usize * FRAME_MS as usize / 1000);

/// Ogg Opus granule positions and pre-skip always count 48 kHz samples (RFC 7845 §4).
pub const OPUS_GRANULE_RATE: u32 = 48_000;
