//! Whole-sequence steps: `step_chunk` decodes several consecutive frames of each slot in one
//! program and must equal as many single-frame steps, across the attention window, mixed with
//! single steps on the same slots, and refuse bad input without touching any state.

mod common;

use chorus_core::codes::{decode_range, decode_streams, DecodeRange, StreamCodes};
use chorus_core::{Buckets, FrameDecoder, FRAME_SAMPLES, WHOLE_FILE_DECODE_CHUNK};
use chorus_cpu::CpuBackend;
use chorus_mimi::{DecoderOptions, SlotDecoder};
use common::{codes, tiny_model};

/// Largest difference allowed between a chunk and single steps: the same f32 arithmetic with
/// products of other shapes.
const TOL: f32 = 1e-5;
const CHUNK: usize = 4;

fn chunked(max_slots: usize, buckets: &[usize], chunk: usize) -> SlotDecoder<CpuBackend> {
    let model = tiny_model();
    let opts = DecoderOptions {
        max_slots,
        buckets: Buckets::new(buckets).unwrap(),
        chunk_frames: chunk,
    };
    SlotDecoder::from_weights(
        CpuBackend::new(None).unwrap(),
        &model.config,
        &model.weights,
        opts,
    )
    .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Frames `[from, from + chunk)` of each stream, `[streams, chunk, n_q]` flat.
fn chunk_codes_of(streams: &[Vec<Vec<u32>>], from: usize, chunk: usize) -> Vec<u32> {
    streams
        .iter()
        .flat_map(|s| s[from..from + chunk].iter().flatten().copied())
        .collect()
}

/// Three streams in scattered slots (a bucket of 4 with one padding row): `chunks` chunk steps
/// of `chunk` frames each against single steps, every frame's PCM within `TOL`.
fn chunks_equal_single_steps(chunk: usize, chunks: usize) {
    let n_q = 8;
    let frames = chunks * chunk;
    let streams: Vec<Vec<Vec<u32>>> = (0..3).map(|s| codes(40 + s, frames, n_q)).collect();
    let mut single = chunked(4, &[1, 4], 1);
    let mut chunky = chunked(4, &[1, 2, 4], chunk);
    assert_eq!(chunky.chunk_frames(), chunk);
    let slots = [2usize, 0, 3];
    let mut want = vec![Vec::new(); 3];
    for t in 0..frames {
        let c: Vec<u32> = streams.iter().flat_map(|s| s[t].iter().copied()).collect();
        let pcm = single.step_codes(&slots, &c, n_q).unwrap();
        for (i, w) in want.iter_mut().enumerate() {
            w.extend_from_slice(&pcm[i * FRAME_SAMPLES..(i + 1) * FRAME_SAMPLES]);
        }
    }
    let mut got = vec![Vec::new(); 3];
    let len = chunk * FRAME_SAMPLES;
    let mut pcm = vec![0f32; 3 * len];
    for f in (0..frames).step_by(chunk) {
        chunky
            .step_chunk(&slots, &chunk_codes_of(&streams, f, chunk), n_q, &mut pcm)
            .unwrap();
        for (i, g) in got.iter_mut().enumerate() {
            g.extend_from_slice(&pcm[i * len..(i + 1) * len]);
        }
    }
    for (g, w) in got.iter().zip(&want) {
        let d = max_diff(g, w);
        assert!(d <= TOL, "chunked decode ({chunk} frames) differs by {d}");
    }
    assert!(
        want[0].iter().any(|&x| x.abs() > 1e-3),
        "the decode is silent"
    );
}

#[test]
fn chunks_equal_single_steps_past_the_window() {
    // 36 chunks of 4 frames = 288 tokens: far past the tiny model's 10-token window, and the
    // 256-entry KV ring wraps (a chunk straddles its end).
    chunks_equal_single_steps(CHUNK, 36);
}

#[test]
fn whole_file_chunks_equal_single_steps_past_the_ring() {
    // Chunks of 96 tokens (a ring of 256 + 96 - 1, rounded up): the fourth wraps it.
    chunks_equal_single_steps(WHOLE_FILE_DECODE_CHUNK, 4);
}

/// `[n_q, frames]` row-major per stream, as code files hold them.
fn planes(streams: &[Vec<Vec<u32>>], n_q: usize) -> Vec<Vec<u32>> {
    streams
        .iter()
        .map(|s| (0..n_q).flat_map(|q| s.iter().map(move |f| f[q])).collect())
        .collect()
}

#[test]
fn whole_file_decode_pads_the_last_chunk_and_equals_single_steps() {
    // 2.5 chunks: two whole chunk steps and a last one padded past the end, against frame steps.
    let (n_q, k) = (8, WHOLE_FILE_DECODE_CHUNK);
    let frames = 2 * k + k / 2;
    let streams: Vec<Vec<Vec<u32>>> = (0..2).map(|s| codes(60 + s, frames, n_q)).collect();
    let planes = planes(&streams, n_q);
    let views: Vec<StreamCodes<'_>> = planes
        .iter()
        .map(|c| StreamCodes {
            n_q,
            frames,
            codes: c,
        })
        .collect();
    let mut single = chunked(2, &[2], 1);
    let want = decode_streams(&mut single, &views, || ()).unwrap();
    let mut long = chunked(2, &[1, 2], k);
    let mut counted = 0;
    let got = decode_streams(&mut long, &views, || counted += 1).unwrap();
    assert_eq!(counted, frames, "one call per real frame");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.len(), frames * FRAME_SAMPLES);
        let d = max_diff(g, w);
        assert!(d <= TOL, "padded whole-file decode differs by {d}");
    }
    // A range that does not end the streams steps its tail frame by frame, so the slots stand
    // where streaming would: the next range continues the streams.
    let mut cont = chunked(2, &[1, 2], k);
    let first = DecodeRange {
        slots: &[1, 0],
        frames: 0..k + 3,
        ends_streams: false,
    };
    let rest = DecodeRange {
        frames: k + 3..frames,
        ends_streams: true,
        ..first.clone()
    };
    let a = decode_range(&mut cont, &views, &first, || ()).unwrap();
    let b = decode_range(&mut cont, &views, &rest, || ()).unwrap();
    for i in 0..2 {
        let joined = [a[i].clone(), b[i].clone()].concat();
        let d = max_diff(&joined, &want[i]);
        assert!(
            d <= TOL,
            "stream {i}: a decode in two ranges differs by {d}"
        );
    }
}

#[test]
fn chunks_and_single_steps_mix_on_one_slot() {
    let n_q = 4;
    let stream = codes(7, 3 * CHUNK + 2, n_q);
    let mut reference = chunked(1, &[1], 1);
    let want: Vec<f32> = stream
        .iter()
        .flat_map(|c| reference.step_codes(&[0], c, n_q).unwrap())
        .collect();
    let mut d = chunked(2, &[1, 2], CHUNK);
    let mut got = Vec::new();
    // One single frame, a chunk, two single frames, a chunk, then the rest one by one.
    let mut t = 0;
    for &take in &[1, CHUNK, 1, 1, CHUNK] {
        if take == 1 {
            got.extend(d.step_codes(&[1], &stream[t], n_q).unwrap());
        } else {
            let c: Vec<u32> = stream[t..t + CHUNK].iter().flatten().copied().collect();
            let mut pcm = vec![0f32; CHUNK * FRAME_SAMPLES];
            d.step_chunk(&[1], &c, n_q, &mut pcm).unwrap();
            got.extend(pcm);
        }
        t += take;
    }
    for c in &stream[t..] {
        got.extend(d.step_codes(&[1], c, n_q).unwrap());
    }
    let diff = max_diff(&got, &want);
    assert!(diff <= TOL, "mixed decode differs by {diff}");
}

/// Refused chunks of `chunk` frames leave the slot where it was.
fn bad_chunks_change_nothing(chunk: usize) {
    let n_q = 8;
    let stream = codes(3, 2 * chunk, n_q);
    let c0: Vec<u32> = stream[..chunk].iter().flatten().copied().collect();
    let c1: Vec<u32> = stream[chunk..].iter().flatten().copied().collect();
    let mut d = chunked(2, &[1, 2], chunk);
    let mut pcm = vec![0f32; chunk * FRAME_SAMPLES];
    d.step_chunk(&[0], &c0, n_q, &mut pcm).unwrap();
    let mut bad = c1.clone();
    bad[2 * n_q + 5] = 2048;
    let e = d
        .step_chunk(&[0], &bad, n_q, &mut pcm)
        .unwrap_err()
        .to_string();
    assert!(e.contains("frame 2, codebook 5"), "{e}");
    let e = d.step_chunk(
        &[0, 0],
        &[c1.clone(), c1.clone()].concat(),
        n_q,
        &mut vec![0f32; 2 * chunk * FRAME_SAMPLES],
    );
    assert!(e.unwrap_err().to_string().contains("twice"));
    let e = d
        .step_chunk(&[5], &c1, n_q, &mut pcm)
        .unwrap_err()
        .to_string();
    assert!(e.contains("slot 5"), "{e}");
    let e = d
        .step_chunk(&[0], &c1[..n_q], n_q, &mut pcm)
        .unwrap_err()
        .to_string();
    assert!(e.contains("frames"), "{e}");
    // The refusals left slot 0 where it was: the next chunk equals a clean run's.
    d.step_chunk(&[0], &c1, n_q, &mut pcm).unwrap();
    let mut clean = chunked(1, &[1], chunk);
    let mut first = vec![0f32; chunk * FRAME_SAMPLES];
    clean.step_chunk(&[0], &c0, n_q, &mut first).unwrap();
    let mut second = vec![0f32; chunk * FRAME_SAMPLES];
    clean.step_chunk(&[0], &c1, n_q, &mut second).unwrap();
    assert_eq!(pcm, second);
}

#[test]
fn bad_chunks_are_refused_and_change_nothing() {
    bad_chunks_change_nothing(CHUNK);
    bad_chunks_change_nothing(WHOLE_FILE_DECODE_CHUNK);
}

#[test]
fn a_frame_by_frame_decoder_chunks_by_single_steps() {
    let n_q = 8;
    let stream = codes(9, 3, n_q);
    let mut d = chunked(1, &[1], 1);
    let mut want = chunked(1, &[1], 1);
    assert_eq!(d.chunk_frames(), 1);
    let c: Vec<u32> = stream[0].clone();
    let mut pcm = vec![0f32; FRAME_SAMPLES];
    d.step_chunk(&[0], &c, n_q, &mut pcm).unwrap();
    assert_eq!(pcm, want.step_codes(&[0], &c, n_q).unwrap());
}
