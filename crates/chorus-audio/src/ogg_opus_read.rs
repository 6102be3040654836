//! Ogg Opus (RFC 7845) decoding: `ogg` demuxes, libopus decodes straight to 24 kHz (its own
//! band-limited output path), pre-skip and end trimming come from the headers and granules.
//!
//! Damage policy: a file that ends inside a page, or without an end-of-stream page, decodes to
//! what is there and says so in `DecodedAudio::incomplete`; a page with a bad CRC, a broken or
//! cut header, or a packet that fails to decode with more packets after it is an error naming the
//! byte offset or packet.
//! Supported: channel mapping family 0 (mono, stereo). The first stream of a multiplexed file is
//! decoded; a stream whose first granule implies start trimming is decoded from its start.
//! Length limit (`DecodeOptions::max_seconds`): counted in 24 kHz output samples after pre-skip
//! (half the 48 kHz source frames); decoding stops at the first packet after the limit is passed.

use std::io::{Read, Seek};

use ogg::reading::{OggReadError, PacketReader};

use crate::decode::{frame_limit, DecodedAudio, Job};
use crate::error::{Error, Result};
use crate::opus::OpusFrameDecoder;
use crate::source::Tracked;
use crate::{OPUS_GRANULE_RATE, SAMPLE_RATE};

const OP: &str = "read_audio";
const FORMAT: &str = "ogg-opus";
/// Length of the fixed part of `OpusHead` (RFC 7845 §5.1).
const OPUS_HEAD_LEN: usize = 19;
/// 48 kHz granule units per 24 kHz output sample.
const GRANULE_PER_SAMPLE: u64 = (OPUS_GRANULE_RATE / SAMPLE_RATE) as u64;

/// The fields of `OpusHead` this reader uses.
#[derive(Debug)]
struct OpusHead {
    channels: usize,
    pre_skip: u16,
    /// Output gain in Q7.8 dB.
    gain_q8: i16,
}

/// Why an `OpusHead` was refused.
#[derive(Debug)]
enum HeadError {
    /// Valid, but a layout this reader does not decode.
    Unsupported(String),
    /// Not a valid header.
    Malformed(String),
}

fn parse_head(data: &[u8]) -> std::result::Result<OpusHead, HeadError> {
    use HeadError::{Malformed, Unsupported};
    if data.len() < OPUS_HEAD_LEN || &data[..8] != b"OpusHead" {
        return Err(Malformed(format!(
            "first packet is not a {OPUS_HEAD_LEN}-byte OpusHead ({} bytes)",
            data.len()
        )));
    }
    let version = data[8];
    // RFC 7845 §5.1: versions 0..=15 are compatible; a higher major version is not.
    if version >= 16 {
        return Err(Unsupported(format!(
            "OpusHead version {version} is incompatible"
        )));
    }
    let channels = usize::from(data[9]);
    let pre_skip = u16::from_le_bytes([data[10], data[11]]);
    let gain_q8 = i16::from_le_bytes([data[16], data[17]]);
    let family = data[18];
    if channels == 0 {
        return Err(Malformed("OpusHead declares 0 channels".into()));
    }
    if family != 0 {
        return Err(Unsupported(format!(
            "channel mapping family {family} ({channels} channels) is not supported (only family 0: mono/stereo)"
        )));
    }
    if channels > 2 {
        return Err(Malformed(format!(
            "mapping family 0 allows 1 or 2 channels, OpusHead declares {channels}"
        )));
    }
    Ok(OpusHead {
        channels,
        pre_skip,
        gain_q8,
    })
}

/// A packet that failed to decode; it is only an error if more packets follow it.
struct Failed {
    packet: u64,
    byte: u64,
    reason: String,
}

pub(crate) fn decode<R: Read + Seek>(
    reader: Tracked<R>,
    job: &mut Job<'_>,
) -> Result<DecodedAudio> {
    let mut pr = PacketReader::new(reader);
    let malformed = |job: &Job<'_>, location: String, reason: String| Error::Malformed {
        op: OP,
        source_name: job.name.clone(),
        format: FORMAT.into(),
        location,
        reason,
    };

    let head_packet = match pr.read_packet() {
        Ok(Some(p)) => p,
        Ok(None) => return Err(malformed(job, "byte 0".into(), "no Ogg pages".into())),
        Err(e) => return Err(malformed(job, "first page".into(), ogg_reason(&e))),
    };
    let serial = head_packet.stream_serial();
    let head = parse_head(&head_packet.data).map_err(|e| match e {
        HeadError::Unsupported(reason) => Error::Unsupported {
            op: OP,
            source_name: job.name.clone(),
            reason: format!("{FORMAT}: {reason}"),
        },
        HeadError::Malformed(reason) => malformed(job, "OpusHead".into(), reason),
    })?;
    // The comment header follows; its contents are not needed.
    loop {
        match pr.read_packet() {
            Ok(Some(p)) if p.stream_serial() != serial => continue,
            Ok(Some(p)) if p.data.starts_with(b"OpusTags") => break,
            Ok(Some(_)) => {
                return Err(malformed(
                    job,
                    "second packet".into(),
                    "expected the OpusTags comment header".into(),
                ))
            }
            Ok(None) => return Err(empty(job)),
            Err(e) => {
                return Err(malformed(
                    job,
                    format!("the OpusTags page ending at byte {}", job.pos.get()),
                    ogg_reason(&e),
                ))
            }
        }
    }

    let mut decoder = OpusFrameDecoder::with_channels(head.channels)?;
    // Pre-skip and granules count 48 kHz samples; the decoder runs at 24 kHz.
    let skip = usize::from(head.pre_skip).div_ceil(GRANULE_PER_SAMPLE as usize);
    let max_samples = frame_limit(job.max_seconds, SAMPLE_RATE);
    let over =
        |decoded: usize| max_samples.is_some_and(|max| decoded.saturating_sub(skip) as u64 > max);
    let mut samples: Vec<f32> = Vec::new();
    let mut packets: u64 = 0;
    let mut end_granule: Option<u64> = None;
    let mut failed: Option<Failed> = None;
    let mut incomplete: Option<String> = None;
    loop {
        let packet = match pr.read_packet() {
            Ok(Some(p)) => p,
            Ok(None) => {
                incomplete = Some(format!(
                    "no end-of-stream page after packet {packets} (file cut at a page boundary)"
                ));
                break;
            }
            Err(OggReadError::ReadError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                incomplete = Some(format!(
                    "the file ends (at byte {}) inside the page after packet {packets}",
                    job.len
                ));
                break;
            }
            Err(e) => {
                return Err(malformed(
                    job,
                    format!(
                        "the page ending at byte {} (after packet {packets})",
                        job.pos.get()
                    ),
                    ogg_reason(&e),
                ))
            }
        };
        if packet.stream_serial() != serial {
            continue;
        }
        if let Some(f) = failed.take() {
            return Err(malformed(
                job,
                format!("packet {} (page ending at byte {})", f.packet, f.byte),
                f.reason,
            ));
        }
        // Over the limit with another packet to come: end trimming can no longer bring it back
        // under, so stop before decoding more (at most one packet, 120 ms, past the limit).
        if over(samples.len()) {
            return Err(too_long(job, samples.len() - skip));
        }
        if !packet.data.is_empty() {
            if let Err(e) = decoder.decode(&packet.data, &mut samples) {
                failed = Some(Failed {
                    packet: packets,
                    byte: job.pos.get(),
                    reason: e.to_string(),
                });
            }
        }
        packets += 1;
        job.report(packets);
        if packet.last_in_stream() {
            end_granule = Some(packet.absgp_page());
            break;
        }
    }
    if let Some(f) = failed {
        incomplete.get_or_insert(format!(
            "the last packet ({}, page ending at byte {}) does not decode: {}",
            f.packet, f.byte, f.reason
        ));
    }

    let mut keep = samples.len().saturating_sub(skip);
    let mut source_frames = keep as u64 * GRANULE_PER_SAMPLE;
    if let Some(end) = end_granule {
        let total_48k = end.saturating_sub(u64::from(head.pre_skip));
        let total = total_48k.div_ceil(GRANULE_PER_SAMPLE);
        if total < keep as u64 {
            // End trimming (RFC 7845 §4.5): the last granule says where the audio stops.
            keep = total as usize;
            source_frames = total_48k;
        } else if total > keep as u64 && incomplete.is_none() {
            incomplete = Some(format!(
                "final granule position declares {total_48k} samples at 48 kHz, stream holds {}",
                keep as u64 * GRANULE_PER_SAMPLE
            ));
        }
    }
    samples.drain(..skip.min(samples.len()));
    samples.truncate(keep);
    if samples.is_empty() {
        return Err(empty(job));
    }
    if over(samples.len() + skip) {
        return Err(too_long(job, samples.len()));
    }
    if head.gain_q8 != 0 {
        let gain = 10f32.powf(f32::from(head.gain_q8) / (20.0 * 256.0));
        samples.iter_mut().for_each(|s| *s *= gain);
    }
    job.report_done(packets);
    Ok(DecodedAudio {
        samples,
        source_rate: OPUS_GRANULE_RATE,
        source_channels: head.channels,
        format: FORMAT.into(),
        source_frames,
        incomplete,
    })
}

/// `Error::TooLong` after `decoded` samples at 24 kHz (48 kHz source frames / 2).
fn too_long(job: &Job<'_>, decoded: usize) -> Error {
    job.too_long(FORMAT, decoded as u64, SAMPLE_RATE)
}

fn empty(job: &Job<'_>) -> Error {
    Error::Empty {
        op: OP,
        source_name: job.name.clone(),
        format: FORMAT.into(),
    }
}

fn ogg_reason(e: &OggReadError) -> String {
    match e {
        OggReadError::HashMismatch(expected, found) => {
            format!("page CRC mismatch (stored {expected:#010x}, computed {found:#010x})")
        }
        OggReadError::NoCapturePatternFound => {
            "no Ogg capture pattern where a page should start".into()
        }
        OggReadError::InvalidStreamStructVer(v) => {
            format!("Ogg stream structure version {v} (expected 0)")
        }
        OggReadError::InvalidData => "page violates the Ogg specification".into(),
        OggReadError::ReadError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the file ends inside this page (cut short)".into()
        }
        OggReadError::ReadError(e) => format!("read error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(channels: u8, family: u8) -> Vec<u8> {
        let mut h = b"OpusHead".to_vec();
        h.push(1);
        h.push(channels);
        h.extend_from_slice(&312u16.to_le_bytes());
        h.extend_from_slice(&24_000u32.to_le_bytes());
        h.extend_from_slice(&0i16.to_le_bytes());
        h.push(family);
        h
    }

    #[test]
    fn parses_a_mono_head() {
        let h = parse_head(&head(1, 0)).unwrap();
        assert_eq!((h.channels, h.pre_skip, h.gain_q8), (1, 312, 0));
    }

    fn refusal(data: &[u8]) -> (bool, String) {
        match parse_head(data).unwrap_err() {
            HeadError::Unsupported(r) => (true, r),
            HeadError::Malformed(r) => (false, r),
        }
    }

    #[test]
    fn rejects_surround_and_bad_heads() {
        let (unsupported, reason) = refusal(&head(6, 1));
        assert!(unsupported && reason.contains("family 1"), "{reason}");
        let (unsupported, reason) = refusal(&head(3, 0));
        assert!(!unsupported && reason.contains("1 or 2"), "{reason}");
        let (unsupported, reason) = refusal(&head(0, 0));
        assert!(!unsupported && reason.contains("0 channels"), "{reason}");
        let (unsupported, reason) = refusal(&head(1, 0)[..12]);
        assert!(!unsupported && reason.contains("12 bytes"), "{reason}");
    }
}
