//! Optional classifier-free guidance, tie-inclusive top-k and the draw, one song per task.
//!
//! A song's guided value `v[i]` is a pure function of its two logits at `i` and the song's two
//! thresholds, so it is recomputed wherever needed instead of stored: the only vocab-sized memory
//! is one selection buffer per song (for the k-th largest values), taken from the backend's
//! grow-only scratch arena, so steady-state calls allocate nothing.

use crate::{check, CpuBackend};
use chorus_core::lm_ops::{CfgDrawArgs, DrawMode};
use chorus_core::rng::exp_noise;
use chorus_core::{Error, Result};
use rayon::prelude::*;
use std::cmp::Ordering;

/// `nan_to_num`'s replacement for NaN and -inf.
const NEG_BIG: f32 = -1e9;
/// `nan_to_num`'s replacement for +inf.
const POS_BIG: f32 = 1e9;

/// The draw mode an i32 names, or an error.
fn draw_mode(op: &'static str, song: usize, m: i32) -> Result<DrawMode> {
    match m {
        0 => Ok(DrawMode::Greedy),
        1 => Ok(DrawMode::Noise),
        _ => Err(Error::input(
            op,
            format!("song {song}: unknown draw mode {m}"),
        )),
    }
}

/// Descending order with NaN above everything, as `torch.topk` ranks it.
fn descending(a: &f32, b: &f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // Neither is NaN, so `partial_cmp` answers.
        (false, false) => b.partial_cmp(a).unwrap_or(Ordering::Equal),
    }
}

/// `torch.topk(x, k).values[-1]` (duplicates counted, `k` clamped to `x.len()`); reorders `x`.
/// The caller guarantees `k >= 1` and a non-empty `x`.
fn kth_largest(x: &mut [f32], k: usize) -> f32 {
    let k = k.min(x.len());
    *x.select_nth_unstable_by(k - 1, descending).1
}

/// A temperature a noise draw can divide by.
fn positive_temperature(t: f32) -> bool {
    t.is_finite() && t > 0.0
}

/// `nan_to_num(g, nan = -1e9, posinf = 1e9, neginf = -1e9)`.
#[inline(always)]
fn nan_to_num(g: f32) -> f32 {
    if g.is_nan() || g == f32::NEG_INFINITY {
        NEG_BIG
    } else if g == f32::INFINITY {
        POS_BIG
    } else {
        g
    }
}

/// The per-call constants.
struct Params {
    /// `None`: no guidance (`Song::u` is unused).
    cfg_scale: Option<f32>,
    cond_top_k: Option<usize>,
    end: Option<usize>,
    draw_offset: u32,
}

/// One song's inputs.
struct Song<'a> {
    /// Conditional logits `[vocab]`.
    c: &'a [f32],
    /// Unconditional logits `[vocab]` (`c` again without guidance).
    u: &'a [f32],
    mode: DrawMode,
    seed: u64,
    draw: u64,
    /// The `end` column is masked.
    mask_end: bool,
    /// The call's or the song's own (`CfgDrawArgs::row_sampling`).
    temperature: f32,
    top_k: usize,
}

/// Steps 1-5 of [`CfgDrawArgs`] for one song; `buf` is `[vocab]` scratch.
fn draw_song(p: &Params, s: &Song<'_>, buf: &mut [f32]) -> usize {
    let cond_thr = p.cond_top_k.map(|k| {
        buf.copy_from_slice(s.c);
        kth_largest(buf, k)
    });
    let masked_end = if s.mask_end { p.end } else { None };
    let v = |i: usize| -> f32 {
        let c = s.c[i];
        let mut g = p.cfg_scale.map_or(c, |scale| {
            let u = s.u[i];
            u + (c - u) * scale
        });
        if s.mode == DrawMode::Noise {
            g /= s.temperature;
        }
        if cond_thr.is_some_and(|t| c < t) || masked_end == Some(i) {
            g = f32::NEG_INFINITY;
        }
        nan_to_num(g)
    };
    for (i, b) in buf.iter_mut().enumerate() {
        *b = v(i);
    }
    let thr = kth_largest(buf, s.top_k);
    // Ascending index with a strict `>`: the lowest index wins ties.
    let mut best: Option<(usize, f64)> = None;
    // Candidates are the `v[i] >= thr` (`filter`, not a `<` skip: a NaN is never a candidate).
    for (i, x) in (0..s.c.len()).map(|i| (i, v(i))).filter(|&(_, x)| x >= thr) {
        let score = match s.mode {
            DrawMode::Greedy => f64::from(x),
            DrawMode::Noise => f64::from(x) - f64::from(exp_noise(s.seed, s.draw, i as u64)).ln(),
        };
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((i, score));
        }
    }
    // Never `None`: the largest `v` is always a candidate.
    best.map_or(0, |(i, _)| i)
}

pub(super) fn cfg_draw(be: &CpuBackend, a: CfgDrawArgs<'_, CpuBackend>) -> Result<()> {
    const OP: &str = "cfg_draw";
    let (songs, vocab, stride, col) = (a.songs, a.vocab, a.codes_stride, a.col);
    if songs == 0 {
        return Ok(());
    }
    if vocab == 0 || vocab > i32::MAX as usize || col >= stride {
        return Err(Error::input(
            OP,
            format!("need 1 <= vocab <= i32::MAX and col < codes_stride (vocab {vocab}, col {col}, codes_stride {stride})"),
        ));
    }
    let call_top_k = if a.row_sampling.is_some() { 1 } else { a.top_k };
    if call_top_k == 0 || a.cond_top_k == Some(0) || a.end.is_some_and(|e| e >= vocab) {
        return Err(Error::input(
            OP,
            format!(
                "need top_k, cond_top_k >= 1 and end < vocab {vocab} (top_k {}, cond_top_k {:?}, end {:?})",
                a.top_k, a.cond_top_k, a.end
            ),
        ));
    }
    if a.row_sampling.is_none() && !positive_temperature(a.temperature) {
        return Err(Error::input(
            OP,
            format!("temperature {} must be finite and positive", a.temperature),
        ));
    }
    let per_song = if a.cfg_scale.is_some() { 2 } else { 1 };
    check::at_least(OP, "logits", a.logits.len(), per_song * songs * vocab)?;
    check::at_least(OP, "codes", a.codes.len(), songs * stride)?;
    check::at_least(OP, "mode", a.mode.len(), songs)?;
    check::at_least(OP, "seeds", a.seeds.len(), 2 * songs)?;
    check::at_least(OP, "draws", a.draws.len(), songs)?;
    check::at_least(OP, "allow_end", a.allow_end.len(), songs)?;
    if let Some(r) = a.row_sampling {
        check::at_least(OP, "row_sampling", r.len(), 2 * songs)?;
    }
    // Each song's temperature and top-k: its own row, or the call's.
    let settings = |s: usize| match a.row_sampling {
        Some(r) => (f32::from_bits(r.0[2 * s] as u32), r.0[2 * s + 1]),
        // Below i32::MAX for any real use; saturating keeps a huge k meaning "every class".
        None => (a.temperature, i32::try_from(a.top_k).unwrap_or(i32::MAX)),
    };
    let codes = &mut a.codes.0[..songs * stride];
    for s in 0..songs {
        if codes[s * stride + col] >= 0 {
            continue;
        }
        let mode = draw_mode(OP, s, a.mode.0[s])?;
        if a.draws.0[s] < 0 {
            return Err(Error::input(
                OP,
                format!("song {s}: negative draw index {}", a.draws.0[s]),
            ));
        }
        let (temperature, top_k) = settings(s);
        if top_k < 1 || (mode == DrawMode::Noise && !positive_temperature(temperature)) {
            return Err(Error::input(
                OP,
                format!(
                    "song {s}: need top_k >= 1 and a finite positive temperature for a noise draw \
                     (top_k {top_k}, temperature {temperature})"
                ),
            ));
        }
    }
    let p = Params {
        cfg_scale: a.cfg_scale,
        cond_top_k: a.cond_top_k,
        end: a.end,
        draw_offset: a.draw_offset,
    };
    let rows = per_song * songs;
    let (logits, mode, seeds) = (&a.logits.0[..rows * vocab], &a.mode.0, &a.seeds.0);
    let (draws, allow_end) = (&a.draws.0, &a.allow_end.0);
    be.scratch.with(songs * vocab, |scratch| {
        be.install(|| {
            scratch
                .par_chunks_mut(vocab)
                .zip(codes.par_chunks_mut(stride))
                .enumerate()
                .for_each(|(s, (buf, code))| {
                    if code[col] >= 0 {
                        return; // Teacher forcing: the given code is kept.
                    }
                    let c = per_song * s * vocab;
                    let (temperature, top_k) = settings(s);
                    let u = (per_song * s + per_song - 1) * vocab;
                    let song = Song {
                        c: &logits[c..c + vocab],
                        u: &logits[u..u + vocab],
                        // Checked above for every song that draws.
                        mode: draw_mode(OP, s, mode[s]).unwrap_or(DrawMode::Greedy),
                        seed: u64::from(seeds[2 * s] as u32)
                            | (u64::from(seeds[2 * s + 1] as u32) << 32),
                        draw: u64::from(draws[s] as u32) + u64::from(p.draw_offset),
                        mask_end: allow_end[s] == 0,
                        temperature,
                        // At least 1: checked above for every song that draws.
                        top_k: top_k as usize,
                    };
                    // Below i32::MAX: vocab was checked.
                    code[col] = draw_song(&p, &song, buf) as i32;
                });
        });
    });
    Ok(())
}
