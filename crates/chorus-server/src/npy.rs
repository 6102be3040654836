//! Codes files of `POST /v1/decode`, through `chorus_core`'s `.npy` and codes support.

use chorus_core::codes::{frame_major_to_npy, CodesBatch};
use chorus_core::{Error, Result};

/// Codes of one stream, frame-major: `codes[t * n_q + q]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodesFile {
    pub n_q: usize,
    pub frames: usize,
    pub codes: Vec<u32>,
}

/// Reads one stream's `[n_q, T]` (or `[1, n_q, T]`) integer array, validated for the model.
pub fn read_codes(bytes: &[u8], cardinality: usize, max_codebooks: usize) -> Result<CodesFile> {
    let batch = CodesBatch::from_npy(bytes, "request body", cardinality, max_codebooks)?;
    if batch.streams != 1 {
        return Err(Error::input(
            "npy::read_codes",
            format!(
                "the request holds {} streams; send one stream as [n_q, T]",
                batch.streams
            ),
        ));
    }
    Ok(CodesFile {
        n_q: batch.n_q,
        frames: batch.frames,
        codes: batch.frame_major(0),
    })
}

/// Writes frame-major codes as an `[n_q, T]` array.
pub fn write_codes(n_q: usize, codes: &[u32]) -> Vec<u8> {
    frame_major_to_npy(n_q, codes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_frame_major_codes() {
        let codes: Vec<u32> = (0..12).collect();
        let f = read_codes(&write_codes(3, &codes), 2048, 32).unwrap();
        assert_eq!((f.n_q, f.frames), (3, 4));
        assert_eq!(f.codes, codes);
    }

    #[test]
    fn rejects_several_streams_and_bad_codes() {
        let two = chorus_core::npy::write_npy_i64(&[2, 1, 1], &[0, 0]);
        assert!(read_codes(&two, 2048, 32)
            .unwrap_err()
            .to_string()
            .contains("2 streams"));
        let neg = chorus_core::npy::write_npy_i64(&[1, 2], &[5, -1]);
        assert!(matches!(
            read_codes(&neg, 2048, 32),
            Err(Error::CodeOutOfRangeAt { code: -1, .. })
        ));
        assert!(read_codes(b"not numpy at all", 2048, 32).is_err());
    }
}
