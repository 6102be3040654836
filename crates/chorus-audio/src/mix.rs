//! Channel down-mixing: every source becomes mono as the mean of its channels.

/// Appends the per-frame mean of `interleaved` (with `channels` channels) to `out`.
///
/// A trailing partial frame (fewer than `channels` samples) is ignored; callers pass whole frames.
pub(crate) fn append_mono(interleaved: &[f32], channels: usize, out: &mut Vec<f32>) {
    if channels <= 1 {
        out.extend_from_slice(interleaved);
        return;
    }
    let scale = 1.0 / channels as f32;
    out.extend(
        interleaved
            .chunks_exact(channels)
            .map(|frame| frame.iter().sum::<f32>() * scale),
    );
}

#[cfg(test)]
mod tests {
    use super::append_mono;

    #[test]
    fn stereo_and_surround_average_their_channels() {
        let mut out = vec![9.0];
        append_mono(&[1.0, 0.0, -1.0, 0.5], 2, &mut out);
        assert_eq!(out, vec![9.0, 0.5, -0.25]);

        let mut out = Vec::new();
        append_mono(&[0.3, 0.6, 0.9, 1.0, 1.0, 1.0], 3, &mut out);
        assert!((out[0] - 0.6).abs() < 1e-6 && (out[1] - 1.0).abs() < 1e-6);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn mono_passes_through() {
        let mut out = Vec::new();
        append_mono(&[0.25, -0.5], 1, &mut out);
        assert_eq!(out, vec![0.25, -0.5]);
    }
}
