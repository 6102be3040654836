//! Band-limited sample-rate conversion (rubato's FFT resampler) of mono audio, whole or streamed.
//!
//! The output holds exactly `round(n * to / from)` samples for `n` input samples, starts with the
//! first input sample (the resampler's delay is trimmed) and ends with the last (the tail is
//! flushed with zeros). Equal rates pass samples through untouched.

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler, WindowFunction};

use crate::error::{Error, Result};

/// Lowest sample rate accepted on either side of a conversion.
pub const MIN_SAMPLE_RATE: u32 = 1_000;
/// Highest sample rate accepted on either side of a conversion.
pub const MAX_SAMPLE_RATE: u32 = 768_000;
/// Target input frames per resampler call: long enough for a sharp anti-aliasing filter and an
/// efficient FFT, short enough to stream.
const CHUNK_FRAMES: usize = 1024;
/// One FFT block per chunk: the longest anti-aliasing filter rubato builds for this chunk size.
const SUB_CHUNKS: usize = 1;

/// Resamples mono `samples` from `from` Hz to `to` Hz.
pub fn resample(samples: &[f32], from: u32, to: u32) -> Result<Vec<f32>> {
    let mut stream = StreamResampler::new(from, to)?;
    stream.push(samples)?;
    stream.finish()
}

/// Incremental resampler: push mono input as it is decoded, take the output at the end.
pub(crate) struct StreamResampler {
    from: u32,
    to: u32,
    /// `None` when the rates are equal.
    converter: Option<Converter>,
    /// Input not yet consumed by the converter.
    pending: Vec<f32>,
    input_total: u64,
    output: Vec<f32>,
}

/// rubato's FFT resampler with its output buffer and the delay still to trim.
struct Converter {
    fft: Fft<f32>,
    /// One call's worth of output.
    scratch: Vec<f32>,
    /// Leading output samples that are the resampler's delay, still to be dropped.
    to_trim: usize,
}

/// An `Error::Resample` for this conversion.
fn resample_error(from: u32, to: u32, reason: impl ToString) -> Error {
    Error::Resample {
        op: "resample",
        from,
        to,
        reason: reason.to_string(),
    }
}

impl Converter {
    fn new(from: u32, to: u32) -> Result<Self> {
        let fft = Fft::<f32>::new_custom(
            from as usize,
            to as usize,
            chunk_frames(from, to),
            SUB_CHUNKS,
            1,
            WindowFunction::BlackmanHarris2,
            FixedSync::Input,
        )
        .map_err(|e| resample_error(from, to, e))?;
        Ok(Self {
            scratch: vec![0.0; fft.output_frames_max()],
            to_trim: fft.output_delay(),
            fft,
        })
    }

    /// Input frames the next call consumes.
    fn chunk(&self) -> usize {
        self.fft.input_frames_next()
    }

    /// Resamples one chunk, `input` (exactly `chunk()` long, of which the first `valid` samples
    /// are real and the rest zero padding), appending what follows the delay to `output`.
    fn run(
        &mut self,
        input: &[f32],
        valid: usize,
        output: &mut Vec<f32>,
    ) -> std::result::Result<(), String> {
        let adapter_in = InterleavedSlice::new(input, 1, input.len()).map_err(|e| e.to_string())?;
        let frames_out = self.scratch.len();
        let mut adapter_out = InterleavedSlice::new_mut(&mut self.scratch, 1, frames_out)
            .map_err(|e| e.to_string())?;
        let indexing = Indexing::new().partial_len(valid);
        let (_, produced) = self
            .fft
            .process_into_buffer(&adapter_in, &mut adapter_out, Some(&indexing))
            .map_err(|e| e.to_string())?;
        let skip = self.to_trim.min(produced);
        self.to_trim -= skip;
        output.extend_from_slice(&self.scratch[skip..produced]);
        Ok(())
    }
}

impl StreamResampler {
    pub(crate) fn new(from: u32, to: u32) -> Result<Self> {
        for rate in [from, to] {
            if !(MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
                return Err(resample_error(
                    from,
                    to,
                    format!(
                        "{rate} Hz is outside the supported [{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}] Hz"
                    ),
                ));
            }
        }
        let converter = if from == to {
            None
        } else {
            Some(Converter::new(from, to)?)
        };
        Ok(Self {
            from,
            to,
            converter,
            pending: Vec::new(),
            input_total: 0,
            output: Vec::new(),
        })
    }

    /// Feeds more input.
    pub(crate) fn push(&mut self, input: &[f32]) -> Result<()> {
        self.input_total += input.len() as u64;
        let Some(conv) = self.converter.as_mut() else {
            self.output.extend_from_slice(input);
            return Ok(());
        };
        self.pending.extend_from_slice(input);
        let chunk = conv.chunk();
        let mut offset = 0;
        while self.pending.len() - offset >= chunk {
            conv.run(
                &self.pending[offset..offset + chunk],
                chunk,
                &mut self.output,
            )
            .map_err(|e| resample_error(self.from, self.to, e))?;
            offset += chunk;
        }
        self.pending.drain(..offset);
        Ok(())
    }

    /// Flushes the tail and returns exactly `round(input * to / from)` samples.
    pub(crate) fn finish(mut self) -> Result<Vec<f32>> {
        let (from, to) = (self.from, self.to);
        let expected = usize::try_from(resampled_len(self.input_total, from, to))
            .map_err(|_| resample_error(from, to, "output too long for this machine"))?;
        if let Some(conv) = self.converter.as_mut() {
            let chunk = conv.chunk();
            // The last partial chunk, zero-padded.
            let rest = self.pending.len();
            self.pending.resize(chunk, 0.0);
            if rest > 0 {
                conv.run(&self.pending, rest, &mut self.output)
                    .map_err(|e| resample_error(from, to, e))?;
                self.pending.fill(0.0);
            }
            // Pump zeros until the delayed tail is out. The bound (enough zeros to push out the
            // delay, one whole FFT block and the missing output, plus margin) stops a misbehaving
            // resampler from looping forever.
            let missing =
                expected.saturating_sub(self.output.len()) + conv.to_trim + conv.scratch.len();
            let per_call = chunk.max(1) as f64 * f64::from(to) / f64::from(from);
            let mut calls_left = (missing as f64 / per_call).ceil() as usize + 8;
            while self.output.len() < expected {
                if calls_left == 0 {
                    return Err(resample_error(
                        from,
                        to,
                        format!(
                            "resampler produced {} of {expected} samples",
                            self.output.len()
                        ),
                    ));
                }
                calls_left -= 1;
                conv.run(&self.pending, 0, &mut self.output)
                    .map_err(|e| resample_error(from, to, e))?;
            }
        }
        self.output.truncate(expected);
        Ok(self.output)
    }
}

/// The input FFT block: a multiple of `from / gcd(from, to)` (the smallest block rubato can
/// use) near `CHUNK_FRAMES` and even, because an odd block puts the filter's centre between two
/// samples and leaves a half-input-sample delay that whole-sample trimming cannot remove.
fn chunk_frames(from: u32, to: u32) -> usize {
    let block = (from / gcd(from, to)) as usize;
    let mut blocks = CHUNK_FRAMES.div_ceil(block).max(1);
    if (blocks * block) % 2 == 1 {
        blocks += 1;
    }
    blocks * block
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// Samples that `n` input samples resample to: `round(n * to / from)`, without floating-point error.
pub fn resampled_len(n: u64, from: u32, to: u32) -> u64 {
    let num = u128::from(n) * u128::from(to);
    let den = u128::from(from.max(1));
    // At most n * MAX_SAMPLE_RATE / MIN_SAMPLE_RATE, which fits in u64 for any real input.
    ((num + den / 2) / den) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resampled_len_rounds_to_nearest() {
        assert_eq!(resampled_len(44_100, 44_100, 24_000), 24_000);
        assert_eq!(resampled_len(1, 44_100, 24_000), 1); // 0.544 rounds up
        assert_eq!(resampled_len(1, 48_000, 24_000), 1); // 0.5 rounds half up
        assert_eq!(resampled_len(3, 8_000, 24_000), 9);
        assert_eq!(resampled_len(0, 16_000, 24_000), 0);
    }

    #[test]
    fn fft_blocks_are_even_multiples_of_the_minimum_block() {
        assert_eq!(chunk_frames(44_100, 24_000), 1_176); // 147 * 8, not 147 * 7
        assert_eq!(chunk_frames(48_000, 24_000), 1_024);
        assert_eq!(chunk_frames(11_025, 24_000), 1_176);
        assert_eq!(chunk_frames(22_051, 24_000), 44_102);
        assert_eq!(gcd(44_100, 24_000), 300);
    }

    #[test]
    fn streaming_in_odd_pieces_matches_one_shot() {
        let input: Vec<f32> = (0..10_000)
            .map(|i| ((i as f32) * 0.01).sin() * 0.5)
            .collect();
        let whole = resample(&input, 44_100, 24_000).unwrap();
        let mut stream = StreamResampler::new(44_100, 24_000).unwrap();
        for piece in input.chunks(777) {
            stream.push(piece).unwrap();
        }
        let pieces = stream.finish().unwrap();
        assert_eq!(whole.len(), pieces.len());
        let max_diff = whole
            .iter()
            .zip(&pieces)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(max_diff < 1e-5, "max diff {max_diff}");
    }

    #[test]
    fn rejects_out_of_range_rates() {
        assert!(matches!(
            resample(&[0.0; 10], 0, 24_000),
            Err(Error::Resample { from: 0, .. })
        ));
        assert!(matches!(
            resample(&[0.0; 10], 24_000, 10_000_000),
            Err(Error::Resample { to: 10_000_000, .. })
        ));
    }
}
