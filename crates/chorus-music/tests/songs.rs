//! Many songs at once: a song's codes and hiddens do not depend on which songs share its steps,
//! songs join and leave at any frame, KV blocks come and go with them, and bad requests change
//! nothing.

mod common;

use std::collections::HashMap;

use chorus_music::prompt::PromptIds;
use chorus_music::song::LEVELS;
use chorus_music::{EndReason, Sampling, SongEvent, SongId, SongRequest};
use common::*;

const CONTEXT: usize = 96;
const VOCAB: usize = 200_000;

/// A prompt of `len` ids drawn from `seed`.
fn prompt(seed: u64, len: usize) -> PromptIds {
    let mut rng = chorus_core::rng::SplitMix64::new(seed);
    let cond = (0..len)
        .map(|_| (rng.next_u64() % 151_643) as u32)
        .collect();
    PromptIds::from_cond(cond, VOCAB).unwrap()
}

fn request(seed: u64, len: usize, frames: usize) -> SongRequest {
    SongRequest {
        prompt: prompt(seed, len),
        max_frames: frames,
        sampling: Sampling::Seeded(seed),
        allow_end: false,
        forced: None,
    }
}

/// Everything a song produced: codes and hiddens of each frame, and how it ended.
#[derive(Default, Debug, PartialEq)]
struct Output {
    codes: Vec<[u32; LEVELS]>,
    hidden: Vec<u32>,
    end: Option<(EndReason, usize)>,
}

fn record(outs: &mut HashMap<SongId, Output>) -> impl FnMut(SongEvent<'_>) + '_ {
    move |ev| match ev {
        SongEvent::Frame {
            song,
            codes,
            hidden,
            index,
        } => {
            let o = outs.entry(song).or_default();
            assert_eq!(o.codes.len(), index, "frames arrive in order");
            o.codes.push(codes);
            o.hidden.extend(hidden.iter().map(|x| x.to_bits()));
        }
        SongEvent::Ended {
            song,
            reason,
            frames,
        } => outs.entry(song).or_default().end = Some((reason, frames)),
    }
}

#[test]
fn a_song_is_bit_identical_alone_and_among_others_joining_and_leaving() {
    let model = small_model(1.0);
    // Alone.
    let mut st = stage(&model, 1, CONTEXT);
    let mut alone = HashMap::new();
    let a = st.add_song(request(1, 20, 10)).unwrap();
    while st.active() > 0 {
        st.step(&mut record(&mut alone)).unwrap();
    }
    let alone = alone.remove(&a).unwrap();
    assert_eq!(alone.end, Some((EndReason::MaxFrames, 10)));
    assert_eq!(alone.codes.len(), 10);

    // Among others: B from the start (an idle stage prefills it whole), D and A join it (each
    // prefilled in a chunk inside a frame of the songs before it), C joins at frame 3, D is
    // cancelled at frame 5; buckets of 1, 2, 4 songs are all used.
    let mut st = stage(&model, 4, CONTEXT);
    let mut outs = HashMap::new();
    let b = st.add_song(request(2, 30, 12)).unwrap();
    let d = st.add_song(request(4, 25, 20)).unwrap();
    let a = st.add_song(request(1, 20, 10)).unwrap();
    for f in 0..30 {
        if f == 3 {
            st.add_song(request(3, 40, 6)).unwrap();
        }
        if f == 5 {
            st.cancel(d).unwrap();
        }
        st.step(&mut record(&mut outs)).unwrap();
    }
    assert_eq!(st.active(), 0);
    let together = outs.remove(&a).unwrap();
    assert_eq!(
        together, alone,
        "song A must not depend on the songs beside it"
    );
    assert_eq!(outs[&b].end, Some((EndReason::MaxFrames, 12)));
    assert!(
        outs.get(&d).is_none_or(|o| o.end.is_none()),
        "a cancelled song reports no end event"
    );
    // Distinct depth hiddens (not the aliased position-7 output of the public accelerated path).
    let h = 256;
    let frame = &together.hidden[..LEVELS * h];
    for i in 1..LEVELS {
        for j in 0..i {
            assert_ne!(
                frame[i * h..(i + 1) * h],
                frame[j * h..(j + 1) * h],
                "frame hidden parts {j} and {i} are equal"
            );
        }
    }
}

/// Runs `reqs` (prompt length, frames, seed, the frame of the stage it joins at) on a stage that
/// prefills `chunk` tokens per frame (0: whole prompts); returns each song's output.
fn run_joins(chunk: usize, reqs: &[(usize, usize, u64, usize)]) -> Vec<Output> {
    let model = small_model(1.0);
    let mut opts = chorus_music::StageOptions::for_songs(reqs.len(), CONTEXT).unwrap();
    opts.prefill_chunk = chunk;
    let be = chorus_cpu::CpuBackend::new(Some(2)).unwrap();
    let mut st = chorus_music::SemanticStage::new(be, &model, opts).unwrap();
    let mut outs = HashMap::new();
    let mut ids = vec![None; reqs.len()];
    for f in 0..200 {
        for (i, &(len, frames, seed, at)) in reqs.iter().enumerate() {
            if at == f {
                ids[i] = Some(st.add_song(request(seed, len, frames)).unwrap());
                if chunk > 0 && f > 0 {
                    assert!(st.joining() > 0, "a song joining running songs is chunked");
                }
            }
        }
        st.step(&mut record(&mut outs)).unwrap();
        if f > reqs.iter().map(|r| r.3).max().unwrap() && st.active() == 0 {
            break;
        }
    }
    assert_eq!(st.active(), 0);
    assert_eq!(st.kv_blocks().0, 0, "every block returns");
    ids.iter()
        .map(|id| outs.remove(&id.unwrap()).unwrap())
        .collect()
}

#[test]
fn a_prompt_prefilled_in_chunks_inside_other_songs_frames_equals_it_prefilled_whole() {
    // Chunks of 8: 20 tokens take 0..8, 8..16 and 12..20 (the last recomputes 12..16); 5 tokens
    // one chunk padded to 8; 16 tokens exactly two; 3 tokens join together with another song.
    let reqs = [
        (24, 14, 11, 0),
        (20, 6, 12, 1),
        (5, 6, 13, 2),
        (16, 5, 14, 2),
        (3, 4, 15, 6),
    ];
    let whole = run_joins(0, &reqs);
    for chunk in [8, 64] {
        let chunked = run_joins(chunk, &reqs);
        for (i, (c, w)) in chunked.iter().zip(&whole).enumerate() {
            assert_eq!(w.end, Some((EndReason::MaxFrames, reqs[i].1)), "song {i}");
            assert_eq!(c, w, "song {i} differs when prefilled in chunks of {chunk}");
        }
    }
}

#[test]
fn a_song_cancelled_while_its_prompt_is_chunked_leaves_the_others_untouched() {
    let model = small_model(1.0);
    let alone = run_joins(8, &[(24, 8, 21, 0)]).remove(0);
    let mut opts = chorus_music::StageOptions::for_songs(2, CONTEXT).unwrap();
    opts.prefill_chunk = 8;
    let be = chorus_cpu::CpuBackend::new(Some(2)).unwrap();
    let mut st = chorus_music::SemanticStage::new(be, &model, opts).unwrap();
    let mut outs = HashMap::new();
    let a = st.add_song(request(21, 24, 8)).unwrap();
    st.step(&mut record(&mut outs)).unwrap();
    let b = st.add_song(request(22, 40, 8)).unwrap();
    st.step(&mut record(&mut outs)).unwrap();
    assert_eq!(st.joining(), 1, "40 tokens take five chunks of 8");
    st.cancel(b).unwrap();
    assert_eq!(st.joining(), 0);
    while st.active() > 0 {
        st.step(&mut record(&mut outs)).unwrap();
    }
    assert!(
        !outs.contains_key(&b),
        "a song cancelled while joining emits nothing"
    );
    assert_eq!(outs.remove(&a).unwrap(), alone);
    assert_eq!(st.kv_blocks().0, 0);
}

#[test]
fn the_same_seed_gives_the_same_song_and_another_seed_another() {
    let model = small_model(1.0);
    let run = |seed: u64| {
        let mut st = stage(&model, 1, CONTEXT);
        let mut outs = HashMap::new();
        let mut req = request(9, 20, 6);
        req.sampling = Sampling::Seeded(seed);
        let id = st.add_song(req).unwrap();
        while st.active() > 0 {
            st.step(&mut record(&mut outs)).unwrap();
        }
        outs.remove(&id).unwrap()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5).codes, run(6).codes);
}

#[test]
fn kv_blocks_are_reserved_at_admission_taken_as_songs_grow_and_returned() {
    let model = small_model(1.0);
    let mut opts = chorus_music::StageOptions::for_songs(2, 600).unwrap();
    opts.block_size = 16;
    // A 20-token prompt with 10 frames needs 31 positions: 2 blocks per row, 4 per song.
    opts.kv_blocks = 1 + 6;
    let mut st = chorus_music::SemanticStage::new(
        chorus_cpu::CpuBackend::new(Some(2)).unwrap(),
        &model,
        opts,
    )
    .unwrap();
    assert_eq!(st.kv_blocks(), (0, 6, 6));
    let a = st.add_song(request(1, 20, 10)).unwrap();
    // The prompt and the first feedback (21 positions) take 2 blocks per row at once.
    assert_eq!(st.kv_blocks(), (4, 2, 6));
    let err = st.add_song(request(2, 20, 10)).unwrap_err().to_string();
    assert!(
        err.contains("KV pool busy") && err.contains("needs 4 blocks, 2 of 6"),
        "{err}"
    );
    assert_eq!(st.active(), 1, "a refused song leaves no trace");
    let mut outs = HashMap::new();
    st.step(&mut record(&mut outs)).unwrap();
    st.cancel(a).unwrap();
    assert_eq!(st.kv_blocks(), (0, 6, 6), "cancelling returns every block");
    // Now it fits, runs to the end, and its blocks return.
    st.add_song(request(2, 20, 10)).unwrap();
    while st.active() > 0 {
        st.step(&mut record(&mut outs)).unwrap();
    }
    assert_eq!(st.kv_blocks(), (0, 6, 6));
}

#[test]
fn blocks_are_taken_as_positions_cross_block_boundaries() {
    let model = small_model(1.0);
    let mut opts = chorus_music::StageOptions::for_songs(1, 64).unwrap();
    opts.block_size = 8;
    opts.kv_blocks = 1 + 2 * 8;
    let mut st = chorus_music::SemanticStage::new(
        chorus_cpu::CpuBackend::new(Some(2)).unwrap(),
        &model,
        opts,
    )
    .unwrap();
    // Prompt 7: positions 0..=7 (prompt + first feedback) fit one block per row.
    st.add_song(request(3, 7, 20)).unwrap();
    assert_eq!(st.kv_blocks().0, 2);
    let mut outs = HashMap::new();
    st.step(&mut record(&mut outs)).unwrap(); // wrote position 7
    assert_eq!(st.kv_blocks().0, 2);
    st.step(&mut record(&mut outs)).unwrap(); // position 8: a second block per row
    assert_eq!(st.kv_blocks().0, 4);
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let model = small_model(1.0);
    // Reference: song A alone.
    let mut st = stage(&model, 2, CONTEXT);
    let mut clean = HashMap::new();
    let a = st.add_song(request(1, 20, 6)).unwrap();
    while st.active() > 0 {
        st.step(&mut record(&mut clean)).unwrap();
    }
    // The same with bad requests in between.
    let mut st = stage(&model, 2, CONTEXT);
    let mut outs = HashMap::new();
    let a2 = st.add_song(request(1, 20, 6)).unwrap();
    st.step(&mut record(&mut outs)).unwrap();
    let too_long = request(5, 90, 10);
    let e = st.add_song(too_long).unwrap_err().to_string();
    assert!(e.contains("exceed the stage's max context 96"), "{e}");
    let mut bad_code = request(5, 20, 4);
    bad_code.forced = Some(vec![[0, 0, 5000, 0, 0, 0, 0, 0]]);
    let e = st.add_song(bad_code).unwrap_err().to_string();
    assert!(
        e.contains("code 5000") && e.contains("codebook 2") && e.contains("[0, 1024)"),
        "{e}"
    );
    let mut bad_id = request(5, 20, 4);
    bad_id.prompt.cond[3] = 250_000;
    let e = st.add_song(bad_id).unwrap_err().to_string();
    assert!(
        e.contains("250000") && e.contains("vocabulary of 200000"),
        "{e}"
    );
    let mut zero = request(5, 20, 4);
    zero.max_frames = 0;
    assert!(st.add_song(zero).is_err());
    assert!(st
        .cancel(12345)
        .unwrap_err()
        .to_string()
        .contains("no running song 12345"));
    assert_eq!(st.active(), 1);
    while st.active() > 0 {
        st.step(&mut record(&mut outs)).unwrap();
    }
    assert_eq!(outs.remove(&a2), clean.remove(&a));
}

#[test]
fn full_slots_are_a_clear_busy() {
    let model = small_model(1.0);
    let mut st = stage(&model, 1, CONTEXT);
    st.add_song(request(1, 20, 5)).unwrap();
    let e = st.add_song(request(2, 20, 5)).unwrap_err().to_string();
    assert!(e.contains("busy: all 1 song slots are in use"), "{e}");
}

#[test]
fn prompt_rows_of_different_lengths_are_refused() {
    let model = small_model(1.0);
    let mut st = stage(&model, 1, CONTEXT);
    let mut req = request(1, 20, 4);
    req.prompt.uncond.pop();
    let e = st.add_song(req).unwrap_err().to_string();
    assert!(
        e.contains("unconditional prompt row has 19 tokens, the conditional row 20"),
        "{e}"
    );
    assert_eq!(st.active(), 0);
    assert_eq!(st.kv_blocks().0, 0, "nothing reserved or taken");
}
