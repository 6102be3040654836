//! Pipelined steps (`launch_step` / `finish_step`): two steps queued at once, alternating
//! staging areas, resets between them, equal to the same schedule run step by step.

mod common;

use chorus_core::{Frame, FrameDecoder, FrameInput, FRAME_SAMPLES};
use common::{codes, decoder, tiny_model};

/// Slots of each step; `None` resets slot 1.
const SCHEDULE: &[Option<&[usize]>] = &[
    Some(&[0, 1]),
    Some(&[1]),
    Some(&[2, 0, 1]),
    None,
    Some(&[1, 2]),
    Some(&[0]),
    Some(&[2, 1, 0]),
];

fn frames_of(step: usize, slots: &[usize]) -> Vec<Vec<u32>> {
    slots
        .iter()
        .map(|&s| codes((step * 10 + s) as u64 + 1, 1, 8).remove(0))
        .collect()
}

#[test]
fn pipelined_steps_equal_synchronous_steps() {
    let model = tiny_model();
    let mut sync = decoder(model, 3, &[1, 2, 4]);
    let mut want = Vec::new();
    for (i, step) in SCHEDULE.iter().enumerate() {
        match step {
            Some(slots) => {
                let c: Vec<u32> = frames_of(i, slots).concat();
                want.push(sync.step_codes(slots, &c, 8).unwrap());
            }
            None => sync.reset(1).unwrap(),
        }
    }
    let mut piped = decoder(model, 3, &[1, 2, 4]);
    let mut got = Vec::new();
    let mut queued = 0;
    let mut pcm = vec![0f32; 4 * FRAME_SAMPLES];
    for (i, step) in SCHEDULE.iter().enumerate() {
        match step {
            Some(slots) => {
                let frames = frames_of(i, slots);
                let inputs: Vec<Frame<'_>> = slots
                    .iter()
                    .zip(&frames)
                    .map(|(&slot, c)| Frame {
                        slot,
                        input: FrameInput::Codes(c),
                    })
                    .collect();
                if queued == 2 {
                    let done = piped.finish_step(&mut pcm).unwrap();
                    got.push(pcm[..done.rows * FRAME_SAMPLES].to_vec());
                    queued -= 1;
                }
                piped.launch_step(&inputs).unwrap();
                queued += 1;
            }
            // Resets are ordered after the queued steps, as on a device queue.
            None => piped.reset(1).unwrap(),
        }
    }
    while queued > 0 {
        let done = piped.finish_step(&mut pcm).unwrap();
        assert!(done.device_seconds >= 0.0);
        got.push(pcm[..done.rows * FRAME_SAMPLES].to_vec());
        queued -= 1;
    }
    assert_eq!(got, want);
}

#[test]
fn pipelined_misuse_is_refused_without_harm() {
    let model = tiny_model();
    let mut d = decoder(model, 2, &[1, 2]);
    let c = codes(5, 1, 8).remove(0);
    let frame = [Frame {
        slot: 0,
        input: FrameInput::Codes(&c),
    }];
    let mut pcm = vec![0f32; 2 * FRAME_SAMPLES];
    assert!(d.finish_step(&mut pcm).is_err(), "nothing queued");
    d.launch_step(&frame).unwrap();
    // A synchronous step would reuse a staging area the queued step has not handed back.
    let e = d.step_codes(&[1], &c, 8).unwrap_err().to_string();
    assert!(e.contains("queued"), "{e}");
    d.launch_step(&frame).unwrap();
    let e = d.launch_step(&frame).unwrap_err().to_string();
    assert!(e.contains("already queued"), "{e}");
    // A refused launch (bad code) queues nothing.
    let bad = vec![4096u32; 8];
    let bad_frame = [Frame {
        slot: 1,
        input: FrameInput::Codes(&bad),
    }];
    d.finish_step(&mut pcm).unwrap();
    assert!(d.launch_step(&bad_frame).is_err());
    d.finish_step(&mut pcm).unwrap();
    assert!(
        d.finish_step(&mut pcm).is_err(),
        "the refused launch queued a step"
    );
    // The CPU runs programs on the calling thread: the engine should not pipeline it.
    assert_eq!(d.pipeline_depth(), 0);
}
