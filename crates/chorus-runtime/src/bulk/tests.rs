//! The bulk path equals one file at a time, bit for bit, with files of different lengths sharing
//! steps, slots reused, failures and skips reported, and a failed step ending the run.

use super::*;
use crate::device::{open_decoder, DecoderSpec};
use crate::encoder::{open_encoder, EncoderSpec};
use chorus_core::codes::{decode_streams, CodesBatch, StreamCodes};
use chorus_core::{AudioFrame, Buckets, Error, FrameDecoder, FrameEncoder, Result};
use chorus_mimi::checkpoint::LoadedModel;

/// Frames of the test files: shorter and longer than a decode chunk, one empty.
const FRAMES: &[usize] = &[3, 9, 1, 6, 0, 13];
const N_Q: usize = 4;
const CHUNK: usize = 4;

fn model() -> LoadedModel {
    chorus_mimi::random::random_model(
        &chorus_mimi::random::small_config(),
        chorus_mimi::random::RANDOM_MODEL_SEED,
    )
    .unwrap()
}

fn encoder(m: &LoadedModel, slots: usize) -> Box<dyn FrameEncoder + Send> {
    let spec = EncoderSpec {
        device: DeviceKind::Cpu,
        precision: None,
        max_slots: slots,
        buckets: Buckets::new(&[1, 2, 4]).unwrap().capped(slots).unwrap(),
        threads: Some(1),
        cuda_device: 0,
        chunk_frames: CHUNK,
    };
    open_encoder(m, &spec).unwrap()
}

fn decoder(m: &LoadedModel, slots: usize) -> Box<dyn FrameDecoder> {
    let spec = DecoderSpec {
        device: DeviceKind::Cpu,
        precision: None,
        max_slots: slots,
        buckets: Buckets::new(&[1, 2, 4]).unwrap().capped(slots).unwrap(),
        threads: Some(1),
        chunk_frames: CHUNK,
    };
    open_decoder(m, &spec).unwrap()
}

fn audio(file: usize) -> AudioInput {
    let frames = FRAMES[file];
    let samples = (0..frames * FRAME_SAMPLES)
        .map(|i| ((i * (file + 3)) as f32 * 0.01).sin() * 0.3)
        .collect();
    AudioInput {
        samples,
        frames,
        seconds: 0.0,
        truncated: None,
        format: "test".into(),
        source_rate: 24_000,
        source_channels: 1,
    }
}

/// File `file` encoded alone, frame by frame in one slot, as `chorus encode` does.
fn encode_alone(enc: &mut dyn FrameEncoder, file: usize) -> Vec<i64> {
    let a = audio(file);
    let mut codes = vec![0i64; N_Q * a.frames];
    let mut row = vec![0u32; enc.max_codebooks()];
    enc.reset(0).unwrap();
    for (t, pcm) in a.samples.chunks_exact(FRAME_SAMPLES).enumerate() {
        let frame = AudioFrame {
            slot: 0,
            pcm,
            n_q: N_Q,
        };
        enc.step(&[frame], &mut row, None).unwrap();
        for q in 0..N_Q {
            codes[q * a.frames + t] = i64::from(row[q]);
        }
    }
    codes
}

#[test]
fn files_encoded_side_by_side_equal_each_alone() {
    let m = model();
    let mut alone = encoder(&m, 1);
    let want: Vec<Vec<i64>> = (0..FRAMES.len())
        .map(|f| encode_alone(alone.as_mut(), f))
        .collect();
    // Eight list entries: the six files, one that fails and one already done.
    let readers = Readers::spawn(FRAMES.len() + 2, 2, 2, |i| match i {
        i if i < FRAMES.len() => Ok(Some(audio(i))),
        6 => Err(Error::input("test", "file 6 is broken")),
        _ => Ok(None),
    })
    .unwrap();
    // Three slots for six files: slots are reused, from the zero state each time.
    let mut enc = encoder(&m, 3);
    let mut batch = EncodeBatch::new(vec![2, 0, 1], N_Q).unwrap();
    let mut got = vec![None; FRAMES.len()];
    let (mut failed, mut skipped) = (Vec::new(), Vec::new());
    drive(
        &readers,
        &mut batch,
        |b| b.step(enc.as_mut()),
        |o| {
            match o {
                Outcome::Done(id, f) => got[id] = Some(f),
                Outcome::Skipped(id) => skipped.push(id),
                Outcome::Failed(id, e) => failed.push((id, e.to_string())),
            }
            Ok(())
        },
    )
    .unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let g = g
            .as_ref()
            .unwrap_or_else(|| panic!("file {i} never finished"));
        assert_eq!((g.n_q, g.frames), (N_Q, FRAMES[i]), "file {i}");
        assert_eq!(&g.codes, w, "file {i}: codes differ from the file alone");
    }
    assert_eq!(batch.frames_done(), FRAMES.iter().sum::<usize>() as u64);
    assert_eq!(skipped, vec![7]);
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].0 == 6 && failed[0].1.contains("file 6"),
        "{failed:?}"
    );
}

fn codes(file: usize, n_q: usize) -> DecodeInput {
    let frames = FRAMES[file].max(1);
    let values: Vec<i64> = (0..n_q * frames)
        .map(|i| ((i * 37 + file * 11) % 2048) as i64)
        .collect();
    let batch = CodesBatch::from_array("t", &[n_q, frames], &values, 2048, 32).unwrap();
    DecodeInput::new(batch, "t").unwrap()
}

#[test]
fn files_decoded_side_by_side_equal_each_alone() {
    let m = model();
    // Mixed n_q: chunk steps group by n_q, frame steps mix them.
    let inputs: Vec<DecodeInput> = (0..FRAMES.len()).map(|f| codes(f, 2 + f % 3 * 3)).collect();
    let want: Vec<Vec<f32>> = inputs
        .iter()
        .map(|c| {
            // `chorus decode` of one file: a one-slot decoder, chunks then single frames.
            let mut dec = decoder(&m, 1);
            let s = StreamCodes {
                n_q: c.n_q,
                frames: c.frames,
                codes: &c.codes,
            };
            decode_streams(dec.as_mut(), &[s], || {}).unwrap().remove(0)
        })
        .collect();
    let shared = inputs.clone();
    let readers = Readers::spawn(inputs.len(), 2, 1, move |i| -> Result<_> {
        Ok(Some(shared[i].clone()))
    })
    .unwrap();
    let mut dec = decoder(&m, 3);
    let mut batch = DecodeBatch::new(vec![0, 1, 2]).unwrap();
    let mut got = vec![Vec::new(); inputs.len()];
    drive(
        &readers,
        &mut batch,
        |b| b.step(dec.as_mut()),
        |o| {
            if let Outcome::Done(id, pcm) = o {
                got[id] = pcm;
            }
            Ok(())
        },
    )
    .unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), inputs[i].frames * FRAME_SAMPLES, "file {i}");
        assert!(g == w, "file {i}: PCM differs from the file alone");
    }
}

#[test]
fn a_failed_step_ends_the_run_and_a_stream_batch_is_refused() {
    let m = model();
    let readers = Readers::spawn(3, 1, 1, |i| -> Result<_> { Ok(Some(audio(i))) }).unwrap();
    let mut enc = encoder(&m, 2);
    // More codebooks than the model has: the device refuses the first step.
    let mut batch = EncodeBatch::new(vec![0, 1], 40).unwrap();
    let e = drive(&readers, &mut batch, |b| b.step(enc.as_mut()), |_| Ok(()))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("n_q 40"), "{e}");
    let two = CodesBatch::from_array("two.npy", &[2, 1, 3], &[0; 6], 2048, 32).unwrap();
    let e = DecodeInput::new(two, "two.npy").unwrap_err().to_string();
    assert!(e.contains("two.npy") && e.contains("2 streams"), "{e}");
}
