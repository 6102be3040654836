//! The wire of encode streams: audio in (s16, f32 or Opus packets, any length) cut into 80 ms
//! frames, and one binary message of codes (and optionally the latent) per frame out.

use chorus_audio::OpusFrameDecoder;
use chorus_core::FRAME_SAMPLES;

use crate::protocol::{ErrorCode, ProtocolError, CODE_BYTES, LATENT_BYTES, PCM_HEADER_BYTES};

/// The sample format of the audio an encode stream sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AudioIn {
    S16,
    F32,
    /// One Opus packet (mono or stereo, any duration libopus allows) per message.
    Opus,
}

/// Cuts a stream's audio into whole frames.
pub struct Framer {
    format: AudioIn,
    opus: Option<OpusFrameDecoder>,
    /// Samples not yet forming a whole frame, then whole frames ready to submit.
    buf: Vec<f32>,
    /// Most samples one message may carry.
    max_samples: usize,
}

impl Framer {
    pub fn new(format: AudioIn, max_frames_per_message: usize) -> Result<Self, ProtocolError> {
        let opus = match format {
            AudioIn::Opus => Some(OpusFrameDecoder::new().map_err(|e| {
                ProtocolError::new(ErrorCode::Internal, format!("opus decoder: {e}"))
            })?),
            _ => None,
        };
        Ok(Self {
            format,
            opus,
            buf: Vec::with_capacity(2 * FRAME_SAMPLES),
            max_samples: max_frames_per_message * FRAME_SAMPLES,
        })
    }

    /// Appends one binary message's audio; the whole message is refused on any error.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), ProtocolError> {
        let bad = |m: String| ProtocolError::new(ErrorCode::BadFrameSize, m);
        if bytes.is_empty() {
            return Err(bad("an empty audio message".into()));
        }
        let before = self.buf.len();
        match self.format {
            AudioIn::S16 | AudioIn::F32 => {
                let width = if self.format == AudioIn::S16 { 2 } else { 4 };
                if !bytes.len().is_multiple_of(width) {
                    return Err(bad(format!(
                        "{} bytes are not a whole number of {width}-byte samples",
                        bytes.len()
                    )));
                }
                let n = bytes.len() / width;
                if n > self.max_samples {
                    return Err(bad(format!(
                        "{n} samples in one message, at most {}",
                        self.max_samples
                    )));
                }
                if width == 2 {
                    self.buf.extend(
                        bytes
                            .chunks_exact(2)
                            .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0),
                    );
                } else {
                    let samples = bytes
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    self.push_finite(samples)?;
                }
            }
            AudioIn::Opus => {
                let dec = self
                    .opus
                    .as_mut()
                    .ok_or_else(|| bad("no opus decoder".into()))?;
                dec.decode(bytes, &mut self.buf).map_err(|e| {
                    ProtocolError::new(ErrorCode::BadAudio, format!("opus packet: {e}"))
                })?;
                if self.buf.len() - before > self.max_samples {
                    self.buf.truncate(before);
                    return Err(bad(format!(
                        "an Opus packet of more than {} samples",
                        self.max_samples
                    )));
                }
            }
        }
        Ok(())
    }

    /// Appends samples given as floats (a protocol that carries them decoded); refused whole
    /// when there are too many or one is not finite. Empty is allowed (nothing to add).
    pub fn push_samples(&mut self, samples: &[f32]) -> Result<(), ProtocolError> {
        if samples.len() > self.max_samples {
            return Err(ProtocolError::new(
                ErrorCode::BadFrameSize,
                format!(
                    "{} samples in one message, at most {}",
                    samples.len(),
                    self.max_samples
                ),
            ));
        }
        self.push_finite(samples.iter().copied())
    }

    /// Appends `samples`, or nothing if one is not finite.
    fn push_finite(&mut self, samples: impl Iterator<Item = f32>) -> Result<(), ProtocolError> {
        let before = self.buf.len();
        for (i, v) in samples.enumerate() {
            if !v.is_finite() {
                self.buf.truncate(before);
                return Err(ProtocolError::new(
                    ErrorCode::BadAudio,
                    format!("sample {i} of the message is not finite"),
                ));
            }
            self.buf.push(v);
        }
        Ok(())
    }

    /// Moves the whole frames buffered so far into `out` (cleared first).
    pub fn take_frames(&mut self, out: &mut Vec<f32>) {
        out.clear();
        let whole = self.buf.len() / FRAME_SAMPLES * FRAME_SAMPLES;
        out.extend(self.buf.drain(..whole));
    }

    /// Samples buffered that do not fill a frame yet.
    pub fn partial(&self) -> usize {
        self.buf.len() % FRAME_SAMPLES
    }

    /// Drops the buffered samples (a stream restarting).
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// At the end of the stream: the last partial frame padded with silence, if any.
    pub fn take_padded_tail(&mut self, out: &mut Vec<f32>) {
        out.clear();
        if !self.buf.is_empty() {
            out.append(&mut self.buf);
            out.resize(FRAME_SAMPLES, 0.0);
        }
    }
}

/// One frame's codes message: u32 frame index, `n_q` u16 codes, then the latent as f32 if asked.
pub fn codes_message(index: u64, codes: &[u32], latent: Option<&[f32]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        PCM_HEADER_BYTES + codes.len() * CODE_BYTES + latent.map_or(0, |l| l.len() * LATENT_BYTES),
    );
    // Indices wrap after 2^32 frames (about 10.9 years of audio).
    out.extend_from_slice(&(index as u32).to_le_bytes());
    for &c in codes {
        // Codes are below the codebook size (2048 for Mimi), so u16 holds them.
        out.extend_from_slice(&(c as u16).to_le_bytes());
    }
    for &v in latent.unwrap_or(&[]) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audio_of_any_length_becomes_whole_frames() {
        let mut f = Framer::new(AudioIn::S16, 4).unwrap();
        let mut out = Vec::new();
        let chunk: Vec<u8> = (0..700i16).flat_map(|v| (v * 10).to_le_bytes()).collect();
        for _ in 0..3 {
            f.push(&chunk).unwrap();
        }
        f.take_frames(&mut out);
        assert_eq!(out.len(), FRAME_SAMPLES);
        assert!((out[1] - 10.0 / 32768.0).abs() < 1e-9);
        f.take_padded_tail(&mut out);
        assert_eq!(out.len(), FRAME_SAMPLES);
        assert_eq!(out[2100 - FRAME_SAMPLES - 1], 699.0 * 10.0 / 32768.0);
        assert_eq!(out[FRAME_SAMPLES - 1], 0.0);
    }

    #[test]
    fn bad_audio_is_refused_whole() {
        let mut f = Framer::new(AudioIn::F32, 1).unwrap();
        assert!(f.push(&[0u8; 6]).is_err());
        let mut bytes: Vec<u8> = (0..8).flat_map(|_| 0.5f32.to_le_bytes()).collect();
        bytes.extend_from_slice(&f32::NAN.to_le_bytes());
        let e = f.push(&bytes).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadAudio);
        let too_many: Vec<u8> = vec![0u8; (FRAME_SAMPLES + 1) * 4];
        assert_eq!(f.push(&too_many).unwrap_err().code, ErrorCode::BadFrameSize);
        let mut out = Vec::new();
        f.take_padded_tail(&mut out);
        assert!(out.is_empty(), "refused messages leave nothing behind");
    }

    #[test]
    fn float_samples_are_checked_like_f32_bytes() {
        let mut f = Framer::new(AudioIn::F32, 1).unwrap();
        f.push_samples(&[0.25; 100]).unwrap();
        let e = f.push_samples(&[0.0, f32::INFINITY]).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadAudio);
        let e = f.push_samples(&vec![0.0; FRAME_SAMPLES + 1]).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadFrameSize);
        assert_eq!(f.partial(), 100, "refused messages leave nothing behind");
        f.push_samples(&[]).unwrap();
        f.clear();
        assert_eq!(f.partial(), 0);
    }

    #[test]
    fn codes_messages_carry_index_codes_and_latent() {
        let m = codes_message(7, &[1, 2047], Some(&[0.5]));
        assert_eq!(m.len(), 4 + 4 + 4);
        assert_eq!(&m[..4], &7u32.to_le_bytes());
        assert_eq!(&m[6..8], &2047u16.to_le_bytes());
        assert_eq!(&m[8..], &0.5f32.to_le_bytes());
    }
}
