//! WAV, FLAC, MP3 and Ogg Vorbis decoding through symphonia, mixed to mono and resampled to
//! 24 kHz packet by packet.
//!
//! Damage policy:
//! - cut short (the stream ends inside a packet, the last packet fails to decode, or fewer frames
//!   than the header declares: WAV, FLAC STREAMINFO, MP3 Xing/LAME): the valid prefix is returned
//!   and `DecodedAudio::incomplete` says what is missing;
//! - a packet that fails to decode with more packets after it, or a broken header: an error
//!   naming the packet and byte;
//! - nothing decodable before the cut (e.g. an Ogg Vorbis file cut inside its first audio page):
//!   an error;
//! - FLAC frames with a bad CRC are skipped by symphonia (reported as frames missing), PCM bit
//!   errors in WAV cannot be detected, and an MP3 without a Xing/LAME header has no declared
//!   length, so a cut one decodes to its last whole frame unreported.
//!
//! Length limit (`DecodeOptions::max_seconds`): counted in source frames as packets decode,
//! before mixing and resampling; the first packet that would pass it ends the decode.

use std::io::{Read, Seek};

use symphonia::core::codecs::audio::well_known::{CODEC_ID_FLAC, CODEC_ID_VORBIS};
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::codecs::CodecParameters;
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::well_known::{
    FORMAT_ID_FLAC, FORMAT_ID_MP3, FORMAT_ID_OGG, FORMAT_ID_WAVE,
};
use symphonia::core::formats::{FormatOptions, FormatReader, TrackType};
use symphonia::core::io::{MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;
use symphonia::default::{get_codecs, get_probe};

use crate::decode::{frame_limit, DecodedAudio, Job};
use crate::error::{Error, Result};
use crate::mix::append_mono;
use crate::resample::StreamResampler;
use crate::source::Tracked;
use crate::SAMPLE_RATE;

const OP: &str = "read_audio";

/// The formats symphonia is built with here, for "unsupported" messages.
const SUPPORTED: &str = "WAV, FLAC, MP3, Ogg Vorbis, Ogg Opus";

/// A packet that failed to decode; it is only an error if more packets follow it.
struct Failed {
    packet: u64,
    reason: String,
}

/// Per-stream state fixed by the first decoded buffer.
struct Stream {
    rate: u32,
    channels: usize,
    resampler: StreamResampler,
    /// Most source frames the caller accepts (`DecodeOptions::max_seconds` at `rate`).
    max_frames: Option<u64>,
}

impl Stream {
    fn open(job: &Job<'_>, name: &str, rate: u32, channels: usize) -> Result<Self> {
        if channels == 0 {
            return Err(unsupported(job, format!("{name}: zero channels")));
        }
        let resampler = StreamResampler::new(rate, SAMPLE_RATE)
            .map_err(|e| unsupported(job, format!("{name} at {rate} Hz: {e}")))?;
        Ok(Self {
            rate,
            channels,
            resampler,
            max_frames: frame_limit(job.max_seconds, rate),
        })
    }

    /// What differs in a later buffer, if anything: (what, was, now).
    fn change(&self, rate: u32, channels: usize) -> Option<(&'static str, u32, u32)> {
        if rate != self.rate {
            Some(("sample rate", self.rate, rate))
        } else if channels != self.channels {
            Some(("channel count", self.channels as u32, channels as u32))
        } else {
            None
        }
    }
}

pub(crate) fn decode<R: Read + Seek + Send + Sync + 'static>(
    reader: Tracked<R>,
    job: &mut Job<'_>,
) -> Result<DecodedAudio> {
    let mut hint = Hint::new();
    match job.hint.as_deref() {
        Some(h) if h.contains('/') => {
            hint.mime_type(h);
        }
        Some(h) => {
            hint.with_extension(h);
        }
        None => {}
    }
    let mss = MediaSourceStream::new(Box::new(reader), MediaSourceStreamOptions::default());
    let mut format = get_probe()
        .probe(
            &hint,
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| probe_error(job, e))?;

    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| unsupported(job, "no audio track".into()))?;
    let track_id = track.id;
    let declared_frames = track.num_frames;
    let params = match &track.codec_params {
        Some(CodecParameters::Audio(p)) => p.clone(),
        _ => {
            return Err(unsupported(
                job,
                "the audio track has no codec parameters".into(),
            ))
        }
    };
    let name = format_name(format.as_ref(), params.codec);
    let mut decoder = get_codecs()
        .make_audio_decoder(&params, &AudioDecoderOptions::default())
        .map_err(|e| {
            unsupported(
                job,
                format!("{name}: codec {:?} is not supported ({e})", params.codec),
            )
        })?;

    let mut stream: Option<Stream> = None;
    let mut interleaved: Vec<f32> = Vec::new();
    let mut mono: Vec<f32> = Vec::new();
    let mut frames: u64 = 0;
    let mut packets: u64 = 0;
    let mut failed: Option<Failed> = None;
    let mut incomplete: Option<String> = None;

    loop {
        let packet = match format.next_packet() {
            Ok(Some(packet)) => packet,
            Ok(None) => break,
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                incomplete = Some(format!(
                    "the data ends (at byte {}) inside packet {packets}",
                    job.len
                ));
                break;
            }
            Err(SymError::IoError(e)) => {
                return Err(Error::Io {
                    op: OP,
                    path: job.name.clone(),
                    source: e,
                })
            }
            Err(SymError::ResetRequired) => {
                return Err(unsupported(
                    job,
                    format!("{name}: the track list changes at packet {packets} (chained stream)"),
                ))
            }
            Err(e) => return Err(malformed(job, &name, packets, e.to_string())),
        };
        if packet.track_id != track_id {
            continue;
        }
        // A failed packet followed by another one is damage inside the stream.
        if let Some(f) = failed.take() {
            return Err(Error::Malformed {
                op: OP,
                source_name: job.name.clone(),
                format: name,
                location: format!("packet {}", f.packet),
                reason: f.reason,
            });
        }
        let buf = match decoder.decode(&packet) {
            Ok(buf) => buf,
            Err(e @ (SymError::DecodeError(_) | SymError::IoError(_))) => {
                failed = Some(Failed {
                    packet: packets,
                    reason: e.to_string(),
                });
                packets += 1;
                continue;
            }
            Err(e) => return Err(malformed(job, &name, packets, e.to_string())),
        };
        packets += 1;
        if buf.frames() == 0 {
            continue;
        }
        let rate = buf.spec().rate();
        let channels = buf.spec().channels().count();
        let st = match &mut stream {
            Some(st) => st,
            None => stream.insert(Stream::open(job, &name, rate, channels)?),
        };
        if let Some((what, from, to)) = st.change(rate, channels) {
            return Err(Error::StreamChange {
                op: OP,
                source_name: job.name.clone(),
                format: name,
                what,
                from,
                to,
            });
        }
        // Checked before the packet is kept: a long source never grows past the limit.
        let n = buf.frames() as u64;
        if st.max_frames.is_some_and(|max| frames + n > max) {
            return Err(job.too_long(&name, frames, st.rate));
        }
        buf.copy_to_vec_interleaved(&mut interleaved);
        frames += n;
        mono.clear();
        append_mono(&interleaved, channels, &mut mono);
        st.resampler.push(&mono)?;
        job.report(packets);
    }

    if let Some(f) = failed {
        incomplete.get_or_insert(format!(
            "the last packet ({}) does not decode (cut short?): {}",
            f.packet, f.reason
        ));
    }
    if let Some(declared) = declared_frames.filter(|&d| frames < d) {
        let short = format!("header declares {declared} frames, {frames} decoded");
        incomplete = Some(match incomplete {
            Some(why) => format!("{why}; {short}"),
            None => short,
        });
    }
    let Some(st) = stream.filter(|_| frames > 0) else {
        return Err(Error::Empty {
            op: OP,
            source_name: job.name.clone(),
            format: name,
        });
    };
    let samples = st.resampler.finish()?;
    job.report_done(packets);
    Ok(DecodedAudio {
        samples,
        source_rate: st.rate,
        source_channels: st.channels,
        format: name,
        source_frames: frames,
        incomplete,
    })
}

/// Our name for a container + codec pair.
fn format_name(
    format: &dyn FormatReader,
    codec: symphonia::core::codecs::audio::AudioCodecId,
) -> String {
    let info = format.format_info();
    let id = info.format;
    if id == FORMAT_ID_WAVE {
        "wav".into()
    } else if id == FORMAT_ID_FLAC {
        "flac".into()
    } else if id == FORMAT_ID_MP3 {
        "mp3".into()
    } else if id == FORMAT_ID_OGG && codec == CODEC_ID_VORBIS {
        "ogg-vorbis".into()
    } else if id == FORMAT_ID_OGG && codec == CODEC_ID_FLAC {
        "ogg-flac".into()
    } else {
        info.short_name.to_string()
    }
}

fn unsupported(job: &Job<'_>, reason: String) -> Error {
    Error::Unsupported {
        op: OP,
        source_name: job.name.clone(),
        reason,
    }
}

fn malformed(job: &Job<'_>, format: &str, packet: u64, reason: String) -> Error {
    Error::Malformed {
        op: OP,
        source_name: job.name.clone(),
        format: format.to_string(),
        location: format!("packet {packet}"),
        reason,
    }
}

/// Probe failures: not audio we know, or a recognised stream whose start is cut or broken.
fn probe_error(job: &Job<'_>, e: SymError) -> Error {
    let location = String::from("the start of the stream");
    match e {
        SymError::Unsupported(what) => unsupported(
            job,
            format!("not a recognised audio format (supported: {SUPPORTED}): {what}"),
        ),
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Error::Malformed {
            op: OP,
            source_name: job.name.clone(),
            format: job.container.into(),
            location,
            reason: format!(
                "the data ends before the first audio packet (file cut short, or not audio: \
                     supported formats are {SUPPORTED})"
            ),
        },
        SymError::IoError(source) => Error::Io {
            op: OP,
            path: job.name.clone(),
            source,
        },
        other => Error::Malformed {
            op: OP,
            source_name: job.name.clone(),
            format: job.container.into(),
            location,
            reason: other.to_string(),
        },
    }
}
