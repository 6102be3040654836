//! Sliding-window attention over per-row rings (Kyutai STT's `context`): a short prefill, then
//! decode steps far past the ring so every entry is rewritten several times, against the CPU
//! backend and the f64 reference over the last `window` positions. Caches start as NaN, so a read
//! outside the window (or of an entry not yet written) poisons the output. The shapes are both
//! STT models' heads (64 x 32 and 128 x 16: the decode kernel, with windows of at most 64 keys
//! one pair per lane group, longer ones split and combined) and the small test model's 16 x 4
//! (the general kernel); every first call is a 2-token prefill (the general kernel).

use super::*;
use crate::paged::*;

/// Heads of kyutai/stt-2.6b-en, kyutai/stt-1b-en_fr and the random-small STT model.
const STT_2B6: Heads = Heads {
    q: 32,
    kv: 32,
    hd: 64,
};
const STT_1B: Heads = Heads {
    q: 16,
    kv: 16,
    hd: 128,
};
const STT_SMALL: Heads = Heads {
    q: 4,
    kv: 4,
    hd: 16,
};

/// Rows 0 and 2 are real streams (rings of blocks `[3, 1]` and `[2, 4]`), row 1 a padded row on
/// the null block. Returns, per call, the outputs of the real rows.
fn run_window<B: LmOps>(
    be: &B,
    heads: Heads,
    (block_size, window): (usize, usize),
    seqs: &[Vec<Vec<f32>>; 2],
    pad: &[f32],
) -> Result<Vec<Vec<f32>>> {
    let kvd = heads.kv_dim();
    let len = 5 * block_size * kvd;
    let init = vec![f32::NAN; len];
    let tables = [3, 1, 0, 0, 2, 4];
    let mut paged = Paged::new(be, heads, (block_size, 2), &tables, (&init, &init))?;
    paged.window = Some(window);
    let per_tok = heads.q * heads.hd;
    let mut outs = Vec::new();
    // A 2-token prefill, then one token per call.
    let mut p = 0;
    let steps = seqs[0].len();
    while p < steps {
        let time = if p == 0 { 2 } else { 1 };
        let mut qkv = Vec::new();
        qkv.extend(seqs[0][p..p + time].concat());
        for _ in 0..time {
            qkv.extend_from_slice(pad);
        }
        qkv.extend(seqs[1][p..p + time].concat());
        let out = paged.call(be, &qkv, &[p as i32, 0, p as i32])?;
        let row = |r: usize| out[r * time * per_tok..(r + 1) * time * per_tok].to_vec();
        outs.push([row(0), row(2)].concat());
        p += time;
    }
    Ok(outs)
}

/// The f64 reference of the same calls.
fn reference(heads: Heads, window: usize, seqs: &[Vec<Vec<f32>>; 2]) -> Vec<Vec<f64>> {
    let kvd = heads.kv_dim();
    let attend = |seq: &[Vec<f32>], p: usize| {
        let first = (p + 1).saturating_sub(window);
        let keys: Vec<f32> = seq[first..=p]
            .iter()
            .flat_map(|r| kv_part(heads, r, 0).to_vec())
            .collect();
        let vals: Vec<f32> = seq[first..=p]
            .iter()
            .flat_map(|r| kv_part(heads, r, 1).to_vec())
            .collect();
        naive(heads, &seq[p], &keys, &vals, keys.len() / kvd)
    };
    // The prefill call: row 0's two tokens, then row 2's.
    let prefill = |seq: &[Vec<f32>]| -> Vec<f64> { (0..2).flat_map(|t| attend(seq, t)).collect() };
    let mut outs = vec![[prefill(&seqs[0]), prefill(&seqs[1])].concat()];
    for p in 2..seqs[0].len() {
        outs.push([attend(&seqs[0], p), attend(&seqs[1], p)].concat());
    }
    outs
}

fn check_window(name: &str, heads: Heads, block_size: usize, window: usize) {
    let mut rng = Rng::new(0x5717 + heads.hd as u64);
    // Past two and a half rings, so every ring entry is rewritten.
    let steps = 5 * block_size + 3;
    let seq = |rng: &mut Rng| -> Vec<Vec<f32>> {
        (0..steps).map(|_| rng.vec(heads.width(), 2.0)).collect()
    };
    let seqs = [seq(&mut rng), seq(&mut rng)];
    let pad = rng.vec(heads.width(), 2.0);
    let want = reference(heads, window, &seqs);
    let cpu_out = run_window(&cpu(), heads, (block_size, window), &seqs, &pad).unwrap();
    let cpu_flat: Vec<f32> = cpu_out.concat();
    let want_flat: Vec<f64> = want.concat();
    assert_ref(
        &format!("{name} cpu"),
        Precision::F32,
        &cpu_flat,
        &want_flat,
    );
    for p in [Precision::F32, Precision::Bf16] {
        let Some(be) = cuda(p) else {
            eprintln!("no CUDA device: skipping {name}");
            return;
        };
        let got = run_window(&be, heads, (block_size, window), &seqs, &pad).unwrap();
        let got: Vec<f32> = got.concat();
        assert_ref(name, p, &got, &want_flat);
        assert_parity(&format!("{name} vs cpu"), p, &got, &cpu_flat);
    }
}

#[test]
fn windowed_decode_stt_2b6_heads() {
    // Window 12 over rings of 2 x 8 entries (the real model: 375 over one block of 375).
    check_window("window stt-2.6b heads", STT_2B6, 8, 12);
}

#[test]
fn windowed_decode_stt_1b_heads() {
    // A ring exactly one entry longer than the window; block size 5 (not a multiple of 4).
    check_window("window stt-1b heads", STT_1B, 5, 9);
}

#[test]
fn windowed_general_kernel_stt_small_heads() {
    check_window("window stt small heads", STT_SMALL, 4, 6);
}

#[test]
fn windowed_decode_splits_stt_2b6_heads() {
    // A window past the one-pair-per-lane-group limit (64 keys): the split kernel and its
    // combine, each query's splits starting at its window's first key.
    check_window("window splits stt-2.6b heads", STT_2B6, 64, 100);
}

#[test]
fn windowed_decode_splits_stt_1b_heads() {
    check_window("window splits stt-1b heads", STT_1B, 48, 90);
}
