//! Ogg Opus (RFC 7845) writing, whole-file or streamed page by page.
//!
//! Layout: page 0 holds `OpusHead` (mono, pre-skip = encoder lookahead, input rate 24 000),
//! page 1 holds `OpusTags` (vendor "chorus"), then one page per 80 ms packet. Granule positions
//! count 48 kHz samples including pre-skip; the last page carries EOS and the granule that trims
//! the padding, so a decoder outputs exactly as many samples as were pushed.

use ogg::writing::{PacketWriteEndInfo, PacketWriter};

use crate::error::{Error, Result};
use crate::opus::{check_finite, OpusApplication, OpusFrameEncoder};
use crate::{FRAME_SAMPLES, OPUS_GRANULE_RATE, SAMPLE_RATE};

/// Vendor string written in `OpusTags`.
pub const OPUS_VENDOR: &str = "chorus";
/// 48 kHz granule units per 24 kHz input sample.
const GRANULE_PER_SAMPLE: u64 = (OPUS_GRANULE_RATE / SAMPLE_RATE) as u64;
/// `OpusHead` version (RFC 7845 §5.1).
const OPUS_HEAD_VERSION: u8 = 1;

/// Encodes 24 kHz mono audio into an Ogg Opus stream.
///
/// Whole file: `push` any amount, then `finish` returns the file. Streaming: `header_pages`
/// first, then `pages_for_frame` per 80 ms frame (or `push` + `take_pages`), then `finish` for
/// the last page(s).
pub struct OggOpusWriter {
    encoder: OpusFrameEncoder,
    serial: u32,
    writer: PacketWriter<'static, Vec<u8>>,
    /// Samples waiting for a whole frame.
    pending: Vec<f32>,
    packet: Vec<u8>,
    /// Samples pushed so far.
    input_samples: u64,
    /// Samples encoded so far (whole frames, padding included).
    encoded_samples: u64,
}

impl OggOpusWriter {
    /// A writer at `bitrate_bps` for the logical stream `serial`; the header pages are ready.
    pub fn new(bitrate_bps: u32, serial: u32) -> Result<Self> {
        Self::with_application(bitrate_bps, serial, OpusApplication::Audio)
    }

    /// As `new`, with the encoder tuned for `application`.
    pub fn with_application(
        bitrate_bps: u32,
        serial: u32,
        application: OpusApplication,
    ) -> Result<Self> {
        let encoder = OpusFrameEncoder::with_application(bitrate_bps, application)?;
        let mut writer = Self {
            serial,
            writer: PacketWriter::new(Vec::new()),
            pending: Vec::with_capacity(FRAME_SAMPLES),
            packet: Vec::new(),
            input_samples: 0,
            encoded_samples: 0,
            encoder,
        };
        let head = opus_head(writer.encoder.pre_skip_48k());
        writer.write(head, PacketWriteEndInfo::EndPage, 0)?;
        writer.write(opus_tags(), PacketWriteEndInfo::EndPage, 0)?;
        Ok(writer)
    }

    fn write(&mut self, packet: Vec<u8>, end: PacketWriteEndInfo, granule: u64) -> Result<()> {
        self.writer
            .write_packet(packet, self.serial, end, granule)
            .map_err(|e| Error::Input {
                op: "OggOpusWriter",
                reason: format!("writing an Ogg page to memory: {e}"),
            })
    }

    /// The pre-skip written in `OpusHead`, in 48 kHz samples.
    pub fn pre_skip_48k(&self) -> u16 {
        self.encoder.pre_skip_48k()
    }

    /// Buffers `pcm` (any length); every whole 80 ms frame is encoded into one page. Samples
    /// that are not finite reject the whole call, leaving the writer as it was.
    pub fn push(&mut self, mut pcm: &[f32]) -> Result<()> {
        check_finite("OggOpusWriter::push", pcm)?;
        while !pcm.is_empty() {
            let take = (FRAME_SAMPLES - self.pending.len()).min(pcm.len());
            self.pending.extend_from_slice(&pcm[..take]);
            pcm = &pcm[take..];
            self.input_samples += take as u64;
            if self.pending.len() == FRAME_SAMPLES {
                self.encode_pending(None)?;
            }
        }
        Ok(())
    }

    /// Encodes `pending` (zero-padded to a frame) into one page; `last_granule` marks the EOS page.
    fn encode_pending(&mut self, last_granule: Option<u64>) -> Result<()> {
        self.pending.resize(FRAME_SAMPLES, 0.0);
        self.packet.clear();
        self.encoder.encode(&self.pending, &mut self.packet)?;
        self.pending.clear();
        self.encoded_samples += FRAME_SAMPLES as u64;
        let (end, granule) = match last_granule {
            Some(g) => (PacketWriteEndInfo::EndStream, g),
            None => (
                PacketWriteEndInfo::EndPage,
                self.encoded_samples * GRANULE_PER_SAMPLE,
            ),
        };
        let packet = self.packet.clone();
        self.write(packet, end, granule)
    }

    /// The bytes of every page completed since the last call (the first call after `new` returns
    /// the two header pages).
    pub fn take_pages(&mut self) -> Vec<u8> {
        std::mem::take(self.writer.inner_mut())
    }

    /// Streaming: the `OpusHead` and `OpusTags` pages; call before pushing any audio.
    pub fn header_pages(&mut self) -> Result<Vec<u8>> {
        if self.input_samples > 0 {
            return Err(Error::Input {
                op: "OggOpusWriter::header_pages",
                reason: "audio was already pushed; use take_pages".into(),
            });
        }
        Ok(self.take_pages())
    }

    /// Streaming: encodes exactly one 80 ms frame and returns its page.
    pub fn pages_for_frame(&mut self, pcm: &[f32]) -> Result<Vec<u8>> {
        const OP: &str = "OggOpusWriter::pages_for_frame";
        if pcm.len() != FRAME_SAMPLES {
            return Err(Error::FrameLength {
                op: OP,
                expected: FRAME_SAMPLES,
                found: pcm.len(),
            });
        }
        if !self.pending.is_empty() {
            return Err(Error::Input {
                op: OP,
                reason: format!(
                    "{} samples from push are still buffered; frames would not align",
                    self.pending.len()
                ),
            });
        }
        self.push(pcm)?;
        Ok(self.take_pages())
    }

    /// Ends the stream: encodes what is buffered plus enough silence to flush the encoder's
    /// lookahead, writes the EOS page with the end-trimming granule, and returns every byte not
    /// yet taken (the whole file if `take_pages` was never called).
    pub fn finish(mut self) -> Result<Vec<u8>> {
        if self.input_samples == 0 {
            return Err(Error::Input {
                op: "OggOpusWriter::finish",
                reason: "no audio was pushed; an Ogg Opus file needs at least one sample".into(),
            });
        }
        // Decoded audio lags the input by the lookahead: encode until it covers every input sample.
        let needed = self.input_samples + self.encoder.lookahead() as u64;
        let final_granule =
            u64::from(self.encoder.pre_skip_48k()) + self.input_samples * GRANULE_PER_SAMPLE;
        loop {
            let is_last = self.encoded_samples + FRAME_SAMPLES as u64 >= needed;
            self.encode_pending(is_last.then_some(final_granule))?;
            if is_last {
                break;
            }
        }
        Ok(self.take_pages())
    }
}

/// The identification header (RFC 7845 §5.1) for a mono 24 kHz stream.
fn opus_head(pre_skip: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(19);
    h.extend_from_slice(b"OpusHead");
    h.push(OPUS_HEAD_VERSION);
    h.push(1); // channels
    h.extend_from_slice(&pre_skip.to_le_bytes());
    h.extend_from_slice(&SAMPLE_RATE.to_le_bytes()); // original input rate
    h.extend_from_slice(&0i16.to_le_bytes()); // output gain
    h.push(0); // channel mapping family 0: mono/stereo, no table
    h
}

/// The comment header (RFC 7845 §5.2) with our vendor string and no comments.
fn opus_tags() -> Vec<u8> {
    let mut t = Vec::with_capacity(16 + OPUS_VENDOR.len());
    t.extend_from_slice(b"OpusTags");
    t.extend_from_slice(&(OPUS_VENDOR.len() as u32).to_le_bytes());
    t.extend_from_slice(OPUS_VENDOR.as_bytes());
    t.extend_from_slice(&0u32.to_le_bytes()); // user comment count
    t
}
