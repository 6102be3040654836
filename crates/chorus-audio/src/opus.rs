//! Opus streaming at 24 kHz: one encoder/decoder per stream, one packet per 80 ms frame.
//!
//! libopus (>= 1.2) encodes an 80 ms frame as a single packet (several 20-60 ms Opus frames
//! behind one TOC byte, RFC 6716 §3.2), so the wire framing is one packet per model frame.

use std::ffi::{c_int, CStr};
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::opus_ffi as ffi;
use crate::{FRAME_SAMPLES, SAMPLE_RATE};

/// Lowest bitrate libopus accepts (`OPUS_SET_BITRATE` clamps below this).
pub const OPUS_MIN_BITRATE_BPS: u32 = 6_000;
/// Highest bitrate libopus accepts for one channel.
pub const OPUS_MAX_BITRATE_BPS: u32 = 510_000;
/// Largest Opus packet (RFC 6716 §3.2.5: 120 ms of 1275-byte frames plus the code-3 header).
pub const OPUS_MAX_PACKET_BYTES: usize = 1275 * 6 + 7;
/// Longest audio one Opus packet can carry (120 ms), in samples at 24 kHz.
pub const OPUS_MAX_PACKET_SAMPLES: usize = SAMPLE_RATE as usize * 120 / 1000;
/// Shortest Opus frame (2.5 ms) in samples at 24 kHz: concealment lengths are multiples of it.
pub const OPUS_MIN_FRAME_SAMPLES: usize = SAMPLE_RATE as usize / 400;
/// Highest encoder complexity (`OPUS_SET_COMPLEXITY`); libopus starts at 9.
pub const OPUS_MAX_COMPLEXITY: u8 = 10;

/// What the encoder is tuned for (`OPUS_APPLICATION_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpusApplication {
    /// Speech intelligibility first (SILK-leaning).
    Voip,
    /// Faithful reproduction of any signal, music included (the default).
    #[default]
    Audio,
    /// CELT only, lowest algorithmic delay.
    LowDelay,
}

impl OpusApplication {
    fn raw(self) -> c_int {
        match self {
            Self::Voip => ffi::OPUS_APPLICATION_VOIP,
            Self::Audio => ffi::OPUS_APPLICATION_AUDIO,
            Self::LowDelay => ffi::OPUS_APPLICATION_RESTRICTED_LOWDELAY,
        }
    }
}

/// The libopus version string, e.g. `libopus 1.6.1`.
pub fn libopus_version() -> String {
    // SAFETY: opus_get_version_string returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(ffi::opus_get_version_string()) }
        .to_string_lossy()
        .into_owned()
}

/// Turns a negative libopus return code into an error naming the operation.
fn opus_error(op: &'static str, code: c_int) -> Error {
    // SAFETY: opus_strerror returns a pointer to a static NUL-terminated string for any code.
    let message = unsafe { CStr::from_ptr(ffi::opus_strerror(code)) }
        .to_string_lossy()
        .into_owned();
    Error::Opus { op, code, message }
}

/// Checks that every sample is finite: NaN or infinity would be encoded as garbage.
pub(crate) fn check_finite(op: &'static str, pcm: &[f32]) -> Result<()> {
    match pcm.iter().position(|s| !s.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::Input {
            op,
            reason: format!("sample {i} is {} (not finite)", pcm[i]),
        }),
    }
}

/// One Opus encoder for one 24 kHz mono stream: each 80 ms frame becomes one packet.
///
/// `encode` does not allocate once `out` has capacity: libopus works on its own state and the stack.
pub struct OpusFrameEncoder {
    raw: NonNull<ffi::OpusEncoder>,
    bitrate_bps: u32,
    application: OpusApplication,
    lookahead: usize,
}

// SAFETY: the libopus encoder state is plain memory owned by this value with no thread affinity,
// and every call into it goes through `&mut self`.
unsafe impl Send for OpusFrameEncoder {}

impl OpusFrameEncoder {
    /// An encoder tuned for any audio (`OpusApplication::Audio`) at `bitrate_bps`.
    pub fn new(bitrate_bps: u32) -> Result<Self> {
        Self::with_application(bitrate_bps, OpusApplication::Audio)
    }

    /// An encoder at `bitrate_bps` (in `[OPUS_MIN_BITRATE_BPS, OPUS_MAX_BITRATE_BPS]`).
    pub fn with_application(bitrate_bps: u32, application: OpusApplication) -> Result<Self> {
        const OP: &str = "OpusFrameEncoder::new";
        if !(OPUS_MIN_BITRATE_BPS..=OPUS_MAX_BITRATE_BPS).contains(&bitrate_bps) {
            return Err(Error::Bitrate {
                op: OP,
                bitrate_bps,
                min: OPUS_MIN_BITRATE_BPS,
                max: OPUS_MAX_BITRATE_BPS,
            });
        }
        let mut code: c_int = ffi::OPUS_OK;
        // SAFETY: arguments are a supported rate, one channel, a valid application constant and a
        // valid out-pointer for the error code.
        let ptr = unsafe {
            ffi::opus_encoder_create(SAMPLE_RATE as i32, 1, application.raw(), &mut code)
        };
        let raw = match NonNull::new(ptr) {
            Some(raw) if code == ffi::OPUS_OK => raw,
            _ => return Err(opus_error(OP, code)),
        };
        let mut encoder = Self {
            raw,
            bitrate_bps,
            application,
            lookahead: 0,
        };
        // The range was checked above, so the cast is lossless.
        encoder.ctl_set(OP, ffi::OPUS_SET_BITRATE_REQUEST, bitrate_bps as i32)?;
        encoder.ctl_set(OP, ffi::OPUS_SET_VBR_REQUEST, 1)?;
        let mut lookahead: i32 = 0;
        // SAFETY: the encoder is live and GET_LOOKAHEAD takes one `opus_int32 *` argument.
        let code = unsafe {
            ffi::opus_encoder_ctl(
                encoder.raw.as_ptr(),
                ffi::OPUS_GET_LOOKAHEAD_REQUEST,
                &mut lookahead as *mut i32,
            )
        };
        if code != ffi::OPUS_OK {
            return Err(opus_error(OP, code));
        }
        encoder.lookahead = usize::try_from(lookahead).map_err(|_| Error::Opus {
            op: OP,
            code: lookahead,
            message: "negative lookahead".into(),
        })?;
        Ok(encoder)
    }

    fn ctl_set(&mut self, op: &'static str, request: c_int, value: i32) -> Result<()> {
        // SAFETY: the encoder is live and every SET request used here takes one `opus_int32`.
        let code = unsafe { ffi::opus_encoder_ctl(self.raw.as_ptr(), request, value) };
        if code == ffi::OPUS_OK {
            Ok(())
        } else {
            Err(opus_error(op, code))
        }
    }

    /// Encodes exactly one 80 ms frame (`FRAME_SAMPLES` samples in [-1, 1]) and appends one
    /// packet to `out`; returns the packet's length in bytes.
    pub fn encode(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<usize> {
        const OP: &str = "OpusFrameEncoder::encode";
        if pcm.len() != FRAME_SAMPLES {
            return Err(Error::FrameLength {
                op: OP,
                expected: FRAME_SAMPLES,
                found: pcm.len(),
            });
        }
        check_finite(OP, pcm)?;
        let start = out.len();
        out.resize(start + OPUS_MAX_PACKET_BYTES, 0);
        // SAFETY: `pcm` holds FRAME_SAMPLES mono samples; `out[start..]` has OPUS_MAX_PACKET_BYTES
        // writable bytes, which is what we tell libopus.
        let n = unsafe {
            ffi::opus_encode_float(
                self.raw.as_ptr(),
                pcm.as_ptr(),
                FRAME_SAMPLES as c_int,
                out.as_mut_ptr().add(start),
                OPUS_MAX_PACKET_BYTES as i32,
            )
        };
        if n < 0 {
            out.truncate(start);
            return Err(opus_error(OP, n));
        }
        // Non-negative and at most OPUS_MAX_PACKET_BYTES, so the cast is lossless.
        let n = n as usize;
        out.truncate(start + n);
        Ok(n)
    }

    /// Trades CPU for quality: 0 (fastest) to `OPUS_MAX_COMPLEXITY` (libopus's default is 9).
    pub fn set_complexity(&mut self, complexity: u8) -> Result<()> {
        const OP: &str = "OpusFrameEncoder::set_complexity";
        if complexity > OPUS_MAX_COMPLEXITY {
            return Err(Error::Input {
                op: OP,
                reason: format!("complexity {complexity} is above {OPUS_MAX_COMPLEXITY}"),
            });
        }
        self.ctl_set(OP, ffi::OPUS_SET_COMPLEXITY_REQUEST, i32::from(complexity))
    }

    /// Forgets all history, as for a new stream (same bitrate and application).
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: the encoder is live and OPUS_RESET_STATE takes no argument.
        let code = unsafe { ffi::opus_encoder_ctl(self.raw.as_ptr(), ffi::OPUS_RESET_STATE) };
        if code == ffi::OPUS_OK {
            Ok(())
        } else {
            Err(opus_error("OpusFrameEncoder::reset", code))
        }
    }

    /// The encoder's delay in samples at 24 kHz: decoded audio lags the input by this much.
    pub fn lookahead(&self) -> usize {
        self.lookahead
    }

    /// The Ogg Opus pre-skip (RFC 7845): the lookahead counted at 48 kHz.
    pub fn pre_skip_48k(&self) -> u16 {
        // The lookahead is a few milliseconds (156 samples at 24 kHz), far below u16::MAX / 2.
        (self.lookahead * 2) as u16
    }

    /// The bitrate this encoder was created with.
    pub fn bitrate_bps(&self) -> u32 {
        self.bitrate_bps
    }

    /// The application this encoder was created with.
    pub fn application(&self) -> OpusApplication {
        self.application
    }
}

impl Drop for OpusFrameEncoder {
    fn drop(&mut self) {
        // SAFETY: `raw` came from opus_encoder_create and is destroyed exactly once, here.
        unsafe { ffi::opus_encoder_destroy(self.raw.as_ptr()) }
    }
}

/// One Opus decoder for one stream; output is 24 kHz mono (stereo streams are averaged).
pub struct OpusFrameDecoder {
    raw: NonNull<ffi::OpusDecoder>,
    channels: usize,
    /// Interleaved output of a stereo stream before it is averaged to mono.
    scratch: Vec<f32>,
}

// SAFETY: the libopus decoder state is plain memory owned by this value with no thread affinity,
// and every call into it goes through `&mut self`.
unsafe impl Send for OpusFrameDecoder {}

impl OpusFrameDecoder {
    /// A decoder for a mono stream, output at 24 kHz.
    pub fn new() -> Result<Self> {
        Self::with_channels(1)
    }

    /// A decoder for a stream of 1 or 2 channels; output is always mono at 24 kHz.
    pub fn with_channels(channels: usize) -> Result<Self> {
        const OP: &str = "OpusFrameDecoder::new";
        if !(1..=2).contains(&channels) {
            return Err(Error::Input {
                op: OP,
                reason: format!("{channels} channels; an Opus stream has 1 or 2"),
            });
        }
        let mut code: c_int = ffi::OPUS_OK;
        // SAFETY: a supported rate, 1 or 2 channels, and a valid out-pointer for the error code.
        let ptr =
            unsafe { ffi::opus_decoder_create(SAMPLE_RATE as i32, channels as c_int, &mut code) };
        match NonNull::new(ptr) {
            Some(raw) if code == ffi::OPUS_OK => Ok(Self {
                raw,
                channels,
                scratch: Vec::new(),
            }),
            _ => Err(opus_error(OP, code)),
        }
    }

    /// Decodes one packet and appends its samples (24 kHz mono) to `out`; returns how many.
    pub fn decode(&mut self, packet: &[u8], out: &mut Vec<f32>) -> Result<usize> {
        const OP: &str = "OpusFrameDecoder::decode";
        if packet.is_empty() {
            return Err(Error::Input {
                op: OP,
                reason: "empty packet (use decode_lost for a lost packet)".into(),
            });
        }
        self.run(OP, Some(packet), OPUS_MAX_PACKET_SAMPLES, out)
    }

    /// Conceals `samples` lost samples (a multiple of 2.5 ms, e.g. `FRAME_SAMPLES`) with libopus's
    /// packet-loss concealment, appending them to `out`; returns how many.
    pub fn decode_lost(&mut self, samples: usize, out: &mut Vec<f32>) -> Result<usize> {
        const OP: &str = "OpusFrameDecoder::decode_lost";
        if samples == 0
            || !samples.is_multiple_of(OPUS_MIN_FRAME_SAMPLES)
            || samples > OPUS_MAX_PACKET_SAMPLES
        {
            return Err(Error::Input {
                op: OP,
                reason: format!(
                    "{samples} samples; expected a multiple of {OPUS_MIN_FRAME_SAMPLES} \
                     up to {OPUS_MAX_PACKET_SAMPLES}"
                ),
            });
        }
        self.run(OP, None, samples, out)
    }

    /// Decodes `packet` (`None`: conceal a lost one) into at most `max_samples` samples per channel
    /// and appends them to `out` as mono.
    fn run(
        &mut self,
        op: &'static str,
        packet: Option<&[u8]>,
        max_samples: usize,
        out: &mut Vec<f32>,
    ) -> Result<usize> {
        let (data, len) = match packet {
            Some(p) => {
                let len = i32::try_from(p.len()).map_err(|_| Error::Input {
                    op,
                    reason: format!("packet of {} bytes is too long", p.len()),
                })?;
                (p.as_ptr(), len)
            }
            None => (std::ptr::null(), 0),
        };
        let ch = self.channels;
        let decode_into = |raw: NonNull<ffi::OpusDecoder>, buf: &mut [f32]| {
            if buf.len() < max_samples * ch {
                return Err(Error::Input {
                    op,
                    reason: format!("output buffer of {} < {max_samples} x {ch}", buf.len()),
                });
            }
            // SAFETY: `data` is null (concealment, len 0) or points to `len` readable bytes of
            // `packet`; `buf` was just checked to hold `max_samples` frames of `ch` channels,
            // which is what we tell libopus.
            let n = unsafe {
                ffi::opus_decode_float(
                    raw.as_ptr(),
                    data,
                    len,
                    buf.as_mut_ptr(),
                    max_samples as c_int,
                    0,
                )
            };
            if n < 0 {
                Err(opus_error(op, n))
            } else {
                // Non-negative and at most max_samples, so the cast is lossless.
                Ok(n as usize)
            }
        };
        if ch == 1 {
            let start = out.len();
            out.resize(start + max_samples, 0.0);
            match decode_into(self.raw, &mut out[start..]) {
                Ok(n) => {
                    out.truncate(start + n);
                    Ok(n)
                }
                Err(e) => {
                    out.truncate(start);
                    Err(e)
                }
            }
        } else {
            self.scratch.resize(max_samples * ch, 0.0);
            let n = decode_into(self.raw, &mut self.scratch)?;
            crate::mix::append_mono(&self.scratch[..n * ch], ch, out);
            Ok(n)
        }
    }

    /// Forgets all history, as for a new stream.
    pub fn reset(&mut self) -> Result<()> {
        // SAFETY: the decoder is live and OPUS_RESET_STATE takes no argument.
        let code = unsafe { ffi::opus_decoder_ctl(self.raw.as_ptr(), ffi::OPUS_RESET_STATE) };
        if code == ffi::OPUS_OK {
            Ok(())
        } else {
            Err(opus_error("OpusFrameDecoder::reset", code))
        }
    }

    /// Number of samples (per channel, at 24 kHz) `packet` decodes to.
    pub fn packet_samples(packet: &[u8]) -> Result<usize> {
        const OP: &str = "OpusFrameDecoder::packet_samples";
        let len = i32::try_from(packet.len()).map_err(|_| Error::Input {
            op: OP,
            reason: format!("packet of {} bytes is too long", packet.len()),
        })?;
        if len == 0 {
            return Err(Error::Input {
                op: OP,
                reason: "empty packet".into(),
            });
        }
        // SAFETY: `packet` points to `len` readable bytes.
        let n =
            unsafe { ffi::opus_packet_get_nb_samples(packet.as_ptr(), len, SAMPLE_RATE as i32) };
        if n < 0 {
            Err(opus_error(OP, n))
        } else {
            Ok(n as usize)
        }
    }
}

impl Drop for OpusFrameDecoder {
    fn drop(&mut self) {
        // SAFETY: `raw` came from opus_decoder_create and is destroyed exactly once, here.
        unsafe { ffi::opus_decoder_destroy(self.raw.as_ptr()) }
    }
}
