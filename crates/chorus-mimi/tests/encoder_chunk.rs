//! Long-chunk encode steps: `step_chunk` encodes many consecutive frames of each slot in one
//! program (the convolutions over the whole chunk with their history, one causal windowed
//! attention over the chunk's tokens) and must give the codes of as many frame-by-frame steps,
//! leave each slot where streaming would (so a file continues as a stream), and refuse bad input
//! without touching any state.

use chorus_core::{AudioFrame, Buckets, FrameEncoder, FRAME_SAMPLES};
use chorus_cpu::CpuBackend;
use chorus_mimi::random::{random_model, small_config, RANDOM_MODEL_SEED};
use chorus_mimi::{EncoderOptions, SlotEncoder};

/// 14 frames = 28 tokens: past the small model's 10-token window several times over.
const FRAMES: usize = 14;
const CHUNK: usize = 4;
const N_Q: usize = 8;

fn encoder(max_slots: usize, buckets: &[usize], chunk: usize) -> SlotEncoder<CpuBackend> {
    let model = random_model(&small_config(), RANDOM_MODEL_SEED).unwrap();
    SlotEncoder::from_weights(
        CpuBackend::new(Some(2)).unwrap(),
        &model.config,
        &model.weights,
        EncoderOptions {
            max_slots,
            buckets: Buckets::new(buckets).unwrap(),
            chunk_frames: chunk,
        },
    )
    .unwrap()
}

/// A distinct test signal per stream: two tones and a click train.
fn signal(stream: usize) -> Vec<f32> {
    (0..FRAMES * FRAME_SAMPLES)
        .map(|i| {
            let t = i as f32 / 24_000.0;
            let f = 190.0 + 60.0 * stream as f32;
            0.4 * (t * f * std::f32::consts::TAU).sin()
                + 0.2 * (t * 2.7 * f * std::f32::consts::TAU).sin()
                + if i % 911 == 0 { 0.3 } else { 0.0 }
        })
        .collect()
}

/// Codes of `signal(stream)` for every stream, frame by frame, each stream alone in slot 0:
/// `[frames, N_Q]` flat per stream.
fn streamed(streams: usize) -> Vec<Vec<u32>> {
    (0..streams)
        .map(|i| {
            let mut enc = encoder(1, &[1], 1);
            let s = signal(i);
            let nq_max = enc.max_codebooks();
            let mut row = vec![0u32; nq_max];
            let mut out = Vec::new();
            for f in 0..FRAMES {
                let frame = AudioFrame {
                    slot: 0,
                    pcm: &s[f * FRAME_SAMPLES..(f + 1) * FRAME_SAMPLES],
                    n_q: N_Q,
                };
                enc.step(&[frame], &mut row, None).unwrap();
                out.extend_from_slice(&row[..N_Q]);
            }
            // Codes that never vary would make every comparison here trivially equal.
            assert!(
                out.iter().any(|&c| c != out[0]),
                "stream {i}: constant codes"
            );
            out
        })
        .collect()
}

/// Frames `[from, from + k)` of every signal, `[streams, k * FRAME_SAMPLES]` flat.
fn chunk_pcm(signals: &[Vec<f32>], from: usize, k: usize) -> Vec<f32> {
    signals
        .iter()
        .flat_map(|s| {
            s[from * FRAME_SAMPLES..(from + k) * FRAME_SAMPLES]
                .iter()
                .copied()
        })
        .collect()
}

/// Steps frame `f` of every signal in one frame-by-frame step; appends each stream's codes.
fn frame_step(
    enc: &mut SlotEncoder<CpuBackend>,
    slots: &[usize],
    signals: &[Vec<f32>],
    f: usize,
    got: &mut [Vec<u32>],
) {
    let nq_max = enc.max_codebooks();
    let frames: Vec<AudioFrame<'_>> = slots
        .iter()
        .zip(signals)
        .map(|(&slot, s)| AudioFrame {
            slot,
            pcm: &s[f * FRAME_SAMPLES..(f + 1) * FRAME_SAMPLES],
            n_q: N_Q,
        })
        .collect();
    let mut codes = vec![0u32; slots.len() * nq_max];
    enc.step(&frames, &mut codes, None).unwrap();
    for (g, row) in got.iter_mut().zip(codes.chunks_exact(nq_max)) {
        g.extend_from_slice(&row[..N_Q]);
    }
}

/// Steps `k` frames from `from` of every signal in one chunk step; appends each stream's codes.
fn chunk_step(
    enc: &mut SlotEncoder<CpuBackend>,
    slots: &[usize],
    signals: &[Vec<f32>],
    from: usize,
    got: &mut [Vec<u32>],
) {
    let k = enc.chunk_frames();
    let pcm = chunk_pcm(signals, from, k);
    let mut codes = vec![0u32; slots.len() * k * N_Q];
    enc.step_chunk(slots, &pcm, N_Q, &mut codes, None).unwrap();
    for (g, c) in got.iter_mut().zip(codes.chunks_exact(k * N_Q)) {
        g.extend_from_slice(c);
    }
}

#[test]
fn chunks_equal_frame_steps_and_the_stream_continues() {
    let want = streamed(3);
    let signals: Vec<Vec<f32>> = (0..3).map(signal).collect();
    // Three streams in scattered slots, a bucket of 4 (one padding row): one frame step first
    // (so chunks start at an odd position), three chunks across the window, then frame steps.
    let mut enc = encoder(5, &[1, 4], CHUNK);
    assert_eq!(enc.chunk_frames(), CHUNK);
    let slots = [4usize, 0, 2];
    let mut got = vec![Vec::new(); 3];
    frame_step(&mut enc, &slots, &signals, 0, &mut got);
    for c in 0..3 {
        chunk_step(&mut enc, &slots, &signals, 1 + c * CHUNK, &mut got);
    }
    for f in 1 + 3 * CHUNK..FRAMES {
        frame_step(&mut enc, &slots, &signals, f, &mut got);
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), FRAMES * N_Q);
        assert_eq!(g, w, "stream {i}: chunked codes differ from streaming");
    }
}

#[test]
fn one_chunk_over_the_whole_file_equals_streaming() {
    let want = streamed(2);
    let signals: Vec<Vec<f32>> = (0..2).map(signal).collect();
    let mut enc = encoder(2, &[2], FRAMES);
    let mut got = vec![Vec::new(); 2];
    chunk_step(&mut enc, &[1, 0], &signals, 0, &mut got);
    assert_eq!(got, want);
    // A slot reset after a whole file starts a fresh stream: the same file again, the same codes.
    enc.reset(1).unwrap();
    enc.reset(0).unwrap();
    let mut again = vec![Vec::new(); 2];
    chunk_step(&mut enc, &[1, 0], &signals, 0, &mut again);
    assert_eq!(again, want);
}

#[test]
fn a_chunk_alone_equals_the_same_chunk_beside_others() {
    let signals: Vec<Vec<f32>> = (0..3).map(signal).collect();
    let mut together = encoder(3, &[4], CHUNK);
    let mut shared = vec![Vec::new(); 3];
    chunk_step(&mut together, &[0, 1, 2], &signals, 0, &mut shared);
    for (i, s) in signals.iter().enumerate() {
        let mut alone = encoder(3, &[1, 4], CHUNK);
        let mut got = vec![Vec::new()];
        chunk_step(&mut alone, &[2], std::slice::from_ref(s), 0, &mut got);
        assert_eq!(got[0], shared[i], "stream {i}");
    }
}

#[test]
fn bad_chunk_input_is_refused_and_changes_nothing() {
    let signals: Vec<Vec<f32>> = (0..2).map(signal).collect();
    let mut enc = encoder(3, &[1, 2], CHUNK);
    let pcm = chunk_pcm(&signals, 0, CHUNK);
    let mut codes = vec![0u32; 2 * CHUNK * N_Q];
    let mut refused = |slots: &[usize], pcm: &[f32], n_q: usize, codes: &mut [u32], what: &str| {
        let e = enc.step_chunk(slots, pcm, n_q, codes, None).unwrap_err();
        assert!(
            e.to_string().contains(what),
            "expected `{what}` in the error, got: {e}"
        );
    };
    refused(&[0, 0], &pcm, N_Q, &mut codes, "twice");
    refused(&[0, 3], &pcm, N_Q, &mut codes, "3");
    refused(&[0, 1], &pcm, 0, &mut codes, "n_q 0");
    refused(&[0, 1], &pcm[1..], N_Q, &mut codes, "samples");
    refused(&[0, 1], &pcm, N_Q, &mut codes[1..], "codes buffer");
    let mut nan = pcm.clone();
    nan[CHUNK * FRAME_SAMPLES + 7] = f32::NAN;
    refused(&[0, 1], &nan, N_Q, &mut codes, "sample 7 is not finite");
    // Nothing was encoded: the slots still start fresh streams.
    let mut got = vec![Vec::new(); 2];
    for c in 0..FRAMES / CHUNK {
        chunk_step(&mut enc, &[0, 1], &signals, c * CHUNK, &mut got);
    }
    let want = streamed(2);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g[..], w[..g.len()]);
    }
}

/// Relative L2 error of `got` against `want` (a zero reference fails).
fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (f64::from(g) - f64::from(w)).powi(2))
        .sum();
    let den: f64 = want.iter().map(|&w| f64::from(w).powi(2)).sum();
    assert!(den > 0.0, "all-zero reference");
    (num / den).sqrt()
}

#[test]
fn chunk_latents_equal_frame_step_latents() {
    let s = signal(1);
    let mut single = encoder(1, &[1], 1);
    let dim = single.latent_dim();
    let mut want = Vec::new();
    let (mut row, mut lat) = (vec![0u32; single.max_codebooks()], vec![0f32; dim]);
    for f in 0..FRAMES {
        let frame = AudioFrame {
            slot: 0,
            pcm: &s[f * FRAME_SAMPLES..(f + 1) * FRAME_SAMPLES],
            n_q: N_Q,
        };
        single.step(&[frame], &mut row, Some(&mut lat)).unwrap();
        want.extend_from_slice(&lat);
    }
    let mut enc = encoder(2, &[2], FRAMES);
    let (mut codes, mut got) = (vec![0u32; FRAMES * N_Q], vec![0f32; FRAMES * dim]);
    enc.step_chunk(&[1], &s, N_Q, &mut codes, Some(&mut got))
        .unwrap();
    let err = rel_l2(&got, &want);
    println!("chunk latents vs frame steps: relative L2 {err:.2e}");
    assert!(err <= 1e-6, "relative L2 {err:.2e}");
    let wrong = enc
        .step_chunk(&[0], &s, N_Q, &mut codes, Some(&mut got[1..]))
        .unwrap_err();
    assert!(wrong.to_string().contains("latents buffer"), "{wrong}");
}
