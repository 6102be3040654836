//! Ogg Opus writing: RFC 7845 structure, exact length after end trimming, quality, streaming.

mod common;

use chorus_audio::{
    read_audio_bytes, Error, OggOpusWriter, FRAME_SAMPLES, OPUS_VENDOR, SAMPLE_RATE,
};
use common::{best_lag, snr_db, speech_like};

/// One parsed Ogg page: (header type flags, granule position, serial, sequence, body).
struct Page {
    flags: u8,
    granule: u64,
    serial: u32,
    sequence: u32,
    body: Vec<u8>,
}

/// Splits a byte stream into Ogg pages (test-side parser, independent of the crate).
fn pages(mut bytes: &[u8]) -> Vec<Page> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        assert_eq!(&bytes[..4], b"OggS", "page {} capture pattern", out.len());
        let segments = bytes[26] as usize;
        let body_len: usize = bytes[27..27 + segments].iter().map(|&b| b as usize).sum();
        let header_len = 27 + segments;
        out.push(Page {
            flags: bytes[5],
            granule: u64::from_le_bytes(bytes[6..14].try_into().unwrap()),
            serial: u32::from_le_bytes(bytes[14..18].try_into().unwrap()),
            sequence: u32::from_le_bytes(bytes[18..22].try_into().unwrap()),
            body: bytes[header_len..header_len + body_len].to_vec(),
        });
        bytes = &bytes[header_len + body_len..];
    }
    out
}

/// Byte offset just past each page.
fn page_ends(bytes: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let segments = bytes[at + 26] as usize;
        let body: usize = bytes[at + 27..at + 27 + segments]
            .iter()
            .map(|&b| b as usize)
            .sum();
        at += 27 + segments + body;
        ends.push(at);
    }
    ends
}

fn write_file(signal: &[f32], bitrate: u32, piece: usize) -> Vec<u8> {
    let mut w = OggOpusWriter::new(bitrate, 0x1234_5678).unwrap();
    for chunk in signal.chunks(piece) {
        w.push(chunk).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn file_follows_rfc_7845() {
    let signal = speech_like(SAMPLE_RATE, 10_000);
    let file = write_file(&signal, 32_000, 1_000);
    let pages = pages(&file);
    // Headers, then ceil((10000 + 156) / 1920) = 6 audio pages.
    assert_eq!(pages.len(), 2 + 6);

    let head = &pages[0].body;
    assert_eq!(&head[..8], b"OpusHead");
    assert_eq!(head.len(), 19);
    assert_eq!(head[8], 1, "version");
    assert_eq!(head[9], 1, "channels");
    assert_eq!(
        u16::from_le_bytes([head[10], head[11]]),
        312,
        "pre-skip at 48 kHz"
    );
    assert_eq!(u32::from_le_bytes(head[12..16].try_into().unwrap()), 24_000);
    assert_eq!(head[18], 0, "mapping family");
    assert_eq!(pages[0].flags, 0x02, "BOS on the first page only");
    assert_eq!(pages[0].granule, 0);

    let tags = &pages[1].body;
    assert_eq!(&tags[..8], b"OpusTags");
    let vendor_len = u32::from_le_bytes(tags[8..12].try_into().unwrap()) as usize;
    assert_eq!(&tags[12..12 + vendor_len], OPUS_VENDOR.as_bytes());
    assert_eq!(pages[1].granule, 0);

    for (i, page) in pages.iter().enumerate() {
        assert_eq!(page.serial, 0x1234_5678);
        assert_eq!(page.sequence as usize, i);
    }
    for (k, page) in pages[2..pages.len() - 1].iter().enumerate() {
        assert_eq!(page.flags, 0);
        assert_eq!(page.granule, 2 * FRAME_SAMPLES as u64 * (k as u64 + 1));
    }
    let last = pages.last().unwrap();
    assert_eq!(last.flags, 0x04, "EOS on the last page");
    assert_eq!(last.granule, 312 + 2 * 10_000, "end trimming granule");
}

#[test]
fn roundtrip_keeps_length_and_quality() {
    for len in [1usize, 1_919, 1_920, 1_921, 24_000, 37_123] {
        let signal = speech_like(SAMPLE_RATE, len);
        let file = write_file(&signal, 48_000, 999);
        let decoded = read_audio_bytes(file, Some("opus")).unwrap();
        assert_eq!(
            decoded.samples.len(),
            len,
            "decoded length for {len} samples"
        );
        assert_eq!(decoded.format, "ogg-opus");
        assert_eq!(decoded.source_channels, 1);
        assert_eq!(decoded.source_rate, 48_000);
        assert_eq!(decoded.source_frames, 2 * len as u64);
        assert!(decoded.incomplete.is_none());
        if len >= 24_000 {
            // Pre-skip removes the codec delay: the best alignment is at lag 0 (±1 for SILK).
            // Measured at 48 kb/s: lag -1 (hybrid mode), correlation 0.983.
            let (lag, corr) = best_lag(&signal, &decoded.samples, 200);
            assert!(lag.abs() <= 1, "{len}: lag {lag}");
            assert!(corr > 0.97, "{len}: correlation {corr}");
            let aligned = if lag < 0 {
                snr_db(&signal[(-lag) as usize..], &decoded.samples)
            } else {
                snr_db(&signal, &decoded.samples[lag as usize..])
            };
            assert!(aligned > 12.0, "{len}: SNR {aligned} dB");
        }
    }
}

#[test]
fn streaming_pages_equal_the_whole_file() {
    let signal = speech_like(SAMPLE_RATE, FRAME_SAMPLES * 5 + 700);
    let whole = write_file(&signal, 32_000, FRAME_SAMPLES);

    let mut w = OggOpusWriter::new(32_000, 0x1234_5678).unwrap();
    let mut streamed = w.header_pages().unwrap();
    assert_eq!(pages(&streamed).len(), 2);
    for frame in signal.chunks_exact(FRAME_SAMPLES) {
        let page = w.pages_for_frame(frame).unwrap();
        assert_eq!(pages(&page).len(), 1, "one page per 80 ms frame");
        streamed.extend_from_slice(&page);
    }
    w.push(&signal[FRAME_SAMPLES * 5..]).unwrap();
    streamed.extend_from_slice(&w.finish().unwrap());
    assert_eq!(streamed, whole);
}

#[test]
fn misuse_is_reported() {
    let mut w = OggOpusWriter::new(32_000, 1).unwrap();
    w.push(&[0.0; 100]).unwrap();
    assert!(matches!(w.header_pages(), Err(Error::Input { .. })));
    assert!(matches!(
        w.pages_for_frame(&[0.0; FRAME_SAMPLES]),
        Err(Error::Input { .. })
    ));
    assert!(matches!(
        w.pages_for_frame(&[0.0; 10]),
        Err(Error::FrameLength { found: 10, .. })
    ));
    let mut w = OggOpusWriter::new(32_000, 1).unwrap();
    let err = w.push(&[0.0, f32::INFINITY]).unwrap_err();
    assert!(err.to_string().contains("sample 1"), "{err}");
    w.push(&[0.1; 3_000]).unwrap();
    let decoded = read_audio_bytes(w.finish().unwrap(), None).unwrap();
    assert_eq!(
        decoded.samples.len(),
        3_000,
        "the rejected push left no trace"
    );
    let empty = OggOpusWriter::new(32_000, 1).unwrap();
    assert!(matches!(empty.finish(), Err(Error::Input { .. })));
    assert!(matches!(
        OggOpusWriter::new(1, 1),
        Err(Error::Bitrate { .. })
    ));
}

#[test]
fn truncated_file_decodes_its_valid_pages_and_says_so() {
    let signal = speech_like(SAMPLE_RATE, FRAME_SAMPLES * 10);
    let file = write_file(&signal, 32_000, FRAME_SAMPLES);
    let cut = &file[..file.len() * 6 / 10];
    let decoded = read_audio_bytes(cut.to_vec(), None).unwrap();
    let why = decoded.incomplete.as_deref().unwrap();
    assert!(why.contains("inside the page after packet"), "{why}");
    // Whole pages before the cut survive: at least 4 of the 10 frames, minus pre-skip.
    assert!(
        decoded.samples.len() >= 4 * FRAME_SAMPLES - 156,
        "{}",
        decoded.samples.len()
    );
    assert!(decoded.samples.len() < signal.len());
    let n = decoded.samples.len();
    let (lag, corr) = best_lag(&signal[..n], &decoded.samples, 200);
    assert!(
        lag.abs() <= 1 && corr > 0.95,
        "lag {lag}, correlation {corr}"
    );

    // Cut exactly at a page boundary: no EOS page.
    let boundary = page_ends(&file)[4];
    let decoded = read_audio_bytes(file[..boundary].to_vec(), None).unwrap();
    let why = decoded.incomplete.as_deref().unwrap();
    assert!(why.contains("no end-of-stream page"), "{why}");
    assert_eq!(decoded.samples.len(), 3 * FRAME_SAMPLES - 156);
}

#[test]
fn corrupt_page_is_an_error_naming_the_offset() {
    let signal = speech_like(SAMPLE_RATE, FRAME_SAMPLES * 10);
    let mut file = write_file(&signal, 32_000, FRAME_SAMPLES);
    let at = file.len() / 2;
    let page_end = page_ends(&file).into_iter().find(|&end| end > at).unwrap();
    file[at] ^= 0x5a;
    let err = read_audio_bytes(file, Some("opus")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Malformed { .. }), "{msg}");
    assert!(msg.contains("CRC mismatch"), "{msg}");
    assert!(
        msg.contains(&format!("page ending at byte {page_end}")),
        "{msg}"
    );
}

#[test]
fn headers_without_audio_are_empty() {
    let w = OggOpusWriter::new(32_000, 9).unwrap();
    let mut w = w;
    let headers = w.header_pages().unwrap();
    let err = read_audio_bytes(headers, None).unwrap_err();
    assert!(matches!(err, Error::Empty { .. }), "{err}");
}
