//! WAV encoding (24 kHz mono), shared by the whole-file endpoint and `chorus decode`.

use std::io::Cursor;

use chorus_core::{Error, Result, SAMPLE_RATE};

use crate::protocol::to_s16;

/// Sample format of a WAV file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WavFormat {
    /// 16-bit integers, converted as in the stream protocol.
    Pcm16,
    /// 32-bit floats, exactly the decoder's output.
    Float32,
}

/// A mono WAV file at Mimi's sample rate.
pub fn encode_wav(samples: &[f32], format: WavFormat) -> Result<Vec<u8>> {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: SAMPLE_RATE,
        bits_per_sample: if format == WavFormat::Pcm16 { 16 } else { 32 },
        sample_format: match format {
            WavFormat::Pcm16 => hound::SampleFormat::Int,
            WavFormat::Float32 => hound::SampleFormat::Float,
        },
    };
    let wav_err = |e: hound::Error| Error::input("encode_wav", e.to_string());
    let mut cursor = Cursor::new(Vec::with_capacity(44 + samples.len() * 4));
    let mut writer = hound::WavWriter::new(&mut cursor, spec).map_err(wav_err)?;
    for &s in samples {
        match format {
            WavFormat::Pcm16 => writer.write_sample(to_s16(s)),
            WavFormat::Float32 => writer.write_sample(s),
        }
        .map_err(wav_err)?;
    }
    writer.finalize().map_err(wav_err)?;
    Ok(cursor.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_hound() {
        let pcm = vec![0.0, 0.5, -1.5, 1.0];
        let bytes = encode_wav(&pcm, WavFormat::Pcm16).unwrap();
        let r = hound::WavReader::new(Cursor::new(bytes)).unwrap();
        assert_eq!(r.spec().sample_rate, 24_000);
        let s: Vec<i16> = r.into_samples().map(|s| s.unwrap()).collect();
        assert_eq!(s, vec![0, 16384, -32767, 32767]);
        let f = encode_wav(&pcm, WavFormat::Float32).unwrap();
        let r = hound::WavReader::new(Cursor::new(f)).unwrap();
        let s: Vec<f32> = r.into_samples().map(|s| s.unwrap()).collect();
        assert_eq!(s, pcm);
    }
}
