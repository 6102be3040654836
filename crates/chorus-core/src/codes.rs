//! Code sequences from files: shape and range validated against a model.

use crate::npy::{read_npy, NpyData};
use crate::{Error, Frame, FrameDecoder, FrameInput, Result, FRAME_SAMPLES, MAX_CODEBOOKS};

const OP: &str = "codes";

/// Codes of `streams` streams, `[streams, n_q, frames]` row-major.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodesBatch {
    pub streams: usize,
    pub n_q: usize,
    pub frames: usize,
    pub codes: Vec<u32>,
}

impl CodesBatch {
    /// Parses an `.npy` integer array `[n_q, T]` or `[B, n_q, T]`.
    pub fn from_npy(
        bytes: &[u8],
        origin: &str,
        cardinality: usize,
        max_codebooks: usize,
    ) -> Result<Self> {
        let a = read_npy(bytes, origin)?;
        match a.data {
            NpyData::Int(v) => Self::from_array(origin, &a.shape, &v, cardinality, max_codebooks),
            NpyData::Float(_) => Err(Error::Dtype {
                op: OP,
                name: origin.into(),
                expected: "an integer dtype".into(),
                found: a.descr,
            }),
        }
    }

    /// Validates rank, `n_q` (1..=min(max_codebooks, 32)) and every code (in `[0, cardinality)`).
    pub fn from_array(
        origin: &str,
        shape: &[usize],
        values: &[i64],
        cardinality: usize,
        max_codebooks: usize,
    ) -> Result<Self> {
        let (streams, n_q, frames) = match *shape {
            [q, t] => (1, q, t),
            [b, q, t] => (b, q, t),
            _ => {
                return Err(Error::input(
                    OP,
                    format!("{origin}: codes must have rank 2 [n_q, T] or 3 [B, n_q, T], found shape {shape:?}"),
                ))
            }
        };
        let limit = max_codebooks.min(MAX_CODEBOOKS);
        if n_q == 0 || n_q > limit {
            return Err(Error::input(
                OP,
                format!("{origin}: n_q = {n_q} (shape {shape:?}); the model takes 1..={limit} codebooks"),
            ));
        }
        if streams == 0 || frames == 0 {
            return Err(Error::input(
                OP,
                format!("{origin}: shape {shape:?} holds no frame"),
            ));
        }
        let mut codes = Vec::with_capacity(values.len());
        for (i, &v) in values.iter().enumerate() {
            if v < 0 || v as u64 >= cardinality as u64 {
                let rest = i % (n_q * frames);
                return Err(Error::CodeOutOfRangeAt {
                    op: OP,
                    stream: i / (n_q * frames),
                    frame: rest % frames,
                    codebook: rest / frames,
                    code: v,
                    cardinality,
                });
            }
            codes.push(v as u32);
        }
        Ok(Self {
            streams,
            n_q,
            frames,
            codes,
        })
    }

    /// The `n_q` codes of one stream at frame `t`, into `out`.
    pub fn frame(&self, stream: usize, t: usize, out: &mut Vec<u32>) {
        out.clear();
        let base = stream * self.n_q * self.frames;
        out.extend((0..self.n_q).map(|q| self.codes[base + q * self.frames + t]));
    }

    /// One stream's codes frame-major: `[frames, n_q]`.
    pub fn frame_major(&self, stream: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.n_q * self.frames);
        let mut frame = Vec::with_capacity(self.n_q);
        for t in 0..self.frames {
            self.frame(stream, t, &mut frame);
            out.extend_from_slice(&frame);
        }
        out
    }
}

/// One stream's codes, `[n_q, frames]` row-major.
#[derive(Clone, Copy, Debug)]
pub struct StreamCodes<'a> {
    pub n_q: usize,
    pub frames: usize,
    pub codes: &'a [u32],
}

impl CodesBatch {
    /// Each stream's codes.
    pub fn streams(&self) -> Vec<StreamCodes<'_>> {
        self.codes
            .chunks(self.n_q * self.frames)
            .map(|codes| StreamCodes {
                n_q: self.n_q,
                frames: self.frames,
                codes,
            })
            .collect()
    }
}

/// Decodes whole streams side by side, stream i in slot i, for as many frames as the shortest
/// has, the last chunk padded past the end: see [`decode_range`]. Returns each stream's PCM.
pub fn decode_streams(
    dec: &mut dyn FrameDecoder,
    streams: &[StreamCodes<'_>],
    after_frame: impl FnMut(),
) -> Result<Vec<Vec<f32>>> {
    let frames = streams.iter().map(|s| s.frames).min().unwrap_or(0);
    let slots: Vec<usize> = (0..streams.len()).collect();
    let range = DecodeRange {
        slots: &slots,
        frames: 0..frames,
        ends_streams: true,
    };
    decode_range(dec, streams, &range, after_frame)
}

/// Which frames of which streams a [`decode_range`] call decodes, and where.
#[derive(Clone, Debug)]
pub struct DecodeRange<'a> {
    /// Stream i goes in `slots[i]`.
    pub slots: &'a [usize],
    pub frames: std::ops::Range<usize>,
    /// The range ends the streams and their slots are reset before they decode again, so a last
    /// partial chunk may run as a whole one padded with code 0 (its extra PCM dropped: the
    /// decoder is causal, so frames after the end change none of the PCM before it). A stream
    /// that goes on from the range's end must not be padded.
    pub ends_streams: bool,
}

/// Decodes frames `range.frames` of each stream side by side: whole chunks of
/// [`FrameDecoder::chunk_frames`] frames per step while they last (when every stream has the
/// same `n_q`), the last partial one padded when the range ends the streams, otherwise the rest
/// one frame per step. Calls `after_frame` once per frame. Returns each stream's PCM for the
/// range.
pub fn decode_range(
    dec: &mut dyn FrameDecoder,
    streams: &[StreamCodes<'_>],
    range: &DecodeRange<'_>,
    mut after_frame: impl FnMut(),
) -> Result<Vec<Vec<f32>>> {
    let (slots, frames) = (range.slots, range.frames.clone());
    let mut out = vec![Vec::with_capacity(frames.len() * FRAME_SAMPLES); streams.len()];
    let k = dec.chunk_frames();
    let n_q = streams.first().map_or(0, |s| s.n_q);
    let mut t = frames.start;
    if k > 1 && streams.iter().all(|s| s.n_q == n_q) {
        let mut codes = vec![0u32; streams.len() * k * n_q];
        let mut pcm = vec![0f32; streams.len() * k * FRAME_SAMPLES];
        while t + k <= frames.end || (range.ends_streams && t < frames.end) {
            let real = k.min(frames.end - t);
            // Frames past the range are code 0, a valid code of every codebook.
            codes.fill(0);
            for (i, s) in streams.iter().enumerate() {
                for f in 0..real {
                    for q in 0..n_q {
                        codes[(i * k + f) * n_q + q] = s.codes[q * s.frames + t + f];
                    }
                }
            }
            dec.step_chunk(slots, &codes, n_q, &mut pcm)?;
            for (o, p) in out.iter_mut().zip(pcm.chunks(k * FRAME_SAMPLES)) {
                o.extend_from_slice(&p[..real * FRAME_SAMPLES]);
            }
            (0..real).for_each(|_| after_frame());
            t += real;
        }
    }
    let mut codes: Vec<Vec<u32>> = streams.iter().map(|s| Vec::with_capacity(s.n_q)).collect();
    let mut pcm = vec![0f32; streams.len() * FRAME_SAMPLES];
    for t in t..frames.end {
        for (c, s) in codes.iter_mut().zip(streams) {
            c.clear();
            c.extend((0..s.n_q).map(|q| s.codes[q * s.frames + t]));
        }
        let inputs: Vec<Frame<'_>> = codes
            .iter()
            .zip(slots)
            .map(|(c, &slot)| Frame {
                slot,
                input: FrameInput::Codes(c),
            })
            .collect();
        dec.step(&inputs, &mut pcm)?;
        for (s, o) in out.iter_mut().enumerate() {
            o.extend_from_slice(&pcm[s * FRAME_SAMPLES..(s + 1) * FRAME_SAMPLES]);
        }
        after_frame();
    }
    Ok(out)
}

/// Serialises one stream's frame-major codes `[frames, n_q]` as an `.npy` `[n_q, frames]` array.
pub fn frame_major_to_npy(n_q: usize, codes: &[u32]) -> Vec<u8> {
    let frames = codes.len() / n_q.max(1);
    let mut values = vec![0i64; n_q * frames];
    for (i, &c) in codes.iter().enumerate() {
        values[(i % n_q) * frames + i / n_q] = c as i64;
    }
    crate::npy::write_npy_i64(&[n_q, frames], &values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_streams_and_frames() {
        let c = CodesBatch::from_array("x", &[2, 2, 3], &(0..12).collect::<Vec<_>>(), 2048, 32)
            .unwrap();
        let mut f = Vec::new();
        c.frame(1, 2, &mut f);
        assert_eq!(f, vec![8, 11]);
        assert_eq!(c.frame_major(0), vec![0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn rejects_out_of_range_rank_and_nq() {
        let e = CodesBatch::from_array("x", &[1, 2], &[0, 2048], 2048, 32).unwrap_err();
        assert!(
            e.to_string()
                .contains("code 2048 at stream 0, frame 1, codebook 0"),
            "{e}"
        );
        assert!(matches!(
            CodesBatch::from_array("x", &[1, 1], &[-1], 2048, 32),
            Err(Error::CodeOutOfRangeAt { code: -1, .. })
        ));
        let rank = CodesBatch::from_array("x", &[4], &[0; 4], 2048, 32).unwrap_err();
        assert!(rank.to_string().contains("rank"));
        let nq = CodesBatch::from_array("x", &[33, 1], &[0; 33], 2048, 32).unwrap_err();
        assert!(nq.to_string().contains("n_q = 33"));
        let model = CodesBatch::from_array("x", &[9, 1], &[0; 9], 2048, 8).unwrap_err();
        assert!(model.to_string().contains("1..=8"));
    }

    #[test]
    fn npy_round_trip_and_float_rejection() {
        let codes = vec![1u32, 2, 3, 4, 5, 6];
        let c = CodesBatch::from_npy(&frame_major_to_npy(2, &codes), "x", 2048, 32).unwrap();
        assert_eq!((c.n_q, c.frames), (2, 3));
        assert_eq!(c.frame_major(0), codes);
        let f = crate::npy::write_npy_f32(&[1, 1], &[0.0]);
        assert!(matches!(
            CodesBatch::from_npy(&f, "f", 2048, 32),
            Err(Error::Dtype { .. })
        ));
    }
}
