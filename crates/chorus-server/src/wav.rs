//! WAV output of the whole-file decode endpoint.

use std::io::Cursor;

use chorus_core::{Error, Result, SAMPLE_RATE};

use crate::protocol::to_s16;

/// 16-bit mono PCM WAV at Mimi's sample rate, samples converted as in the stream protocol.
pub fn encode_wav(samples: &[f32]) -> Result<Vec<u8>> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SAMPLE_RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let wav_err = |e: hound::Error| Error::input("encode_wav", e.to_string());
    let mut cursor = Cursor::new(Vec::with_capacity(44 + samples.len() * 2));
    let mut writer = hound::WavWriter::new(&mut cursor, spec).map_err(wav_err)?;
    for &s in samples {
        writer.write_sample(to_s16(s)).map_err(wav_err)?;
    }
    writer.finalize().map_err(wav_err)?;
    Ok(cursor.into_inner())
}
