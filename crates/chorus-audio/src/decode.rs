//! Entry points for decoding any supported file or byte buffer to 24 kHz mono.
//!
//! Ogg streams whose first packet is `OpusHead` go to `ogg_opus_read` (symphonia has no Opus
//! decoder); everything else goes to `symphonia_read`.

use std::fs::File;
use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{Error, Result};
use crate::source::{Position, Tracked};
use crate::{ogg_opus_read, symphonia_read};

/// Bytes read from the start of a source to recognise Ogg Opus: the first Ogg page header
/// (27 bytes plus up to 255 lacing values) and the 8-byte `OpusHead` magic.
const SNIFF_BYTES: usize = 27 + 255 + 8;

/// Decoded audio, mono at `SAMPLE_RATE` (24 kHz), with what the source was.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedAudio {
    /// Mono samples at 24 kHz (the mean of the source's channels), nominally in [-1, 1].
    pub samples: Vec<f32>,
    /// The source's sample rate (48 000 for Opus, whose streams are always coded at 48 kHz).
    pub source_rate: u32,
    /// The source's channel count.
    pub source_channels: usize,
    /// `"wav"`, `"flac"`, `"mp3"`, `"ogg-vorbis"`, `"ogg-opus"` (or symphonia's short name).
    pub format: String,
    /// Frames decoded at the source rate (after encoder delay and padding are trimmed).
    pub source_frames: u64,
    /// `Some(what is missing)` when the source holds less audio than it should: the file is cut
    /// short (ends inside a packet or page, or before the length its header declares), or the
    /// demuxer skipped damaged frames. `samples` then hold everything that decoded.
    pub incomplete: Option<String>,
}

impl DecodedAudio {
    /// Duration of `samples` in seconds.
    pub fn duration_secs(&self) -> f64 {
        self.samples.len() as f64 / f64::from(crate::SAMPLE_RATE)
    }
}

/// How far decoding has got, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the source consumed so far.
    pub bytes_done: u64,
    /// Size of the source in bytes, when known.
    pub bytes_total: Option<u64>,
    /// Packets (codec frames) decoded so far.
    pub packets_done: u64,
}

/// Caller's limits on a decode.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeOptions {
    /// Longest audio accepted, in seconds of source audio (checked in source frames, to the
    /// nearest frame, before resampling). Decoding stops with `Error::TooLong` as soon as a packet would pass it, so
    /// memory stays bounded whatever the file declares. `None`: no limit.
    pub max_seconds: Option<f64>,
}

impl DecodeOptions {
    /// Options with a `max_seconds` limit.
    pub fn max_seconds(max_seconds: f64) -> Self {
        Self {
            max_seconds: Some(max_seconds),
        }
    }

    /// Refuses a limit that is not a positive finite number of seconds.
    fn check(&self, op: &'static str) -> Result<()> {
        match self.max_seconds {
            Some(s) if !(s.is_finite() && s > 0.0) => Err(Error::Input {
                op,
                reason: format!("max_seconds {s} is not a positive finite number of seconds"),
            }),
            _ => Ok(()),
        }
    }
}

/// The most frames at `rate` that `max_seconds` allows, to the nearest frame (`None`: no limit).
pub(crate) fn frame_limit(max_seconds: Option<f64>, rate: u32) -> Option<u64> {
    // Rounded, not floored: a limit of exactly `n / rate` s (inexact in binary) must admit `n`;
    // `as` saturates, and a limit beyond u64 frames is no limit in practice.
    max_seconds.map(|s| (s * f64::from(rate)).round() as u64)
}

/// What every decoder needs to know about its source and its caller.
pub(crate) struct Job<'a> {
    /// The file path, or a description of in-memory bytes, for error messages.
    pub(crate) name: String,
    /// File extension or MIME type, to help format probing.
    pub(crate) hint: Option<String>,
    /// The container recognised from the first bytes, for error messages.
    pub(crate) container: &'static str,
    pub(crate) len: u64,
    pub(crate) pos: Position,
    pub(crate) progress: Option<&'a mut dyn FnMut(Progress)>,
    /// Highest position reported: demuxers seek back and forth, the progress bar must not.
    pub(crate) reported: u64,
    /// `DecodeOptions::max_seconds`, already checked.
    pub(crate) max_seconds: Option<f64>,
}

impl Job<'_> {
    /// The `Error::TooLong` for a source with `format` stopped after `decoded` frames at `rate`.
    pub(crate) fn too_long(&self, format: &str, decoded: u64, rate: u32) -> Error {
        Error::TooLong {
            op: "read_audio",
            source_name: self.name.clone(),
            format: format.to_string(),
            max_seconds: self.max_seconds.unwrap_or(f64::INFINITY),
            decoded_seconds: decoded as f64 / f64::from(rate.max(1)),
        }
    }

    /// Calls the progress callback, if any.
    pub(crate) fn report(&mut self, packets_done: u64) {
        self.reported = self.reported.max(self.pos.get().min(self.len));
        if let Some(cb) = self.progress.as_deref_mut() {
            cb(Progress {
                bytes_done: self.reported,
                bytes_total: Some(self.len),
                packets_done,
            });
        }
    }

    /// Calls the progress callback once more with everything consumed.
    pub(crate) fn report_done(&mut self, packets_done: u64) {
        let len = self.len;
        if let Some(cb) = self.progress.as_deref_mut() {
            cb(Progress {
                bytes_done: len,
                bytes_total: Some(len),
                packets_done,
            });
        }
    }
}

/// Decodes the audio file at `path` to 24 kHz mono; `progress` is called as decoding advances.
pub fn read_audio_file(
    path: impl AsRef<Path>,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<DecodedAudio> {
    read_audio_file_with(path, progress, &DecodeOptions::default())
}

/// `read_audio_file` within `options`' limits (e.g. `max_seconds`, checked while decoding).
pub fn read_audio_file_with(
    path: impl AsRef<Path>,
    progress: Option<&mut dyn FnMut(Progress)>,
    options: &DecodeOptions,
) -> Result<DecodedAudio> {
    const OP: &str = "read_audio_file";
    options.check(OP)?;
    let path = path.as_ref();
    let name = path.display().to_string();
    let io_err = |source| Error::Io {
        op: OP,
        path: name.clone(),
        source,
    };
    let mut file = File::open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if meta.is_dir() {
        return Err(Error::Input {
            op: OP,
            reason: format!("{name} is a directory, not an audio file"),
        });
    }
    let head = sniff(&mut file).map_err(io_err)?;
    let hint = path
        .extension()
        .map(|ext| ext.to_string_lossy().to_ascii_lowercase());
    let job = Job {
        name,
        hint,
        len: meta.len(),
        container: container(&head),
        pos: Position::default(),
        progress,
        reported: 0,
        max_seconds: options.max_seconds,
    };
    decode_any(file, &head, job)
}

/// Decodes an in-memory audio file to 24 kHz mono; `hint` is an extension (`"mp3"`) or a MIME
/// type (`"audio/mpeg"`) that helps recognise formats without a clear signature.
pub fn read_audio_bytes(bytes: Vec<u8>, hint: Option<&str>) -> Result<DecodedAudio> {
    read_audio_bytes_with(bytes, hint, &DecodeOptions::default())
}

/// `read_audio_bytes` within `options`' limits: with `max_seconds`, a file longer than that is
/// `Error::TooLong` once that much has decoded, so a small hostile upload (a FLAC of silence, a
/// header that lies) cannot expand to hours of samples.
pub fn read_audio_bytes_with(
    bytes: Vec<u8>,
    hint: Option<&str>,
    options: &DecodeOptions,
) -> Result<DecodedAudio> {
    options.check("read_audio_bytes")?;
    let len = bytes.len() as u64;
    let name = match hint {
        Some(h) => format!("in-memory audio ({len} bytes, hint {h:?})"),
        None => format!("in-memory audio ({len} bytes)"),
    };
    let head = bytes[..bytes.len().min(SNIFF_BYTES)].to_vec();
    let hint = hint.map(|h| h.trim_start_matches('.').to_ascii_lowercase());
    let job = Job {
        name,
        hint,
        len,
        container: container(&head),
        pos: Position::default(),
        progress: None,
        reported: 0,
        max_seconds: options.max_seconds,
    };
    decode_any(Cursor::new(bytes), &head, job)
}

/// Reads the first bytes of `file` and rewinds it.
fn sniff(file: &mut File) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    file.by_ref()
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(head)
}

/// The container family by magic bytes, or "unknown" (symphonia still gets to probe it).
fn container(head: &[u8]) -> &'static str {
    if head.starts_with(b"RIFF") || head.starts_with(b"RIFX") {
        "wav"
    } else if head.starts_with(b"fLaC") {
        "flac"
    } else if head.starts_with(b"OggS") {
        "ogg"
    } else if head.starts_with(b"ID3")
        || (head.len() > 1 && head[0] == 0xff && head[1] & 0xe0 == 0xe0)
    {
        "mp3"
    } else {
        "unknown"
    }
}

/// Whether `head` starts an Ogg stream whose first packet is an Opus identification header.
fn is_ogg_opus(head: &[u8]) -> bool {
    if head.len() < 27 || &head[..4] != b"OggS" {
        return false;
    }
    let data_start = 27 + usize::from(head[26]);
    head.get(data_start..data_start + 8) == Some(b"OpusHead".as_slice())
}

fn decode_any<R: Read + Seek + Send + Sync + 'static>(
    reader: R,
    head: &[u8],
    mut job: Job<'_>,
) -> Result<DecodedAudio> {
    if job.len == 0 {
        return Err(Error::Empty {
            op: "read_audio",
            source_name: job.name,
            format: "zero-length file".into(),
        });
    }
    let reader = Tracked::new(reader, job.len, job.pos.clone());
    if is_ogg_opus(head) {
        ogg_opus_read::decode(reader, &mut job)
    } else {
        symphonia_read::decode(reader, &mut job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_ogg_opus_by_its_first_packet() {
        let mut page = b"OggS".to_vec();
        page.resize(26, 0);
        page.push(1); // one lacing value
        page.push(19);
        page.extend_from_slice(b"OpusHead");
        assert!(is_ogg_opus(&page));
        let vorbis: Vec<u8> = page
            .iter()
            .take(28)
            .copied()
            .chain(*b"\x01vorbis\0")
            .collect();
        assert!(!is_ogg_opus(&vorbis));
        assert!(!is_ogg_opus(b"RIFF"));
    }

    #[test]
    fn frame_limits_round_to_the_nearest_source_frame() {
        assert_eq!(frame_limit(None, 48_000), None);
        assert_eq!(frame_limit(Some(1800.0), 44_100), Some(79_380_000));
        assert_eq!(frame_limit(Some(0.5), 11_025), Some(5_513));
        assert_eq!(
            frame_limit(Some(655_350.0 / 48_000.0), 48_000),
            Some(655_350)
        );
        assert_eq!(frame_limit(Some(1e300), 48_000), Some(u64::MAX));
    }

    #[test]
    fn a_limit_that_is_not_positive_and_finite_is_refused() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err =
                read_audio_bytes_with(vec![1], None, &DecodeOptions::max_seconds(bad)).unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(err, Error::Input { .. }) && msg.contains("max_seconds"),
                "{msg}"
            );
        }
    }

    #[test]
    fn empty_bytes_are_an_error_naming_the_source() {
        let err = read_audio_bytes(Vec::new(), Some("wav")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Empty { .. }), "{msg}");
        assert!(msg.contains("in-memory audio (0 bytes"), "{msg}");
    }
}
